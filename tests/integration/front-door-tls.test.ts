// The GCP host's front door (issue 21): a real Caddy (Debian's 2.6.2) with the config the startup script
// writes (lib/host/caddy.ts, its public form), here with Caddy's own CA as the issuer (`gcp.tls.issuer:
// internal`; the ACME path is the same automation with another issuer) and loopback ports standing in for
// 443 and 80. Upstreams are this test's servers in the runtime's place; a dev-server route is added by the
// FrontDoorRoute resource's own handler, as a tenant stack does.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  createServer,
  request as httpRequest,
  type ClientRequest,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type Server,
} from "node:http";
import { request as httpsRequest } from "node:https";
import { connect as tlsConnect, type PeerCertificate } from "node:tls";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import * as path from "node:path";
import { WebSocket, WebSocketServer } from "ws";
import { caddyAdmin, caddyFrontDoor, PLATFORM_ROUTE_ID, stopCaddy } from "../../lib/host/caddy.js";
import { frontDoorHost, frontDoorRoutes } from "../../lib/front-door.js";
import { waitFor } from "../../lib/process.js";
import { frontDoorRouteHandler } from "../../provider/resources/front-door-route.js";
import { startPebble, type Pebble } from "../helpers/pebble.js";

const DOMAIN = "sandboxes.example.test";
const PROJECT_ID = "0f3a9c2b-7d41-4e5a-9b1c-2d3e4f5a6b7c";
const dir = mkdtempSync(path.join(tmpdir(), "caddy-front-door-tls-"));
const storageDir = path.join(dir, "storage");
const HTTPS_PORT = 29443;
const HTTP_PORT = 29081;
const ADMIN_PORT = 29021;
let api: Server;
let terminal: Server;
let devServer: Server;
let ports: { api: number; terminal: number; dev: number };
const seen: { path: string; headers: IncomingHttpHeaders }[] = [];
/** The names the runtime's place says it serves when Caddy asks before an on-demand certificate. */
const served = new Set<string>([DOMAIN, `api.${DOMAIN}`]);
const asked: string[] = [];
const E2B_SANDBOX = "5b0c7e1a-2f3d-4c6b-8a9e-0d1c2b3a4f5e";

const options = () => ({
  port: HTTPS_PORT,
  adminPort: ADMIN_PORT,
  configDir: path.join(dir, "etc"),
  logDir: path.join(dir, "log"),
  runDir: path.join(dir, "run"),
  public: {
    domain: DOMAIN,
    httpPort: HTTP_PORT,
    apiUpstream: `127.0.0.1:${ports.api}`,
    terminalUpstream: `127.0.0.1:${ports.terminal}`,
    issuer: { module: "internal" as const },
    storageDir,
  },
});

/** Caddy's own root: the only certificate a client of this front door is told to trust. */
const rootCa = () => readFileSync(path.join(storageDir, "pki/authorities/local/root.crt"));

interface Answer {
  status: number;
  headers: IncomingHttpHeaders;
  body: string;
}

/** The answer to a request made with `send` (http's or https's `request`), read whole. */
function answered(send: (done: (res: IncomingMessage) => void) => ClientRequest): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = send((res) => {
      let body = "";
      res.on("data", (chunk) => (body += chunk));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
    });
    req.on("error", reject);
    req.end();
  });
}

/** An HTTPS request to `host` on a front door, verified against `ca` (name and chain): Caddy's root by default. */
function httpsGet(
  host: string,
  pathname: string,
  headers: Record<string, string> = {},
  on: { port: number; ca: string | Buffer } = { port: HTTPS_PORT, ca: rootCa() },
): Promise<Answer> {
  const options = {
    host: "127.0.0.1",
    port: on.port,
    servername: host,
    path: pathname,
    ca: on.ca,
    agent: false,
  };
  return answered((done) => httpsRequest({ ...options, headers: { host, ...headers } }, done));
}

function httpGet(host: string, pathname: string): Promise<Answer> {
  const options = { host: "127.0.0.1", port: HTTP_PORT, path: pathname, headers: { host }, agent: false };
  return answered((done) => httpRequest(options, done));
}

