import { promises as fs } from "node:fs";
import { request } from "node:http";
import * as os from "node:os";
import * as path from "node:path";
import type { Check, HostPart } from "./check.js";
import { tcpReachable } from "./net.js";
import { livePid, startDaemon, waitFor, withFileLock } from "../process.js";
import { writeFileAtomic } from "../files.js";
import {
  DEV_SERVER_MAX_HEADER_BYTES,
  E2B_ENVD_PORT,
  FRONT_DOOR_COOKIE_STRIP,
  FRONT_DOOR_SESSION_PATH,
  FRONT_DOOR_UPSTREAM_HEADER as UPSTREAM_HEADER,
  LOCAL_FRONT_DOOR_DOMAIN,
} from "../front-door.js";

/** The front door's Caddy instance: its own admin port (loopback only), listen port and dirs. */
export interface CaddyOptions {
  /** Where the front door listens for dev-server traffic (http, `*.sandbox.localhost`). */
  readonly port: number;
  /** Caddy's admin API, bound to 127.0.0.1 only: tenant stacks register routes through it. */
  readonly adminPort: number;
  /** The address the front door binds (default 127.0.0.1: the host's own browser and curl). */
  readonly listenHost?: string;
  readonly configDir: string;
  readonly logDir: string;
  readonly runDir: string;
  /** The GCP host's front door: public, over TLS, in front of the API and the terminal too. */
  readonly public?: PublicFrontDoor;
  /**
   * The dev servers found by themselves (runtime/api/front-door/dev-servers.ts): the runtime that answers
   * their forward-auth (`127.0.0.1:<api port>`) and the domain (default `sandbox.localhost`). A public front
   * door has them with its own API upstream.
   */
  readonly devServers?: { readonly authUpstream: string; readonly domain?: string };
}

/**
 * A front door on the internet (the GCP target): `port` is its HTTPS port; the platform's `domain` goes to
 * the API (the terminal's paths to the terminal proxy), each tenant route's hosts to its sandbox. Caddy's
 * automatic HTTPS gets a certificate for every host name a route names, and answers plain HTTP on
 * `httpPort` with a redirect (and ACME's HTTP challenge).
 */
export interface PublicFrontDoor {
  readonly domain: string;
  readonly httpPort: number;
  /** The runtime's API and terminal proxy, on loopback (`127.0.0.1:<port>`). */
  readonly apiUpstream: string;
  readonly terminalUpstream: string;
  readonly issuer:
    | {
        readonly module: "acme";
        readonly email?: string;
        readonly ca?: string;
        readonly trustedRoots?: string;
      }
    | { readonly module: "internal" };
  /** Where certificates and the ACME account are kept (the GCP host's data disk). */
  readonly storageDir: string;
}

/** The route id of the platform's own host on a public front door (the API, the console, terminals). */
export const PLATFORM_ROUTE_ID = "front-door-platform";

/** The terminal proxy's paths (`terminal_url`s are `wss://<domain>/terminal/<id>?ticket=...`). */
const TERMINAL_PATHS = ["/terminal", "/terminal/*"];

/** The route ids of E2B's host names on a public front door (docs/e2b.md, "On a domain"). */
export const E2B_API_ROUTE_ID = "front-door-e2b-api";
export const E2B_ENVD_ROUTE_ID = "front-door-e2b-envd";
export const E2B_PORT_ROUTE_ID = "front-door-e2b-port";
/** The runtime's answer to Caddy's on-demand TLS question: may this host name have a certificate? */
export const TLS_ASK_PATH = "/front-door/tls-ask";

const escapeRegExp = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
const UUID_PATTERN = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}";

/**
 * E2B's SDKs given `E2B_DOMAIN=<domain>` alone: the control plane at `api.<domain>` and envd at
 * `49983-<sandbox id>.<domain>`, both the runtime's `/e2b` routes. The envd host's id is the one the runtime
 * is told (its `E2b-Sandbox-Id` set from the name, whatever the client sent), so a host name and the
 * sandbox served never differ; the envd access token is checked behind it as on any other path.
 */
