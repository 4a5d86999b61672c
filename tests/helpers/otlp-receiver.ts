// An OTLP/HTTP traces receiver on loopback (what a collector's `otlp` receiver does with JSON): the runtime's
// exporter (lib/telemetry.ts) sends here, and the tests and the benchmarks read the spans it received.
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";

/** One received span, its times in milliseconds since the epoch and its attributes flattened. */
export interface ReceivedSpan {
  readonly traceId: string;
  readonly spanId: string;
  readonly parentSpanId: string | undefined;
  readonly name: string;
  readonly startMs: number;
  readonly endMs: number;
  readonly durationMs: number;
  readonly attributes: Readonly<Record<string, string | number | boolean>>;
  /** 2: the span recorded an error (OTLP's STATUS_CODE_ERROR). */
  readonly statusCode: number;
  /** Its resource's `service.name`. */
  readonly service: string | undefined;
}

interface OtlpValue {
  stringValue?: string;
  intValue?: number | string;
  doubleValue?: number;
  boolValue?: boolean;
}
interface OtlpAttribute {
  key: string;
  value: OtlpValue;
}
type Nanos = number | string | { low: number; high: number };

const nanosToMs = (value: Nanos): number =>
  typeof value === "object" ? (value.high * 2 ** 32 + (value.low >>> 0)) / 1e6 : Number(value) / 1e6;

const flatten = (attributes: readonly OtlpAttribute[] = []) =>
  Object.fromEntries(
    attributes.map(({ key, value }) => [
      key,
      value.stringValue ??
        (value.intValue !== undefined ? Number(value.intValue) : undefined) ??
        value.doubleValue ??
        value.boolValue ??
        "",
    ]),
  );

export interface OtlpReceiver {
  /** Where to export to: `http://127.0.0.1:<port>/v1/traces`. */
  readonly url: string;
  readonly spans: ReceivedSpan[];
  close(): Promise<void>;
}

/** Listens on a free loopback port; every span of every export is kept in `spans`, in arrival order. */
export async function otlpReceiver(): Promise<OtlpReceiver> {
  const spans: ReceivedSpan[] = [];
  const server: Server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on("data", (chunk: Buffer) => chunks.push(chunk));
    request.on("end", () => {
      if (request.url !== "/v1/traces" || request.method !== "POST") {
        response.writeHead(404).end();
        return;
      }
      try {
        const body = JSON.parse(Buffer.concat(chunks).toString("utf8")) as {
          resourceSpans?: {
            resource?: { attributes?: OtlpAttribute[] };
            scopeSpans?: {
              spans?: {
                traceId: string;
                spanId: string;
                parentSpanId?: string;
                name: string;
                startTimeUnixNano: Nanos;
                endTimeUnixNano: Nanos;
                attributes?: OtlpAttribute[];
                status?: { code?: number };
              }[];
            }[];
          }[];
        };
        for (const resource of body.resourceSpans ?? []) {
          const service = flatten(resource.resource?.attributes)["service.name"];
          for (const scope of resource.scopeSpans ?? [])
            for (const span of scope.spans ?? []) {
              const startMs = nanosToMs(span.startTimeUnixNano);
              const endMs = nanosToMs(span.endTimeUnixNano);
              spans.push({
                traceId: span.traceId,
                spanId: span.spanId,
                parentSpanId: span.parentSpanId || undefined,
                name: span.name,
                startMs,
                endMs,
                durationMs: endMs - startMs,
                attributes: flatten(span.attributes),
                statusCode: span.status?.code ?? 0,
                service: typeof service === "string" ? service : undefined,
              });
            }
        }
        response.writeHead(200, { "content-type": "application/json" }).end("{}");
      } catch (error) {
        response.writeHead(400, { "content-type": "text/plain" }).end((error as Error).message);
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/v1/traces`,
    spans,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/** The spans of `spans` under `root` (its children, theirs, ...), in start order. */
export function descendants(spans: readonly ReceivedSpan[], root: ReceivedSpan): ReceivedSpan[] {
  const out: ReceivedSpan[] = [];
  const parents = new Set([root.spanId]);
  for (let grew = true; grew;) {
    grew = false;
    for (const span of spans)
      if (span.parentSpanId && parents.has(span.parentSpanId) && !parents.has(span.spanId)) {
        parents.add(span.spanId);
        out.push(span);
        grew = true;
      }
  }
  return out.sort((a, b) => a.startMs - b.startMs);
}