/** The certificate a front door presents for `servername` if `ca` verifies it, or the handshake's error. */
function certificateFor(
  servername: string,
  on: { port: number; ca: string | Buffer } = { port: HTTPS_PORT, ca: rootCa() },
): Promise<PeerCertificate | Error> {
  return new Promise((resolve) => {
    const socket = tlsConnect(
      { host: "127.0.0.1", port: on.port, servername, ca: on.ca, rejectUnauthorized: false },
      () => {
        const certificate = socket.authorized
          ? socket.getPeerCertificate()
          : new Error(String(socket.authorizationError));
        socket.end();
        resolve(certificate);
      },
    );
    socket.on("error", (error) => resolve(error));
  });
}

const listen = (server: Server) =>
  new Promise<number>((resolve) =>
    server.listen(0, "127.0.0.1", () => resolve((server.address() as { port: number }).port)),
  );

beforeAll(async () => {
  // The runtime's place: its API (which answers forward-auth too) and its terminal proxy.
  api = createServer((req, res) => {
    seen.push({ path: req.url ?? "", headers: req.headers });
    if (req.url?.startsWith("/front-door/tls-ask?")) {
      const name = new URL(req.url, "http://runtime").searchParams.get("domain") ?? "";
      asked.push(name);
      res.statusCode = served.has(name) ? 200 : 404;
      res.end();
    } else if (req.url?.startsWith("/front-door/auth/")) {
      res.statusCode = /sbx_front_door=good/.test(req.headers.cookie ?? "") ? 200 : 404;
      res.end();
    } else if (req.url?.startsWith("/front-door/dev/")) {
      // The found dev servers' forward-auth: no project here has one, so every name is nobody's (404).
      res.statusCode = 404;
      res.end();
    } else {
      res.setHeader("content-type", "application/json");
      res.end(JSON.stringify({ answered: "api", path: req.url }));
    }
  });
  terminal = createServer((_req, res) => res.end("terminal proxy\n"));
  const sockets = new WebSocketServer({ server: terminal });
  sockets.on("connection", (socket, req) =>
    socket.on("message", (data) => socket.send(`${req.url} echoes ${String(data)}`)),
  );
  devServer = createServer((_req, res) => res.end("dev server page\n"));
  ports = { api: await listen(api), terminal: await listen(terminal), dev: await listen(devServer) };
  const check = await caddyFrontDoor(options()).ensure(() => undefined);
  expect(check.ready, check.detail).toBe(true);
  // The platform's certificate comes from the internal CA shortly after start.
  await waitFor("the domain's certificate", 30_000, async () =>
    (await certificateFor(DOMAIN)) instanceof Error ? undefined : true,
  );
}, 60_000);