function e2bRoutes(front: PublicFrontDoor, proxy: (dial: string) => Record<string, unknown>) {
  const toE2b = { handler: "rewrite", uri: "/e2b{http.request.uri}" };
  const domain = `\\.${escapeRegExp(front.domain)}(:[0-9]+)?$`;
  const envdHost = `^${E2B_ENVD_PORT}-(${UUID_PATTERN})${domain}`;
  const portHost = `^([1-9][0-9]{0,4})-(${UUID_PATTERN})${domain}`;
  const [port, id] = ["{http.regexp.e2bport.1}", "{http.regexp.e2bport.2}"];
  return [
    {
      "@id": E2B_API_ROUTE_ID,
      match: [{ host: [`api.${front.domain}`] }],
      handle: [toE2b, proxy(front.apiUpstream)],
      terminal: true,
    },
    {
      "@id": E2B_ENVD_ROUTE_ID,
      // Host names are matched lowercased by Caddy's host matcher; a header pattern sees what was sent.
      match: [{ header_regexp: { Host: { name: "e2benvd", pattern: `(?i)${envdHost}` } } }],
      handle: [
        { handler: "headers", request: { set: { "E2b-Sandbox-Id": ["{http.regexp.e2benvd.1}"] } } },
        toE2b,
        proxy(front.apiUpstream),
      ],
      terminal: true,
    },
    {
      // Every other port of an E2B sandbox (the SDK's getHost(port)): its owner, as on a dev-server route, the
      // sandbox's address said by the runtime's forward-auth (no route is made per sandbox and port).
      "@id": E2B_PORT_ROUTE_ID,
      match: [{ header_regexp: { Host: { name: "e2bport", pattern: `(?i)${portHost}` } } }],
      handle: [
        {
          handler: "subroute",
          routes: [
            {
              match: [{ path: [FRONT_DOOR_SESSION_PATH] }],
              handle: [
                { handler: "rewrite", uri: `/front-door/session/${id}?{http.request.uri.query}` },
                proxy(front.apiUpstream),
              ],
              terminal: true,
            },
            {
              handle: [
                // Only the runtime's answer says where to go: a client's own header is never the upstream.
                { handler: "headers", request: { delete: [UPSTREAM_HEADER] } },
                forwardAuth(front.apiUpstream, `/front-door/auth/${id}/ports/${port}`, UPSTREAM_HEADER),
                {
                  ...proxy(`{http.request.header.${UPSTREAM_HEADER}}`),
                  transport: { protocol: "http", max_response_header_size: DEV_SERVER_MAX_HEADER_BYTES },
                  headers: {
                    request: {
                      delete: [UPSTREAM_HEADER],
                      replace: { Cookie: FRONT_DOOR_COOKIE_STRIP },
                    },
                  },
                },
              ],
            },
          ],
        },
      ],
      terminal: true,
    },
  ];
}

/**
 * Caddy's `forward_auth`, as its own directive adapts to JSON: the request asked of `dial` as `GET <uri>`
 * (with the original method and URI in headers); a 2xx goes on to the next handler (with the answer's `copy`
 * header set on the request), any other answer is the client's.
 */
export function forwardAuth(dial: string, uri: string, copy?: string): Record<string, unknown> {
  return {
    handler: "reverse_proxy",
    upstreams: [{ dial }],
    rewrite: { method: "GET", uri },
    headers: {
      request: {
        set: {
          "X-Forwarded-Method": ["{http.request.method}"],
          "X-Forwarded-Uri": ["{http.request.uri}"],
        },
      },
    },
    handle_response: [
      {
        match: { status_code: [2] },
        routes: [
          {
            handle: [
              {
                handler: "headers",
                request: copy ? { set: { [copy]: [`{http.reverse_proxy.header.${copy}}`] } } : {},
              },
            ],
          },
        ],
      },
    ],
  };
}

