import { z } from "zod";
import {
  DEV_SERVER_MAX_HEADER_BYTES,
  FRONT_DOOR_COOKIE_STRIP,
  FRONT_DOOR_SESSION_PATH,
} from "../../lib/front-door.js";
import { caddyAdmin, forwardAuth, FRONT_DOOR_SERVER, withCaddyRoutes } from "../../lib/host/caddy.js";
import { changedKeys, type ResourceHandler } from "../handler.js";

/** One declared dev-server port of a tenant: a route in the front door's Caddy, by its `@id`. */
export const FrontDoorRouteInputs = z.object({
  /** The route's `@id` in Caddy's config (`/id/<routeId>`). */
  routeId: z
    .string()
    .regex(/^[a-z0-9][a-z0-9-]{0,100}$/, { message: "must be lowercase letters, digits, '-'" }),
  /** Caddy's admin API port, on 127.0.0.1. */
  adminPort: z.number().int().min(1).max(65535),
  projectId: z.string().min(1),
  /** The host names the route answers (`<label>[-<name>].sandbox.localhost`). */
  hosts: z.array(z.string().min(1)).min(1),
  /** The sandbox's dev server: `<address on its bridge>:<port>`. */
  upstream: z.string().regex(/^[0-9.]+:[0-9]+$/, { message: "must be <ipv4>:<port>" }),
  /** The runtime, asked by forward-auth before every request (`127.0.0.1:<api port>`). */
  authUpstream: z.string().min(1),
});
export type FrontDoorRouteInputs = z.infer<typeof FrontDoorRouteInputs>;
export type FrontDoorRouteOutputs = FrontDoorRouteInputs & { route: string };

/**
 * The route as Caddy holds it: `/__sbx/session` goes to the runtime (it sets the host-scoped cookie);
 * everything else is first asked of the runtime (`forward_auth`, as Caddy's own directive adapts: a 2xx
 * continues, any other answer is the client's) and then proxied to the sandbox. Pure: the unit test and
 * `read` compare it.
 */
export function frontDoorRoute(inputs: FrontDoorRouteInputs): Record<string, unknown> {
  const project = encodeURIComponent(inputs.projectId);
  return {
    "@id": inputs.routeId,
    match: [{ host: inputs.hosts }],
    handle: [
      {
        handler: "subroute",
        routes: [
          {
            match: [{ path: [FRONT_DOOR_SESSION_PATH] }],
            handle: [
              { handler: "rewrite", uri: `/front-door/session/${project}?{http.request.uri.query}` },
              { handler: "reverse_proxy", upstreams: [{ dial: inputs.authUpstream }] },
            ],
            terminal: true,
          },
          {
            handle: [
              forwardAuth(inputs.authUpstream, `/front-door/auth/${project}`),
              {
                handler: "reverse_proxy",
                upstreams: [{ dial: inputs.upstream }],
                // A dev server's answer is the sandbox's to write: headers past this are a 502, not passed on.
                transport: { protocol: "http", max_response_header_size: DEV_SERVER_MAX_HEADER_BYTES },
                // The owner's front-door cookie is the platform's, not the dev server's: the sandbox (whose
                // agent may be hostile) never sees it, so it cannot replay the owner's session.
                headers: { request: { replace: { Cookie: FRONT_DOOR_COOKIE_STRIP } } },
              },
            ],
          },
        ],
      },
    ],
    terminal: true,
  };
}

const canonicalJson = (value: unknown) => JSON.stringify(value);

/** What Caddy holds for the route now, or undefined when it has none by that id. */
const observe = (inputs: FrontDoorRouteInputs) => withCaddyRoutes(inputs.adminPort, () => observeNow(inputs));

