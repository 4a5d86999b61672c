// OpenTelemetry traces of the runtime (issue 43; `agent-sandbox:runtime.telemetry`, stacks/config/runtime.ts): every API request, database query, operation (its wait in
// the queue, the engine's start, each resource step of the stack), the warm pool's claims and checks and a
// sandbox's commands, as spans of the OpenTelemetry SDK, exported over OTLP/HTTP to
// `runtime.telemetry.otlpEndpoint`. Off by default: with no endpoint no SDK starts, and the API's tracer
// hands out spans that record nothing.
import {
  context,
  INVALID_SPAN_CONTEXT,
  propagation,
  ROOT_CONTEXT,
  SpanStatusCode,
  trace,
  type Attributes,
  type Context,
  type Span,
} from "@opentelemetry/api";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-http";
import { Resource } from "@opentelemetry/resources";
import { BatchSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { NodeTracerProvider } from "@opentelemetry/sdk-trace-node";

/** The instrumentation scope every span of the runtime is recorded under. */
const SCOPE = "agent-sandbox";

const tracer = () => trace.getTracer(SCOPE);

/** Whether spans are exported (telemetry started): off, {@link inSpan} costs a call and nothing more. */
let exporting = false;

/** The span work gets while telemetry is off: it records nothing. */
const NOT_RECORDING = trace.wrapSpanContext(INVALID_SPAN_CONTEXT);

/** Whether spans are exported now: a caller skips making a span's attributes when they are not. */
export const tracing = (): boolean => exporting;

/** Where spans go: `runtime.telemetry`. */
export interface TelemetrySettings {
  readonly otlpEndpoint?: string | undefined;
  readonly serviceName: string;
  readonly exportDelayMillis: number;
}

/**
 * Starts exporting spans when `settings` names an endpoint; answers how to flush and stop (nothing when
 * telemetry is off).
 */
export function startTelemetry(settings: TelemetrySettings): { stop(): Promise<void> } | undefined {
  if (!settings.otlpEndpoint) return undefined;
  const provider = new NodeTracerProvider({
    resource: new Resource({ "service.name": settings.serviceName }),
  });
  provider.addSpanProcessor(
    new BatchSpanProcessor(new OTLPTraceExporter({ url: settings.otlpEndpoint }), {
      scheduledDelayMillis: settings.exportDelayMillis,
    }),
  );
  provider.register();
  exporting = true;
  return {
    async stop() {
      exporting = false;
      await provider.shutdown();
      trace.disable();
      context.disable();
      propagation.disable();
    },
  };
}

/** Marks `span` failed with `error` (its message, and the exception as an event). */
export function spanFailed(span: Span, error: unknown): void {
  span.recordException(error as Error);
  span.setStatus({ code: SpanStatusCode.ERROR, message: (error as Error)?.message });
}

/**
 * Runs `work` in a span named `name` (the current one's child, or with `root` a trace of its own: work that
 * whatever woke it did not cause): ended when `work` settles, an error recorded on it and thrown on.
 */
export function inSpan<T>(
  name: string,
  attributes: Attributes,
  work: (span: Span) => Promise<T>,
  options: { root?: boolean } = {},
): Promise<T> {
  if (!exporting) return work(NOT_RECORDING);
  const parent = options.root ? ROOT_CONTEXT : context.active();
  return tracer().startActiveSpan(name, { attributes }, parent, async (span) => {
    try {
      return await work(span);
    } catch (error) {
      spanFailed(span, error);
      throw error;
    } finally {
      span.end();
    }
  });
}

/**
 * A span started now (or at `startTime`) under `parent` (default: the current one; `ROOT` for a trace of its
 * own), ended by the caller.
 */
export function startSpan(
  name: string,
  attributes: Attributes,
  options: { parent?: Context; startTime?: Date } = {},
): Span {
  return tracer().startSpan(
    name,
    { attributes, ...(options.startTime ? { startTime: options.startTime } : {}) },
    options.parent ?? context.active(),
  );
}

/** The parent of a span that starts a trace of its own. */
export const ROOT = ROOT_CONTEXT;

/** The current context with `span` as its span: what a span started later under it is given. */
export function contextOf(span: Span): Context {
  return trace.setSpan(context.active(), span);
}

/** Runs `work` with `span` current (spans started inside are its children). */
export function withSpan<T>(span: Span, work: () => T): T {
  return context.with(contextOf(span), work);
}
