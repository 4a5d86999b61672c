// A real GCS JSON API for the tests: fake-gcs-server (built by scripts/setup.sh from Go modules) on loopback
// with a data directory of its own, and a recording proxy in front of it that shows which credentials each
// request carried (the emulator accepts any, and enforces no IAM).
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, promises as fs } from "node:fs";
import {
  createServer,
  request as httpRequest,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from "node:http";
import type { AddressInfo } from "node:net";
import * as os from "node:os";
import * as path from "node:path";
import { waitFor } from "../../lib/process.js";
import { fakeGcsBin } from "../../lib/toolchain.js";
import { freePort } from "./host.js";

export interface FakeGcs {
  /** `127.0.0.1:<port>`: the value of STORAGE_EMULATOR_HOST (Pulumi's gs:// backend, rclone, the runtime). */
  readonly host: string;
  /** `http://127.0.0.1:<port>` */
  readonly endpoint: string;
  readonly dataDir: string;
  /** A bucket, in the server's location (US-CENTRAL1 unless {@link startFakeGcs} was given another). */
  createBucket(name: string): Promise<void>;
  /** Writes an object (a simple media upload). */
  write(bucket: string, name: string, content: Buffer, contentType?: string): Promise<void>;
  /** Every object's name under `prefix` (all pages). */
  list(bucket: string, prefix?: string): Promise<string[]>;
  /** An object's content, or undefined when there is none. */
  read(bucket: string, name: string): Promise<string | undefined>;
  stop(): Promise<void>;
}

/**
 * Starts fake-gcs-server on a free loopback port, its objects on disk under a fresh directory; its buckets are
 * in `location` (as GCS names it: `EUROPE-WEST1`; the emulator sets one location for every bucket).
 */
export async function startFakeGcs(location = "US-CENTRAL1"): Promise<FakeGcs> {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "fake-gcs-"));
  const port = await freePort();
  const host = `127.0.0.1:${port}`;
  const endpoint = `http://${host}`;
  const log: string[] = [];
  const child: ChildProcess = spawn(
    fakeGcsBin(),
    [
      ...["-scheme", "http", "-host", "127.0.0.1", "-port", String(port)],
      ...["-backend", "filesystem", "-filesystem-root", path.join(dataDir, "objects")],
      ...["-public-host", host, "-external-url", endpoint, "-location", location, "-log-level", "warn"],
    ],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  for (const stream of [child.stdout!, child.stderr!])
    stream.on("data", (chunk: Buffer) => log.push(chunk.toString()));
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  try {
    await waitFor(`fake-gcs-server on ${host}`, 15_000, async () => {
      if (child.exitCode !== null) throw new Error(`exited ${child.exitCode}: ${log.join("").trim()}`);
      const response = await fetch(`${endpoint}/storage/v1/b?project=test`, {
        signal: AbortSignal.timeout(1_000),
      });
      return response.ok ? true : undefined;
    });
  } catch (error) {
    child.kill("SIGKILL");
    throw error;
  }
  const api = `${endpoint}/storage/v1/b`;
  return {
    host,
    endpoint,
    dataDir,
    async createBucket(name) {
      const response = await fetch(`${api}?project=test`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ name }),
      });
      if (!response.ok)
        throw new Error(`creating bucket ${name}: ${response.status} ${await response.text()}`);
    },
    async write(bucket, name, content, contentType = "application/octet-stream") {
      const query = new URLSearchParams({ uploadType: "media", name });
      const response = await fetch(
        `${endpoint}/upload/storage/v1/b/${encodeURIComponent(bucket)}/o?${query}`,
        {
          method: "POST",
          headers: { "content-type": contentType },
          body: content,
        },
      );
      if (!response.ok)
        throw new Error(`writing gs://${bucket}/${name}: ${response.status} ${await response.text()}`);
    },
    async list(bucket, prefix = "") {
      const names: string[] = [];
      let pageToken = "";
      do {
        const query = new URLSearchParams({ prefix, ...(pageToken ? { pageToken } : {}) });
        const response = await fetch(`${api}/${encodeURIComponent(bucket)}/o?${query}`);
        if (!response.ok) throw new Error(`listing gs://${bucket}/${prefix}: ${response.status}`);
        const page = (await response.json()) as { items?: { name: string }[]; nextPageToken?: string };
        names.push(...(page.items ?? []).map((item) => item.name));
        pageToken = page.nextPageToken ?? "";
      } while (pageToken);
      return names.sort();
    },
    async read(bucket, name) {
      const response = await fetch(
        `${api}/${encodeURIComponent(bucket)}/o/${encodeURIComponent(name)}?alt=media`,
      );
      if (response.status === 404) return undefined;
      if (!response.ok) throw new Error(`reading gs://${bucket}/${name}: ${response.status}`);
      return response.text();
    },
    async stop() {
      child.kill("SIGTERM");
      await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 5_000))]);
      if (child.exitCode === null) child.kill("SIGKILL");
      await fs.rm(dataDir, { recursive: true, force: true });
    },
  };
}

export interface RecordedRequest {
  readonly method: string;
  /** The path and query, decoded. */
  readonly url: string;
  readonly authorization: string | undefined;
  /** The whole body, with `keepBodies` (what a sync tried to upload). */
  readonly body?: Buffer;
}

