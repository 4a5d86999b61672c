// A small client of the Kubernetes API: JSON requests and the exec websocket, over node:https with the
// kubeconfig's CA and credentials. The tenant's objects are the tenant stack's (Pulumi's Kubernetes provider);
// the runtime only reads them, deletes what a destroyed stack leaves, and runs commands in the sandbox Pod.
import { Agent, request as httpsRequest, type RequestOptions } from "node:https";
import WebSocket from "ws";
import type { ClusterAccess } from "./kubeconfig.js";

/** The API server answered with an error status; `reason` and `message` are its `Status`'s. */
export class KubernetesApiError extends Error {
  constructor(
    readonly method: string,
    readonly apiPath: string,
    readonly status: number,
    readonly reason: string,
    readonly detail: string,
  ) {
    super(`${method} ${apiPath}: ${status} ${reason}${detail ? `: ${detail}` : ""}`);
    this.name = "KubernetesApiError";
  }
}

/** No answer from the API server at all (refused, unresolvable, reset, timed out). */
export class ClusterUnreachableError extends Error {
  constructor(
    readonly server: string,
    readonly code: string,
  ) {
    super(`the cluster's API server ${server} is unreachable (${code})`);
    this.name = "ClusterUnreachableError";
  }
}

/** Worth another try after a pause: the server could not be reached, or said it is busy or starting. */
export const isTransient = (error: unknown): boolean =>
  error instanceof ClusterUnreachableError ||
  (error instanceof KubernetesApiError && [429, 502, 503, 504].includes(error.status));

export interface Backoff {
  /** Tries in all (the first included). */
  readonly attempts: number;
  readonly initialMs: number;
  readonly maxMs: number;
}

export const DEFAULT_BACKOFF: Backoff = { attempts: 6, initialMs: 500, maxMs: 8_000 };

/**
 * Runs `operation`, again after a doubling pause (with jitter) while it fails transiently; the last error is
 * thrown as it is. A refusal (4xx, and 500: server-side apply answers a bad object with 500) is not retried.
 */
export async function withBackoff<T>(
  operation: () => Promise<T>,
  backoff: Backoff = DEFAULT_BACKOFF,
  onRetry?: (error: unknown, attempt: number, waitMs: number) => void,
): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await operation();
    } catch (error) {
      if (!isTransient(error) || attempt >= backoff.attempts) throw error;
      const base = Math.min(backoff.maxMs, backoff.initialMs * 2 ** (attempt - 1));
      const waitMs = Math.round(base / 2 + (Math.random() * base) / 2);
      onRetry?.(error, attempt, waitMs);
      await new Promise((resolve) => setTimeout(resolve, waitMs));
    }
  }
}

const NETWORK_CODES = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ETIMEDOUT",
  "EPIPE",
]);

export class KubernetesClient {
  private readonly agent: Agent;

  constructor(
    readonly access: ClusterAccess,
    private readonly timeoutMs = 30_000,
  ) {
    this.agent = new Agent({ keepAlive: true, maxSockets: 16, ...this.tls() });
  }

  private tls() {
    return {
      ca: this.access.ca,
      cert: this.access.clientCert,
      key: this.access.clientKey,
      servername: this.access.tlsServerName,
      rejectUnauthorized: !this.access.insecureSkipTlsVerify,
    };
  }

  private headers(): Record<string, string> {
    const token = this.access.token?.();
    return token ? { authorization: `Bearer ${token}` } : {};
  }

  /**
   * One request; the decoded JSON body (undefined for an empty one). Throws KubernetesApiError for a status of
   * 400 or more, ClusterUnreachableError when nothing answered.
   */
  async request<T = unknown>(
    method: string,
    apiPath: string,
    body?: unknown,
    contentType = "application/json",
  ): Promise<T> {
    const payload = body === undefined ? undefined : JSON.stringify(body);
    await this.refresh();
    const options: RequestOptions = {
      method,
      agent: this.agent,
      headers: {
        ...this.headers(),
        accept: "application/json",
        ...(payload === undefined
          ? {}
          : { "content-type": contentType, "content-length": String(Buffer.byteLength(payload)) }),
      },
    };
    return new Promise<T>((resolve, reject) => {
      const req = httpsRequest(`${this.access.server}${apiPath}`, options, (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (chunk: Buffer) => chunks.push(chunk));
        res.on("error", (error) => reject(this.networkError(error)));
        res.on("end", () => {
          const text = Buffer.concat(chunks).toString("utf8");
          let parsed: unknown;
          try {
            parsed = text === "" ? undefined : JSON.parse(text);
          } catch {
            parsed = text;
          }
          const status = res.statusCode ?? 0;
          if (status < 400) return resolve(parsed as T);
          const record = (typeof parsed === "object" && parsed !== null ? parsed : {}) as {
            reason?: string;
            message?: string;
          };
          reject(
            new KubernetesApiError(
              method,
              apiPath,
              status,
              record.reason ?? res.statusMessage ?? "",
              record.message ?? (typeof parsed === "string" ? parsed.slice(0, 500) : ""),
            ),
          );
        });
      });
      req.setTimeout(this.timeoutMs, () =>
        req.destroy(Object.assign(new Error("timeout"), { code: "ETIMEDOUT" })),
      );
      req.on("error", (error) => reject(this.networkError(error)));
      req.end(payload);
    });
  }

  /** The object at `apiPath`, or undefined when it does not exist (404). */
  async get<T = unknown>(apiPath: string): Promise<T | undefined> {
    try {
      return await this.request<T>("GET", apiPath);
    } catch (error) {
      if (error instanceof KubernetesApiError && error.status === 404) return undefined;
      throw error;
    }
  }

  /** Deletes the object at `apiPath`; false when it was already gone. */
  async delete(
    apiPath: string,
    propagationPolicy: "Foreground" | "Background" = "Background",
  ): Promise<boolean> {
    try {
      await this.request("DELETE", apiPath, { kind: "DeleteOptions", apiVersion: "v1", propagationPolicy });
      return true;
    } catch (error) {
      if (error instanceof KubernetesApiError && error.status === 404) return false;
      throw error;
    }
  }

  /** Makes the credentials current; a failure to mint them is the cluster's being out of reach. */
  private async refresh(): Promise<void> {
    try {
      await this.access.refresh?.();
    } catch (error) {
      throw new ClusterUnreachableError(this.access.server, `no credentials: ${(error as Error).message}`);
    }
  }

  /** A websocket to `apiPath` (`wss://`), offering `protocols` in order, with the client's TLS and token. */
  async websocket(apiPath: string, protocols: readonly string[]): Promise<WebSocket> {
    await this.refresh();
    const url = `${this.access.server.replace(/^https:/, "wss:")}${apiPath}`;
    return new WebSocket(url, [...protocols], {
      ...this.tls(),
      headers: this.headers(),
      handshakeTimeout: this.timeoutMs,
      perMessageDeflate: false,
    });
  }

  /** Classifies a failure that came before any answer. */
  networkError(error: Error): Error {
    const code = (error as NodeJS.ErrnoException).code;
    return code && NETWORK_CODES.has(code) ? new ClusterUnreachableError(this.access.server, code) : error;
  }

  close(): void {
    this.agent.destroy();
  }
}
