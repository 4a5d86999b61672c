import { readFileSync } from "node:fs";
import * as http from "node:http";
import * as https from "node:https";
import { rootCertificates } from "node:tls";
import { GATEWAY_PROVIDERS, type GatewayProvider } from "../../components/tenant/secrets.js";
import { tenantAddresses } from "../../lib/subnets.js";
import type { CredentialGatewayConfig } from "../../stacks/config.js";
import type { Queryable } from "../store/db.js";
import type { SecretBox } from "../secrets.js";
import { openSecrets } from "../tenants/project-secrets.js";
import { recordGatewayRequest, type GatewayRequest } from "../store/audit.js";
import { liveTenantSubnets, tenantAllowlist } from "../store/tenants.js";

/**
 * The credential gateway (docs/security.md "Keys that never enter the sandbox"). For each tenant
 * it listens on the tenant's own gateway address (the `.1` of its /24, on its own bridge), which only that
 * tenant's sandbox can reach (the tenant firewall accepts the port from its own subnet on its own bridge,
 * and drops the rest); a connection from any other address is refused all the same. A request to
 * `/<provider>/<path>` goes to that provider's API over TLS (certificates verified) with the project's own
 * key in place of whatever credentials the sandbox sent (its placeholder), if the API's host is in the
 * project's allowlist. Each request is recorded (time, host, path, status, bytes; never the key).
 */
export interface CredentialGatewayOptions {
  readonly db: Queryable;
  readonly box: SecretBox;
  /** The port on every tenant's gateway address. */
  readonly port: number;
  /** Where each provider's API is, when not its public one. */
  readonly upstreams?: Partial<Record<GatewayProvider, string>>;
  /** CA certificates (PEM) trusted for upstreams besides the system's. */
  readonly ca?: string;
  /** `host` → `address:port` to connect to instead of what DNS says (curl's --resolve). */
  readonly resolve?: Readonly<Record<string, string>>;
  /** How often the listeners follow the tenants (a new bridge, a deleted project), default 2 s. */
  readonly syncMs?: number;
  /** Requests one project may have in flight at once (default 32); one more is answered 429. */
  readonly maxConcurrentRequests?: number;
  /** Seconds a client has to send a request's headers (default 20); a slower one is answered 408. */
  readonly headersTimeoutSeconds?: number;
  readonly log?: (message: string, fields?: Record<string, unknown>) => void;
}

interface Listener {
  readonly server: http.Server;
  readonly projectId: string;
  readonly sandbox: string;
  /** Requests being served now. */
  inFlight: number;
}

/** Connections one listener holds open at once: a sandbox opening more waits in its own backlog. */
const MAX_CONNECTIONS = 256;
/** An upstream that has sent nothing for this long is given up (a model's answer streams well within it). */
const UPSTREAM_IDLE_MS = 600_000;

/** The headers a sandbox may send that carry credentials: dropped, whatever they say. */
const CREDENTIAL_HEADERS = ["authorization", "x-api-key", "x-goog-api-key", "proxy-authorization"];
/** Hop-by-hop headers (RFC 9110 §7.6.1), never forwarded. */
const HOP_BY_HOP = [
  "connection",
  "keep-alive",
  "proxy-connection",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade",
];

/** The header the provider reads its key from. */
function authHeader(provider: GatewayProvider, key: string): Record<string, string> {
  switch (provider) {
    case "anthropic":
      return { "x-api-key": key };
    case "openai":
      return { authorization: `Bearer ${key}` };
    case "gemini":
      return { "x-goog-api-key": key };
  }
}

/** Whether `host` is allowed by an allowlist entry (`api.example.com`, or `.example.com` and below). */
export function allowlisted(host: string, allowlist: readonly string[]): boolean {
  return allowlist.some((entry) =>
    entry.startsWith(".") ? host === entry.slice(1) || host.endsWith(entry) : host === entry,
  );
}

/** An IPv4-mapped address (`::ffff:10.0.0.2`) as plain IPv4. */
const plain = (address: string | undefined) => (address ?? "").replace(/^::ffff:/, "");

/**
 * The request target as a URL, or why it cannot be one. Only the origin form (`/path?query`, RFC 9112
 * §3.2.1) is served: an absolute or authority form (`http://x/`, `host:443`) or a target that starts `//`
 * (which the URL parser would read as a host) is not a path on this gateway.
 */
export function gatewayTarget(target: string | undefined): URL | string {
  if (!target?.startsWith("/") || target.startsWith("//"))
    return `the request target must be a path (/<provider>/...), not ${JSON.stringify((target ?? "").slice(0, 64))}`;
  try {
    return new URL(`http://gateway${target}`);
  } catch {
    return `the request target ${JSON.stringify(target.slice(0, 64))} is not a valid path`;
  }
}

export class CredentialGateway {
  private readonly listeners = new Map<string, Listener>();
  private timer: NodeJS.Timeout | undefined;
  private syncing: Promise<void> | undefined;
  private readonly ca: string[] | undefined;