function publicParts(front: PublicFrontDoor) {
  const proxy = (dial: string) => ({ handler: "reverse_proxy", upstreams: [{ dial }] });
  const platformRoute = {
    "@id": PLATFORM_ROUTE_ID,
    match: [{ host: [front.domain] }],
    handle: [
      {
        handler: "subroute",
        routes: [
          { match: [{ path: TERMINAL_PATHS }], handle: [proxy(front.terminalUpstream)] },
          { handle: [proxy(front.apiUpstream)] },
        ],
      },
    ],
    terminal: true,
  };
  const issuer =
    front.issuer.module === "internal"
      ? { module: "internal" }
      : {
          module: "acme",
          ...(front.issuer.email ? { email: front.issuer.email } : {}),
          ...(front.issuer.ca ? { ca: front.issuer.ca } : {}),
          ...(front.issuer.trustedRoots ? { trusted_roots_pem_files: [front.issuer.trustedRoots] } : {}),
        };
  return {
    platformRoute,
    e2bRoutes: e2bRoutes(front, proxy),
    storage: { module: "file_system", root: front.storageDir },
    // The platform's own names get their certificates at start. Every other name under the domain (a
    // dev-server route's, an E2B sandbox's envd) gets one at its first handshake, once the runtime says it
    // serves that name (Caddy's on-demand TLS `ask`: 200 yes, anything else no): a sandbox's names cannot be
    // listed ahead, and a name nobody serves never costs a certificate.
    tls: {
      automation: {
        policies: [
          { subjects: [front.domain, `api.${front.domain}`], issuers: [issuer] },
          { subjects: [`*.${front.domain}`], issuers: [issuer], on_demand: true },
        ],
        on_demand: { ask: `http://${front.apiUpstream}${TLS_ASK_PATH}` },
      },
    },
    // Caddy's own CA (the internal issuer) never touches the host's trust store.
    pki: { certificate_authorities: { local: { install_trust: false } } },
  };
}

/** The route id of the dev servers found by themselves: one route for all their names. */
export const DEV_SERVERS_ROUTE_ID = "front-door-dev-servers";

/**
 * Every other name under the domain, one or two labels deep (`<project>`, `<worktree>.<project>`,
 * `p<port>.<project>`), after the declared routes (inserted ahead of it) and the platform's own: the runtime
 * says, for each request, whether the owner's cookie is there and where the server listens now (no route is
 * made per server, so a port answers as soon as it listens). Names nobody serves are the runtime's 404.
 */
export function devServersRoute(domain: string, authUpstream: string): Record<string, unknown> {
  const host = `^[a-z0-9_-]{1,63}(\\.[a-z0-9_-]{1,63})?\\.${escapeRegExp(domain)}(:[0-9]+)?$`;
  const proxy = (dial: string) => ({ handler: "reverse_proxy", upstreams: [{ dial }] });
  return {
    "@id": DEV_SERVERS_ROUTE_ID,
    match: [{ header_regexp: { Host: { name: "devserver", pattern: `(?i)${host}` } } }],
    handle: [
      {
        handler: "subroute",
        routes: [
          {
            match: [{ path: [FRONT_DOOR_SESSION_PATH] }],
            handle: [
              {
                handler: "rewrite",
                uri: "/front-door/dev/session?host={http.request.host}&{http.request.uri.query}",
              },
              proxy(authUpstream),
            ],
            terminal: true,
          },
          {
            handle: [
              // Only the runtime's answer says where to go: a client's own header is never the upstream.
              { handler: "headers", request: { delete: [UPSTREAM_HEADER] } },
              forwardAuth(authUpstream, "/front-door/dev/auth?host={http.request.host}", UPSTREAM_HEADER),
              {
                ...proxy(`{http.request.header.${UPSTREAM_HEADER}}`),
                transport: { protocol: "http", max_response_header_size: DEV_SERVER_MAX_HEADER_BYTES },
                headers: {
                  request: { delete: [UPSTREAM_HEADER], replace: { Cookie: FRONT_DOOR_COOKIE_STRIP } },
                },
              },
            ],
          },
        ],
      },
    ],
    terminal: true,
  };
}

/** The dev servers' route of these options, if the front door has one. */
function devServersOf(options: CaddyOptions): Record<string, unknown> | undefined {
  if (options.public) return devServersRoute(options.public.domain, options.public.apiUpstream);
  if (options.devServers)
    return devServersRoute(
      options.devServers.domain ?? LOCAL_FRONT_DOOR_DOMAIN,
      options.devServers.authUpstream,
    );
  return undefined;
}

/** The server name under `apps.http.servers` that holds one route per declared dev-server port. */
export const FRONT_DOOR_SERVER = "front_door";

export function caddyPaths(options: Pick<CaddyOptions, "configDir" | "logDir" | "runDir">) {
  return {
    config: path.join(options.configDir, "caddy", "front-door.json"),
    pidFile: path.join(options.runDir, "caddy-front-door.pid"),
    logFile: path.join(options.logDir, "caddy-front-door.log"),
    /** Caddy's own storage (autosave, certificates later on GCP), never the user's ~/.config. */
    dataDir: path.join(options.configDir, "caddy", "data"),
  };
}