afterAll(async () => {
  await stopCaddy(options());
  for (const server of [api, terminal, devServer]) server?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe("the GCP host's front door over TLS (a real Caddy)", () => {
  it("serves the platform's domain with a certificate for that name, from its own CA, not the host's trust store", async () => {
    const certificate = (await certificateFor(DOMAIN)) as PeerCertificate;
    expect(certificate.subjectaltname).toBe(`DNS:${DOMAIN}`);
    expect(certificate.issuer.CN).toMatch(/^Caddy Local Authority/);
    // install_trust is off: nothing was added to the system's CA directory.
    const system = readFileSync("/etc/ssl/certs/ca-certificates.crt", "utf8");
    expect(system.includes(rootCa().toString("utf8").trim().split("\n").slice(1, -1).join("\n"))).toBe(false);
  });

  it("proxies the API to the runtime on loopback, saying who the client is and that it came over TLS", async () => {
    seen.length = 0;
    const answer = await httpsGet(DOMAIN, "/projects?limit=1");
    expect(answer.status).toBe(200);
    expect(JSON.parse(answer.body)).toEqual({ answered: "api", path: "/projects?limit=1" });
    expect(seen[0]!.headers).toMatchObject({
      host: DOMAIN,
      "x-forwarded-for": "127.0.0.1",
      "x-forwarded-proto": "https",
    });
  });

  it("a client's own X-Forwarded-For does not reach the runtime as if the front door had said it", async () => {
    seen.length = 0;
    await httpsGet(DOMAIN, "/healthz", { "x-forwarded-for": "198.51.100.66" });
    // Caddy trusts no proxy in front of it: the header it sends names the peer it saw, and only that peer
    // is believed by the runtime (runtime.trustedProxies takes the last address).
    expect(String(seen[0]!.headers["x-forwarded-for"]).split(/,\s*/).at(-1)).toBe("127.0.0.1");
  });

  it("terminals: a websocket on /terminal/<id> goes to the terminal proxy, both ways", async () => {
    const socket = new WebSocket(`wss://127.0.0.1:${HTTPS_PORT}/terminal/p-1?ticket=t`, {
      headers: { host: DOMAIN },
      ca: rootCa(),
      // ws hands its options to https.request, which takes the TLS name too.
      ...({ servername: DOMAIN } as object),
    });
    const echoed = await new Promise<string>((resolve, reject) => {
      socket.on("open", () => socket.send("ls"));
      socket.on("message", (data) => resolve(String(data)));
      socket.on("error", reject);
    });
    socket.close();
    expect(echoed).toBe("/terminal/p-1?ticket=t echoes ls");
    // Another path of the domain is the API's, not the terminal's.
    expect(JSON.parse((await httpsGet(DOMAIN, "/terminals")).body).answered).toBe("api");
  });

  it("plain HTTP only redirects to HTTPS, path and query kept", async () => {
    const answer = await httpGet(DOMAIN, "/projects?x=1");
    expect(answer.status).toBe(308);
    // Caddy 2.6 redirects to the scheme's own port (443 on the host), whatever port stands in for it here.
    expect(answer.headers.location).toBe(`https://${DOMAIN}/projects?x=1`);
    expect(answer.body).not.toContain("answered");
  });

  it("a dev-server route added by a tenant's FrontDoorRoute gets its own certificate and serves only its owner", async () => {
    const [route] = frontDoorRoutes(PROJECT_ID, [{ port: 3000 }], HTTPS_PORT, DOMAIN, true);
    const host = frontDoorHost(PROJECT_ID, undefined, DOMAIN);
    expect(route!.url).toBe(`https://${host}:${HTTPS_PORT}/`);
    expect(await certificateFor(host)).toBeInstanceOf(Error); // no route, no certificate
    const inputs = {
      routeId: `fd-${PROJECT_ID}-main-3000`,
      adminPort: ADMIN_PORT,
      projectId: PROJECT_ID,
      hosts: route!.hosts,
      upstream: `127.0.0.1:${ports.dev}`,
      authUpstream: `127.0.0.1:${ports.api}`,
    };
    await frontDoorRouteHandler.create(inputs);
    for (const name of route!.hosts) served.add(name);
    await waitFor(`a certificate for ${host}`, 30_000, async () =>
      (await certificateFor(host)) instanceof Error ? undefined : true,
    );
    expect(((await certificateFor(host)) as PeerCertificate).subjectaltname).toBe(`DNS:${host}`);
    expect(await httpsGet(host, "/")).toMatchObject({ status: 404 });
    expect(await httpsGet(host, "/", { cookie: "sbx_front_door=good" })).toMatchObject({
      status: 200,
      body: "dev server page\n",
    });
    // The platform's own route is untouched by the tenant's, which was inserted ahead of it.
    expect((await caddyAdmin(ADMIN_PORT, "GET", `/id/${PLATFORM_ROUTE_ID}`)).status).toBe(200);
    expect(JSON.parse((await httpsGet(DOMAIN, "/")).body).answered).toBe("api");
    // Deleted: the host is served no more, not even a certificate.
    await frontDoorRouteHandler.delete(inputs.routeId, { ...inputs, route: "" });
    for (const name of route!.hosts) served.delete(name);
    const stillCertified = await httpsGet(host, "/", { cookie: "sbx_front_door=good" }).then(
      (answer) => answer,
      (error: Error) => error,
    );
    // Its certificate, got while it was served, may still be held; the route is gone either way.
    if (stillCertified instanceof Error) expect(stillCertified.message).toMatch(/alert internal error/);
    else expect(stillCertified.status).toBe(404);
  });

  it("a host name nobody serves gets no certificate at all: the runtime is asked first and says no", async () => {
    asked.length = 0;
    const refused = await certificateFor(`nothing.${DOMAIN}`);
    expect(refused).toBeInstanceOf(Error);
    expect(asked).toEqual([`nothing.${DOMAIN}`]);
  });

  it("E2B's SDKs on the domain: api.<domain> is the runtime's /e2b, and 49983-<id>.<domain> its envd for that id", async () => {
    seen.length = 0;
    const control = await httpsGet(`api.${DOMAIN}`, "/sandboxes?limit=1", { "x-api-key": "k" });
    expect(JSON.parse(control.body)).toEqual({ answered: "api", path: "/e2b/sandboxes?limit=1" });
    expect(seen[0]!.headers).toMatchObject({ "x-api-key": "k", "x-forwarded-proto": "https" });

    const envd = `49983-${E2B_SANDBOX}.${DOMAIN}`;
    expect(await certificateFor(envd)).toBeInstanceOf(Error); // not (yet) a sandbox the runtime serves
    served.add(envd);
    await waitFor(`a certificate for ${envd}`, 30_000, async () =>
      (await certificateFor(envd)) instanceof Error ? undefined : true,
    );
    expect(((await certificateFor(envd)) as PeerCertificate).subjectaltname).toBe(`DNS:${envd}`);
    seen.length = 0;
    // The id the runtime is told is the host name's, whatever the client's header said.
    const other = "00000000-0000-4000-8000-000000000000";
    const rpc = await httpsGet(envd, "/process.Process/List", { "e2b-sandbox-id": other });
    expect(JSON.parse(rpc.body)).toEqual({ answered: "api", path: "/e2b/process.Process/List" });
    expect(seen[0]!.headers["e2b-sandbox-id"]).toBe(E2B_SANDBOX);
    // Another port of the sandbox, or a name that is not a sandbox's, is no E2B host here.
    for (const name of [`3000-${E2B_SANDBOX}.${DOMAIN}`, `49983-nothing.${DOMAIN}`])
      expect(await certificateFor(name), name).toBeInstanceOf(Error);
  });
});

// The same front door with the ACME issuer, as `gcp.tls.issuer: acme` renders it, against Pebble (Let's
// Encrypt's test server) instead of Let's Encrypt: account, order, a challenge Pebble validates for real
// against this Caddy's ports, and the certificate served.
describe("the GCP host's front door over TLS, certificates from an ACME server (Pebble)", () => {
  const acmeDir = mkdtempSync(path.join(tmpdir(), "caddy-front-door-acme-"));
  const ACME_HTTPS_PORT = 29444;
  const ACME_HTTP_PORT = 29082;
  let pebble: Pebble;
  const acmeOptions = () => ({
    port: ACME_HTTPS_PORT,
    adminPort: 29022,
    configDir: path.join(acmeDir, "etc"),
    logDir: path.join(acmeDir, "log"),
    runDir: path.join(acmeDir, "run"),
    public: {
      domain: DOMAIN,
      httpPort: ACME_HTTP_PORT,
      apiUpstream: `127.0.0.1:${ports.api}`,
      terminalUpstream: `127.0.0.1:${ports.terminal}`,
      issuer: {
        module: "acme" as const,
        email: "ops@example.test",
        ca: pebble.directory,
        trustedRoots: pebble.listenerCa,
      },
      storageDir: path.join(acmeDir, "storage"),
    },
  });

  beforeAll(async () => {
    pebble = await startPebble({ httpPort: ACME_HTTP_PORT, tlsPort: ACME_HTTPS_PORT });
    const check = await caddyFrontDoor(acmeOptions()).ensure(() => undefined);
    expect(check.ready, check.detail).toBe(true);
  }, 60_000);

  afterAll(async () => {
    await stopCaddy(acmeOptions());
    await pebble?.stop();
    rmSync(acmeDir, { recursive: true, force: true });
  });

  it("the domain's certificate is issued by the ACME server, and the API is served with it", async () => {
    const on = { port: ACME_HTTPS_PORT, ca: await pebble.issuingRoot() };
    await waitFor("the ACME server's certificate for the domain", 45_000, async () =>
      (await certificateFor(DOMAIN, on)) instanceof Error ? undefined : true,
    );
    const certificate = (await certificateFor(DOMAIN, on)) as PeerCertificate;
    expect(certificate.subjectaltname).toBe(`DNS:${DOMAIN}`);
    expect(certificate.issuer.CN).toMatch(/^Pebble Intermediate CA/);
    const answer = await httpsGet(DOMAIN, "/healthz", {}, on);
    expect(answer.status).toBe(200);
    expect(JSON.parse(answer.body)).toEqual({ answered: "api", path: "/healthz" });
  }, 60_000);
});