  constructor(private readonly options: CredentialGatewayOptions) {
    this.ca = options.ca ? [...rootCertificates, options.ca] : undefined;
  }

  /** Listens for every tenant now, and follows them from then on. */
  async start(): Promise<void> {
    await this.sync();
    this.timer = setInterval(() => void this.sync(), this.options.syncMs ?? 2000);
    this.timer.unref();
  }

  /** The gateway addresses listened on now, each with its project. */
  get addresses(): ReadonlyMap<string, string> {
    return new Map([...this.listeners].map(([address, l]) => [address, l.projectId]));
  }

  /** Opens a listener for each tenant with a subnet whose bridge exists, closes those of tenants gone. */
  sync(): Promise<void> {
    this.syncing ??= this.syncOnce().finally(() => (this.syncing = undefined));
    return this.syncing;
  }

  private async syncOnce(): Promise<void> {
    let rows: { project_id: string; subnet: string }[];
    try {
      rows = await liveTenantSubnets(this.options.db);
    } catch (error) {
      this.options.log?.("credential gateway: tenants not read", { error: (error as Error).message });
      return;
    }
    const wanted = new Map(rows.map((row) => [tenantAddresses(row.subnet).gateway, row]));
    for (const [address, listener] of this.listeners) {
      const row = wanted.get(address);
      if (row?.project_id === listener.projectId) continue;
      this.listeners.delete(address);
      listener.server.close();
      listener.server.closeAllConnections();
    }
    for (const [address, row] of wanted) {
      if (this.listeners.has(address)) continue;
      const sandbox = tenantAddresses(row.subnet).sandbox;
      const listener: Listener = {
        server: http.createServer({
          headersTimeout: (this.options.headersTimeoutSeconds ?? 20) * 1000,
          requestTimeout: 0, // a request body may stream for as long as the upstream takes it
          connectionsCheckingInterval: 1000,
        }),
        projectId: row.project_id,
        sandbox,
        inFlight: 0,
      };
      const { server } = listener;
      server.maxConnections = MAX_CONNECTIONS;
      // Nothing a sandbox sends may end the process: whatever escapes the handler is answered 500 here.
      server.on("request", (request: http.IncomingMessage, response: http.ServerResponse) =>
        this.handle(listener, request, response).catch((error: Error) => {
          this.options.log?.("credential gateway: request failed", {
            projectId: row.project_id,
            error: error.message,
          });
          if (!response.headersSent) {
            response.writeHead(500, { "content-type": "application/json", connection: "close" });
            response.end(`${JSON.stringify({ error: "credential_gateway", message: "internal error" })}\n`);
          } else response.destroy();
        }),
      );
      const listening = await new Promise<boolean>((resolve) => {
        server.once("error", () => resolve(false)); // no bridge yet (EADDRNOTAVAIL): the next sync
        server.listen(this.options.port, address, () => resolve(true));
      });
      if (listening) {
        server.on("error", (error) =>
          this.options.log?.("credential gateway listener failed", { address, error: error.message }),
        );
        this.listeners.set(address, listener);
      }
    }
  }

  async close(): Promise<void> {
    clearInterval(this.timer);
    await this.syncing;
    const closing = [...this.listeners.values()].map(
      ({ server }) =>
        new Promise<void>((resolve) => {
          server.close(() => resolve());
          server.closeAllConnections();
        }),
    );
    this.listeners.clear();
    await Promise.all(closing);
  }