/**
 * The initial config: admin on loopback, one http server whose only route is a catch-all 404 (tenant
 * stacks insert theirs ahead of it and address them as `/id/<route-id>` objects).
 */
export function renderCaddyConfig(options: CaddyOptions): string {
  const front = options.public ? publicParts(options.public) : undefined;
  const devServers = devServersOf(options);
  const config = {
    admin: { listen: `127.0.0.1:${options.adminPort}`, config: { persist: false } },
    logging: { logs: { default: { level: "WARN" } } },
    ...(front ? { storage: front.storage } : {}),
    apps: {
      ...(front ? { tls: front.tls, pki: front.pki } : {}),
      http: {
        ...(options.public ? { http_port: options.public.httpPort, https_port: options.port } : {}),
        servers: {
          [FRONT_DOOR_SERVER]: {
            listen: [`${options.listenHost ?? (options.public ? "" : "127.0.0.1")}:${options.port}`],
            // Public: Caddy's automatic HTTPS (a certificate per routed host name, HTTP redirected). Local:
            // plain HTTP on loopback.
            ...(front ? {} : { automatic_https: { disable: true } }),
            // Tenant routes are inserted at index 0 (PUT .../routes/0), ahead of this catch-all 404:
            // Caddy answers an empty 200 when no route matches, which would hide a missing route.
            routes: [
              ...(front ? [front.platformRoute, ...front.e2bRoutes] : []),
              ...(devServers ? [devServers] : []),
              {
                "@id": "front-door-default",
                handle: [
                  { handler: "static_response", status_code: 404, body: "404 no such front-door route\n" },
                ],
              },
            ],
            errors: {
              routes: [
                {
                  handle: [
                    {
                      handler: "static_response",
                      status_code: "{http.error.status_code}",
                      body: "{http.error.status_code} {http.error.status_text}\n",
                    },
                  ],
                },
              ],
            },
          },
        },
      },
    },
  };
  return `${JSON.stringify(config, null, 2)}\n`;
}

const accepting = (port: number) =>
  tcpReachable("127.0.0.1", port, 300).then(
    () => true,
    () => false,
  );

/**
 * Runs `work` (calls to the admin API that name a route by `/id/<id>`) alone among every such caller of the
 * Caddy whose admin API is on `adminPort`, in this process or another. Caddy resolves `/id/<id>` to the
 * route's index in its array and applies the change in a second step, without holding its lock between the
 * two, and restarts its admin server after each change (closing the other callers' connections): two route
 * changes at once (a tenant's routes deleted side by side, two tenants at once) can act on a shifted index,
 * so one fails ("array index out of bounds", a reset connection) or, worse, removes or reads another route.
 * Seen on Caddy 2.6.2: 40 deletes at once answered 23 × 200, 10 × 500, 6 resets and a 404, and left 17
 * routes; a tenant's delete stopped half-way in a full run (session 36's CI).
 */
export function withCaddyRoutes<T>(adminPort: number, work: () => Promise<T>): Promise<T> {
  return withFileLock(path.join(os.tmpdir(), `agent-sandbox-caddy-${adminPort}.routes.lock`), work);
}

/**
 * One call to the admin API (loopback). A fresh connection each time: Caddy restarts its admin server
 * after every config change, so a kept-alive socket would be closed under the next request.
 */
export function caddyAdmin(
  adminPort: number,
  method: string,
  pathname: string,
  body?: unknown,
): Promise<{ status: number; body: string }> {
  const payload = body === undefined ? undefined : JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: "127.0.0.1",
        port: adminPort,
        method,
        path: pathname,
        agent: false,
        headers: payload === undefined ? {} : { "content-type": "application/json" },
      },
      (res) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (chunk: string) => (text += chunk));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, body: text }));
      },
    );
    req.setTimeout(10_000, () =>
      req.destroy(new Error(`caddy admin ${method} ${pathname}: no answer in 10 s`)),
    );
    req.on("error", reject);
    req.end(payload);
  });
}

/**
 * The front door: our own Caddy instance (never the distribution's caddy.service), its admin API on
 * loopback. `ensure` starts it when it does not run; a running instance is left alone so the routes
 * tenant stacks registered survive (a restart loses them, and each tenant's refresh shows that as drift).
 */