export interface RecordingProxy {
  /** `127.0.0.1:<port>`, to use where the emulator's host would go. */
  readonly host: string;
  readonly requests: RecordedRequest[];
  /**
   * Decides, before a request goes on, whether GCS refuses it instead: a status (401 for a token it no longer
   * takes) or undefined to let it through. What an expiring token looks like from the client's side.
   */
  refuse: ((request: RecordedRequest) => Promise<number | undefined>) | undefined;
  stop(): Promise<void>;
}

/**
 * A loopback HTTP proxy to `target` (`127.0.0.1:<port>`) that records each request's method, path and
 * Authorization header: what GCS would check against IAM, which the emulator does not.
 */
/** A request's whole body. */
function readBody(req: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => resolve(Buffer.concat(chunks)));
    req.on("error", reject);
  });
}

export async function startRecordingProxy(
  target: string,
  { keepBodies = false }: { keepBodies?: boolean } = {},
): Promise<RecordingProxy> {
  const [targetHost, targetPort] = target.split(":");
  const requests: RecordedRequest[] = [];
  let refuse: RecordingProxy["refuse"];
  const forward = async (req: IncomingMessage, res: ServerResponse) => {
    const body = keepBodies ? await readBody(req) : undefined;
    const recorded = {
      method: req.method ?? "",
      url: decodeURIComponent(req.url ?? ""),
      authorization: req.headers.authorization,
      ...(body ? { body } : {}),
    };
    requests.push(recorded);
    const refused = await refuse?.(recorded);
    if (refused !== undefined) {
      req.resume();
      res.writeHead(refused, { "content-type": "application/json", connection: "close" });
      res.end(JSON.stringify({ error: { code: refused, message: "Invalid Credentials" } }));
      return;
    }
    const upstream = httpRequest(
      // The emulator serves path-style (XML API) downloads only on its public host: say it is that.
      {
        host: targetHost,
        port: Number(targetPort),
        method: req.method,
        path: req.url,
        headers: { ...req.headers, host: target },
      },
      (response) => {
        res.writeHead(response.statusCode ?? 502, response.headers);
        response.pipe(res);
      },
    );
    upstream.on("error", (error) => {
      res.writeHead(502);
      res.end(String(error));
    });
    if (body) upstream.end(body);
    else req.pipe(upstream);
  };
  const server: Server = createServer((req, res) => void forward(req, res));
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    host: `127.0.0.1:${port}`,
    requests,
    get refuse() {
      return refuse;
    },
    set refuse(decide) {
      refuse = decide;
    },
    stop: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections(); // a client's keep-alive connections would hold close() open
        server.close(() => resolve());
      }),
  };
}

export interface MintedToken {
  /** The account the token is for (from the URL). */
  readonly target: string;
  readonly delegates: string[];
  /** The caller's credentials (the runtime's own token). */
  readonly authorization: string | undefined;
  readonly accessToken: string;
}

export interface TokenServer {
  /** `http://127.0.0.1:<port>`: the IAM Credentials endpoint (AGENT_SANDBOX_IAMCREDENTIALS_ENDPOINT). */
  readonly endpoint: string;
  readonly minted: MintedToken[];
  /** Lifetime of the tokens it issues from now on (default: what the request asks). */
  lifetimeSeconds: number | undefined;
  stop(): Promise<void>;
}

/**
 * IAM Credentials' generateAccessToken on loopback: GCP's IAM cannot run here, so this stands in for it
 * and records each call (target account, delegation chain, caller's credentials). Tokens are
 * `<prefix>-<n>-<account id>`, unique to the run; an unparsable request is answered 400 as Google would.
 */
export async function startTokenServer(prefix: string): Promise<TokenServer> {
  const minted: MintedToken[] = [];
  const state: { lifetimeSeconds: number | undefined } = { lifetimeSeconds: undefined };
  const server: Server = createServer((req, res) => {
    const match = /^\/v1\/projects\/-\/serviceAccounts\/([^/:]+):generateAccessToken$/.exec(
      decodeURIComponent(req.url ?? ""),
    );
    let body = "";
    req.on("data", (chunk: Buffer) => (body += chunk.toString()));
    req.on("end", () => {
      let request: { delegates?: string[]; lifetime?: string; scope?: string[] };
      try {
        request = JSON.parse(body) as typeof request;
      } catch {
        request = {};
      }
      if (req.method !== "POST" || !match || !request.scope?.length) {
        res.writeHead(400, { "content-type": "application/json" });
        res.end(JSON.stringify({ error: { code: 400, message: "bad generateAccessToken request" } }));
        return;
      }
      const target = match[1]!;
      const seconds = state.lifetimeSeconds ?? Number.parseInt(request.lifetime ?? "3600", 10);
      const accessToken = `${prefix}-${minted.length + 1}-${target.split("@")[0]}`;
      minted.push({
        target,
        delegates: request.delegates ?? [],
        authorization: req.headers.authorization,
        accessToken,
      });
      res.writeHead(200, { "content-type": "application/json" });
      res.end(
        JSON.stringify({ accessToken, expireTime: new Date(Date.now() + seconds * 1000).toISOString() }),
      );
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    endpoint: `http://127.0.0.1:${port}`,
    minted,
    get lifetimeSeconds() {
      return state.lifetimeSeconds;
    },
    set lifetimeSeconds(value) {
      state.lifetimeSeconds = value;
    },
    stop: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