  private async handle(
    listener: Listener,
    request: http.IncomingMessage,
    response: http.ServerResponse,
  ): Promise<void> {
    const { projectId, sandbox } = listener;
    const started = Date.now();
    const target = gatewayTarget(request.url);
    const url = typeof target === "string" ? new URL("http://gateway/") : target;
    const [, first = "", ...rest] = url.pathname.split("/");
    const provider = (Object.keys(GATEWAY_PROVIDERS) as GatewayProvider[]).find((p) => p === first);
    const upstream = new URL(
      provider
        ? (this.options.upstreams?.[provider] ?? GATEWAY_PROVIDERS[provider].upstream)
        : "https://invalid",
    );
    const path = `/${rest.join("/")}`;
    let requestBytes = 0;
    let responseBytes = 0;
    const record = (status: number | null, error: string | null) => {
      const entry: GatewayRequest = {
        at: new Date(started).toISOString(),
        provider: provider ?? first,
        host: upstream.hostname,
        method: request.method ?? "GET",
        path: provider ? path : url.pathname,
        status,
        request_bytes: requestBytes,
        response_bytes: responseBytes,
        duration_ms: Date.now() - started,
        error,
      };
      recordGatewayRequest(this.options.db, projectId, entry).catch((e: Error) =>
        this.options.log?.("credential gateway: request not recorded", { projectId, error: e.message }),
      );
    };
    const refuse = (status: number, message: string, recorded = true) => {
      request.resume();
      if (recorded) record(status, message);
      response.writeHead(status, { "content-type": "application/json" });
      response.end(`${JSON.stringify({ error: "credential_gateway", message })}\n`);
    };

    // The tenant's own sandbox only (its firewall already drops everyone else's packets).
    if (plain(request.socket.remoteAddress) !== sandbox)
      return refuse(403, `this gateway serves project ${projectId}'s sandbox only`, false);
    if (typeof target === "string") return refuse(400, target);
    const limit = this.options.maxConcurrentRequests ?? 32;
    if (listener.inFlight >= limit)
      return refuse(429, `project ${projectId} has ${limit} requests in flight through the gateway already`);
    listener.inFlight += 1;
    let counted = true;
    const settle = () => {
      if (counted) listener.inFlight -= 1;
      counted = false;
    };
    response.once("close", settle);
    if (!provider)
      return refuse(
        404,
        `no provider ${JSON.stringify(first)}: the gateway serves /${Object.keys(GATEWAY_PROVIDERS).join(", /")}`,
      );
    const secretName = GATEWAY_PROVIDERS[provider].secret;
    let key: string | undefined;
    let allowlist: string[] = [];
    try {
      const secrets = await openSecrets(this.options.db, this.options.box, projectId);
      key = secrets.find((s) => s.name === secretName && s.delivery === "gateway")?.value;
      allowlist = (await tenantAllowlist(this.options.db, projectId)) ?? [];
    } catch (error) {
      return refuse(503, `the project's keys could not be read: ${(error as Error).message}`);
    }
    if (key === undefined)
      return refuse(
        403,
        `project ${projectId} has no ${secretName} for the gateway (PUT /projects/{id}/secrets/${secretName})`,
      );
    if (!allowlisted(upstream.hostname, allowlist))
      return refuse(403, `${upstream.hostname} is not in the project's allowlist`);

    const query = new URLSearchParams(url.search);
    query.delete("key"); // a Gemini client's key in the URL: the gateway's header carries the real one
    const headers: http.OutgoingHttpHeaders = {};
    for (const [name, value] of Object.entries(request.headers))
      if (!CREDENTIAL_HEADERS.includes(name) && !HOP_BY_HOP.includes(name) && name !== "host")
        headers[name] = value;
    Object.assign(headers, authHeader(provider, key), { host: upstream.host });
    const [address, port] = (this.options.resolve?.[upstream.hostname] ?? "").split(":");
    const outbound = https.request({
      method: request.method,
      host: address || upstream.hostname,
      port: Number(port || upstream.port || 443),
      servername: upstream.hostname,
      path: `${upstream.pathname.replace(/\/$/, "")}${path}${query.size > 0 ? `?${query}` : ""}`,
      headers,
      ...(this.ca ? { ca: this.ca } : {}),
      timeout: UPSTREAM_IDLE_MS,
    });
    // The sandbox's client gone (answered or not): the upstream request goes with it, at once.
    response.once("close", () => {
      if (!response.writableFinished) outbound.destroy(new Error("the sandbox's client went away"));
    });
    outbound.on("response", (answer) => {
      const out: http.OutgoingHttpHeaders = {};
      for (const [name, value] of Object.entries(answer.headers))
        if (!HOP_BY_HOP.includes(name)) out[name] = value;
      response.writeHead(answer.statusCode ?? 502, out);
      answer.on("data", (chunk: Buffer) => (responseBytes += chunk.length));
      answer.pipe(response);
      answer.on("end", () => record(answer.statusCode ?? null, null));
      answer.on("error", (error) => record(answer.statusCode ?? null, error.message));
    });
    outbound.on("timeout", () => outbound.destroy(new Error("the upstream did not answer in time")));
    outbound.on("error", (error) => {
      if (response.headersSent) {
        response.destroy(error);
        return;
      }
      record(null, error.message);
      response.writeHead(502, { "content-type": "application/json" });
      response.end(
        `${JSON.stringify({ error: "credential_gateway", message: `${upstream.hostname}: ${error.message}` })}\n`,
      );
    });
    request.on("data", (chunk: Buffer) => (requestBytes += chunk.length));
    request.on("error", (error) => outbound.destroy(error));
    request.pipe(outbound);
  }
}

/** The gateway's settings from `agent-sandbox:tenants.credentialGateway` (undefined: port 0, none runs). */
export function credentialGatewayOptions(
  config: CredentialGatewayConfig,
):
  | Pick<
      CredentialGatewayOptions,
      "port" | "upstreams" | "ca" | "resolve" | "maxConcurrentRequests" | "headersTimeoutSeconds"
    >
  | undefined {
  if (config.port === 0) return undefined;
  return {
    port: config.port,
    maxConcurrentRequests: config.maxConcurrentRequests,
    headersTimeoutSeconds: config.headersTimeoutSeconds,
    upstreams: config.upstreams,
    ca: config.caFile ? readFileSync(config.caFile, "utf8") : undefined,
    resolve: config.resolve,
  };
}