async function observeNow(inputs: FrontDoorRouteInputs): Promise<FrontDoorRouteOutputs | undefined> {
  const got = await caddyAdmin(inputs.adminPort, "GET", `/id/${inputs.routeId}`).catch((error: Error) => {
    // Caddy not running: its routes (held in memory only) are gone with it.
    if ((error as NodeJS.ErrnoException).code === "ECONNREFUSED") return { status: 404, body: "" };
    throw error;
  });
  if (got.status === 404) return undefined;
  if (got.status !== 200)
    throw new Error(`caddy admin GET /id/${inputs.routeId}: ${got.status} ${got.body.trim()}`);
  const route = JSON.parse(got.body) as {
    match?: { host?: string[] }[];
    handle?: { routes?: { handle?: { upstreams?: { dial?: string }[] }[] }[] }[];
  };
  // What Caddy actually holds: the hosts it matches and the dial of its last proxy (the sandbox).
  const hosts = route.match?.[0]?.host ?? [];
  const proxies = route.handle?.[0]?.routes?.[1]?.handle ?? [];
  const upstream = proxies.at(-1)?.upstreams?.[0]?.dial ?? "";
  const authUpstream = proxies[0]?.upstreams?.[0]?.dial ?? "";
  return { ...inputs, hosts, upstream, authUpstream, route: canonicalJson(route) };
}

/** Adds the route, or replaces it in place: one lookup and one change, with no other route change between. */
const put = (inputs: FrontDoorRouteInputs) => withCaddyRoutes(inputs.adminPort, () => putNow(inputs));

async function putNow(inputs: FrontDoorRouteInputs): Promise<FrontDoorRouteOutputs> {
  const route = frontDoorRoute(inputs);
  const existing = await caddyAdmin(inputs.adminPort, "GET", `/id/${inputs.routeId}`).catch(
    (error: Error) => {
      if ((error as NodeJS.ErrnoException).code !== "ECONNREFUSED") throw error;
      throw new Error(
        `the front door (Caddy, admin API 127.0.0.1:${inputs.adminPort}) is not running: bring the host up (npm run local)`,
      );
    },
  );
  // Replace in place when it exists (a retried create, an update); else insert ahead of the catch-all 404.
  const done =
    existing.status === 200
      ? await caddyAdmin(inputs.adminPort, "PATCH", `/id/${inputs.routeId}`, route)
      : await caddyAdmin(
          inputs.adminPort,
          "PUT",
          `/config/apps/http/servers/${FRONT_DOOR_SERVER}/routes/0`,
          route,
        );
  if (done.status !== 200)
    throw new Error(`caddy admin: adding route ${inputs.routeId}: ${done.status} ${done.body.trim()}`);
  return { ...inputs, route: canonicalJson(route) };
}

export const frontDoorRouteHandler: ResourceHandler<FrontDoorRouteInputs, FrontDoorRouteOutputs> = {
  inputs: FrontDoorRouteInputs,

  async diff(_id, olds, news) {
    const replaces = changedKeys(olds, news, ["routeId", "adminPort"]);
    const changed = changedKeys(olds, news, [
      "routeId",
      "adminPort",
      "projectId",
      "hosts",
      "upstream",
      "authUpstream",
    ]);
    return { changes: changed.length > 0, replaces, deleteBeforeReplace: true };
  },

  async create(inputs) {
    return { id: inputs.routeId, outs: await put(inputs) };
  },

  // The real state: a route deleted (or a Caddy restarted) behind the platform's back is gone here,
  // so refresh drops it and the next `up` puts it back.
  read: (_id, olds) => observe(olds),

  update: (_id, _olds, news) => put(news),

  async delete(id, olds) {
    const done = await withCaddyRoutes(olds.adminPort, () =>
      caddyAdmin(olds.adminPort, "DELETE", `/id/${id}`),
    ).catch((error: Error) => {
      // Caddy not running: its routes are gone with it.
      if ((error as NodeJS.ErrnoException).code === "ECONNREFUSED") return { status: 404, body: "" };
      throw error;
    });
    if (done.status !== 200 && done.status !== 404 && !done.body.includes("unknown object ID"))
      throw new Error(`caddy admin DELETE /id/${id}: ${done.status} ${done.body.trim()}`);
  },
};