export function caddyFrontDoor(options: CaddyOptions): HostPart {
  const name = "caddy";
  const paths = caddyPaths(options);
  const probe = async (): Promise<Check> => {
    const pid = await livePid(paths.pidFile, "caddy");
    if (pid === undefined)
      return { name, ready: false, detail: `not running (no live pid in ${paths.pidFile})` };
    const admin = await caddyAdmin(
      options.adminPort,
      "GET",
      `/config/apps/http/servers/${FRONT_DOOR_SERVER}/listen`,
    );
    if (admin.status !== 200) return { name, ready: false, detail: `admin API answers ${admin.status}` };
    return {
      name,
      ready: true,
      detail: `pid ${pid}, port ${options.port}, admin 127.0.0.1:${options.adminPort}`,
    };
  };
  return {
    name,
    probe,
    async ensure(log) {
      const desired = renderCaddyConfig(options);
      await fs.mkdir(paths.dataDir, { recursive: true });
      await writeFileAtomic(paths.config, desired, "0644");
      if ((await livePid(paths.pidFile, "caddy")) === undefined) {
        for (const port of [options.port, options.adminPort]) {
          if (await accepting(port)) throw new Error(`port ${port} is taken by another process`);
        }
        log(
          `starting caddy on port ${options.port}, admin 127.0.0.1:${options.adminPort} (log ${paths.logFile})`,
        );
        await startDaemon(
          "env",
          [
            `XDG_DATA_HOME=${paths.dataDir}`,
            `XDG_CONFIG_HOME=${paths.dataDir}`,
            "caddy",
            "run",
            "--config",
            paths.config,
          ],
          paths.logFile,
          paths.pidFile,
        );
      }
      await waitFor(`caddy (see ${paths.logFile})`, 15_000, async () =>
        (await accepting(options.port)) && (await accepting(options.adminPort)) ? true : undefined,
      );
      // An instance started before the dev servers' route existed (routes live in its memory): add it
      // ahead of the catch-all, leaving the tenants' routes alone.
      const devServers = devServersOf(options);
      if (devServers) await ensureRoute(options.adminPort, devServers);
      return probe();
    },
  };
}

/** JSON with every object's keys sorted (Caddy gives a route back in its own key order). */
function stableJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(stableJson).join(",")}]`;
  if (value !== null && typeof value === "object")
    return `{${Object.keys(value)
      .sort()
      .map((key) => `${JSON.stringify(key)}:${stableJson((value as Record<string, unknown>)[key])}`)
      .join(",")}}`;
  return JSON.stringify(value);
}

/** Puts `route` (by its `@id`) just ahead of the catch-all 404 when Caddy holds no route of that id. */
async function ensureRoute(adminPort: number, route: Record<string, unknown>): Promise<void> {
  await withCaddyRoutes(adminPort, async () => {
    const id = route["@id"] as string;
    const held = await caddyAdmin(adminPort, "GET", `/id/${id}`);
    if (held.status === 200) {
      if (stableJson(JSON.parse(held.body)) === stableJson(route)) return;
      const patched = await caddyAdmin(adminPort, "PATCH", `/id/${id}`, route);
      if (patched.status !== 200)
        throw new Error(`caddy refused the ${id} route: ${patched.status} ${patched.body}`);
      return;
    }
    const listed = await caddyAdmin(
      adminPort,
      "GET",
      `/config/apps/http/servers/${FRONT_DOOR_SERVER}/routes`,
    );
    const routes = JSON.parse(listed.body || "[]") as { "@id"?: string }[];
    const at = routes.findIndex((r) => r["@id"] === "front-door-default");
    const put = await caddyAdmin(
      adminPort,
      "PUT",
      `/config/apps/http/servers/${FRONT_DOOR_SERVER}/routes/${at < 0 ? routes.length : at}`,
      route,
    );
    if (put.status !== 200) throw new Error(`caddy refused the ${id} route: ${put.status} ${put.body}`);
  });
}

/** Stops the instance (if it runs) and waits for its pid to go. */
export async function stopCaddy(
  options: Pick<CaddyOptions, "configDir" | "logDir" | "runDir">,
): Promise<void> {
  const { pidFile } = caddyPaths(options);
  const pid = await livePid(pidFile, "caddy");
  if (pid === undefined) return;
  process.kill(pid, "SIGTERM");
  await waitFor("caddy to exit", 15_000, async () =>
    (await livePid(pidFile, "caddy")) === undefined ? true : undefined,
  );
}
