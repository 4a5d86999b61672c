// The dev servers the front door finds by itself (issue 45; seed 004 US4, FR-012; docs/front-door.md "Found
// by themselves"): a port an agent's program listens on answers at `<project>.<domain>`,
// `<worktree>.<project>.<domain>` and `p<port>.<project>.<domain>` without being declared. One Caddy route
// for every such name (lib/host/caddy.ts, `devServersRoute`) asks the runtime here where each request goes.
import type { FastifyReply, FastifyRequest } from "fastify";
import { z } from "zod";
import {
  devServerFor,
  devServerNames,
  devServerProjectParts,
  parseDevServerHost,
  reachableAddress,
  worktreeHostLabel,
  type DevServerHost,
  type FoundDevServer,
} from "../../../lib/dev-server-names.js";
import {
  FRONT_DOOR_UPSTREAM_HEADER,
  frontDoorUrl,
  LOCAL_FRONT_DOOR_DOMAIN,
} from "../../../lib/front-door.js";
import { tenantAddresses } from "../../../lib/subnets.js";
import { HttpError } from "../../errors.js";
import { pingDatabase, type Database } from "../../store/db.js";
import { devServerProjects, privatePorts, projectsByFrontDoorLabel } from "../../store/projects.js";
import type { TicketIssuer } from "../../terminal/tickets.js";
import { sandboxNotRunning } from "../projects/view.js";
import { ProjectParams } from "../projects/schemas.js";
import { route, type Routes } from "../route.js";

/** A project's dev servers now: undefined while its sandbox does not run, null where its backend finds none. */
export type DevServerFinder = (
  projectId: string,
  maxAgeMs?: number,
) => Promise<FoundDevServer[] | undefined | null>;

/**
 * How old a reading of a sandbox's sockets a request through the front door may be served from; a name whose
 * server is not in it is read again at once, so a port answers the moment it listens, and a stopped server's
 * name may reach it (a 502) for this long.
 */
const FORWARD_AUTH_READING_MS = 1_000;

const DevServer = z
  .object({
    port: z.number().int(),
    /** What it listens on: `0.0.0.0`, `::`, or a loopback address the front door cannot reach. */
    address: z.string(),
    /** The worktree its program runs in (`.worktrees/<name>`), or null. */
    worktree: z.string().nullable(),
    /** Whether the front door reaches it (false: it listens on loopback alone). */
    reachable: z.boolean(),
    /** Its names, the first the one to show (the owner's cookie comes from POST .../dev-servers/session). */
    hosts: z.array(z.string()),
    url: z.string().nullable(),
  })
  .strict();
export const DevServersBody = z
  .object({
    dev_servers: z.array(DevServer),
    /** The ports the owner keeps private (PATCH /projects/{id} private_ports): never listed or routed. */
    private_ports: z.array(z.number().int()),
  })
  .strict();

export const DevServerSessionBody = z
  .object({
    /** The server on this port (`p<port>.<project>`). */
    port: z.number().int().min(1).max(65535).optional(),
    /**
     * The worktree's first server (`<worktree>.<project>`), by its branch (`feat/x`), its directory
     * (`feat__x`) or its name's part (`feat--x`); with neither, the project's main one.
     */
    worktree: z
      .string()
      .max(100)
      .regex(/^[A-Za-z0-9]([A-Za-z0-9_./-]*[A-Za-z0-9])?$/, {
        message: "must be a worktree's branch or directory name",
      })
      .optional(),
  })
  .strict()
  .refine((body) => body.port === undefined || body.worktree === undefined, {
    message: "is one of port and worktree, not both",
    path: ["worktree"],
  })
  .meta({ not: { required: ["port", "worktree"] } })
  .optional();

const SessionAnswer = z
  .object({
    url: z.string(),
    front_door_url: z.string(),
    port: z.number().int(),
    expires_in: z.number().int(),
  })
  .strict();

/** The name Caddy was asked for (a query parameter: a path segment is held to 100 characters). */
const HostName = z
  .string()
  .max(253)
  .regex(/^[A-Za-z0-9._-]+$/, { message: "must be a host name" });

export const devServersRoute = route({
  method: "get",
  path: "/projects/{id}/dev-servers",
  summary:
    "The dev servers listening in the sandbox now, found without being declared, each with its front-door names (`<project>.<domain>`, `<worktree>.<project>.<domain>`, `p<port>.<project>.<domain>`) and whether the front door reaches it",
  params: ProjectParams,
  access: "owner",
  responses: {
    200: { description: "the dev servers", body: DevServersBody },
    404: "no such project of the caller's",
    409: "the sandbox is not running, the front door does not find its dev servers (a kubernetes Pod it may not reach), or this platform runs no front door",
  },
});

export const devServerSessionRoute = route({
  method: "post",
  path: "/projects/{id}/dev-servers/session",
  summary:
    "A one-time URL (60 s) on a found dev server's own host (by port, by worktree, or the project's main one); opening it sets the owner's host-scoped cookie, as a declared route's session does",
  params: ProjectParams,
  body: DevServerSessionBody,
  bodyOptional: true,
  access: "owner",
  responses: {
    200: { description: "the one-time URL and the server's own URL", body: SessionAnswer },
    404: "no such project of the caller's, or nothing listens there in its sandbox",
    409: "the sandbox is not running, the front door does not find its dev servers (a kubernetes Pod it may not reach), or this platform runs no front door",
  },
});

export const devServerTicketRoute = route({
  method: "get",
  path: "/front-door/dev/session",
  summary:
    "Caddy, for `/__sbx/session?ticket=` on a found dev server's host: redeems the one-time ticket of the project the name is, sets the cookie, redirects to `/`",
  query: z.object({ host: HostName, ticket: z.string().min(1).max(2048) }).strict(),
  access: "anyone",
  responses: {
    302: { description: "the cookie is set; Location: /", body: z.string(), contentType: "text/plain" },
    404: { description: "not a name served, or a bad ticket", body: z.string(), contentType: "text/html" },
  },
});

export const devServerAuthRoute = route({
  method: "get",
  path: "/front-door/dev/auth",
  summary:
    "Caddy's forward-auth for a found dev server's name: 200 for the owner's cookie with the server's address (X-Sbx-Upstream); 404 for anyone else; 503 with a page when the sandbox or the server is not running, or it listens on loopback alone",
  query: z.object({ host: HostName }).strict(),
  access: "anyone",
  responses: {
    200: { description: "the owner: go on to the server", body: z.string(), contentType: "text/plain" },
    404: { description: "not a name served, or not the owner", body: z.string(), contentType: "text/html" },
    503: { description: "the 'not running' page", body: z.string(), contentType: "text/html" },
  },
});

export const devServerApiRoutes = [
  devServersRoute,
  devServerSessionRoute,
  devServerTicketRoute,
  devServerAuthRoute,
] as const;

/** How long the projects' parts of the names are kept: a new project's name answers within a second. */
const PARTS_TTL_MS = 1_000;
const partsKept = new WeakMap<
  Database,
  { at: number; parts: Promise<{ byId: Map<string, string>; byPart: Map<string, string> }> }
>();

/**
 * Every live project's part of the names, both ways, computed from all their names (a second old at most:
 * every request through the front door asks, and a fleet has thousands). A deleted project's name may
 * resolve a second longer; its forward-auth then finds no live project (404).
 */
function projectParts(db: Database, fresh = false) {
  const kept = partsKept.get(db);
  if (kept && !fresh && Date.now() - kept.at < PARTS_TTL_MS) return kept.parts;
  const parts = devServerProjects(db).then((projects) => {
    const byId = devServerProjectParts(projects);
    return { byId, byPart: new Map([...byId].map(([id, part]) => [part, id])) };
  });
  partsKept.set(db, { at: Date.now(), parts });
  // A failed read (the database down) is not kept.
  parts.catch(() => partsKept.delete(db));
  return parts;
}

/** Which project a dev-server name stands for, and its part of the names. */
export async function devServerHostProject(
  db: Database,
  host: string,
  domain: string,
): Promise<{ id: string; part: string; asked: DevServerHost } | undefined> {
  const asked = parseDevServerHost(host, domain);
  if (!asked) return undefined;
  const { byId, byPart } = await projectParts(db);
  if (/^[0-9a-f]{12}$/.test(asked.project)) {
    const ids = await projectsByFrontDoorLabel(db, asked.project);
    const id = ids.length === 1 ? ids[0]! : undefined;
    return id && byId.has(id) ? { id, part: byId.get(id)!, asked } : undefined;
  }
  const id = byPart.get(asked.project);
  return id ? { id, part: asked.project, asked } : undefined;
}

export interface DevServerRoutesOptions {
  readonly db: Database;
  readonly frontDoor?: { readonly port: number; readonly domain?: string; readonly tls?: boolean };
  readonly find?: DevServerFinder;
  readonly sessions: TicketIssuer;
  /** The owner's running project (woken if asked), or undefined when its answer is already sent. */
  readonly ownersRunningProject: (
    request: FastifyRequest,
    reply: FastifyReply,
    id: string,
    options?: { wake: boolean },
  ) => Promise<{ name: string; subnet: string | null } | undefined>;
  /** Redeems a one-time ticket of `id`'s and sets the cookie (or answers 404). */
  readonly redeem: (reply: FastifyReply, id: string, ticket: string) => Promise<FastifyReply>;
  readonly notFound: (reply: FastifyReply) => Promise<FastifyReply> | FastifyReply;
}

const escapeHtml = (text: string) => text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

/** What the owner sees for a name whose server is not there (a 503: the page may come back). */
function notServing(reply: FastifyReply, title: string, text: string) {
  return reply
    .status(503)
    .header("retry-after", "5")
    .type("text/html")
    .send(
      `<!doctype html><title>${escapeHtml(title)}</title>\n<h1>${escapeHtml(title)}</h1>\n<p>${text}</p>\n`,
    );
}

const describeAsked = (asked: DevServerHost) =>
  asked.port !== undefined
    ? `port ${asked.port}`
    : asked.worktree
      ? `worktree ${asked.worktree}`
      : "the sandbox";

export function registerDevServerRoutes(routes: Routes, options: DevServerRoutesOptions): void {
  const { db, find } = options;
  const domainOf = () => options.frontDoor?.domain ?? LOCAL_FRONT_DOOR_DOMAIN;

  /** The project's servers but its private ports' (undefined: not running; null: its backend finds none). */
  const routable = async (id: string, maxAgeMs = 0) => {
    const servers = await find!(id, maxAgeMs);
    if (!servers) return servers;
    const kept = new Set(await privatePorts(db, id));
    return servers.filter((server) => !kept.has(server.port));
  };

  /** The project's servers, or the API's error: no front door, a backend that does not find them, not running. */
  const serversOf = async (id: string, project: Parameters<typeof sandboxNotRunning>[1]) => {
    if (!options.frontDoor || !find) throw new HttpError(409, "conflict", "this platform runs no front door");
    const servers = await routable(id);
    if (servers === null)
      throw new HttpError(
        409,
        "conflict",
        "the front door does not find this project's dev servers by themselves: its backend does not say them, or it is a kubernetes project whose Pod admits no front door (tenants.kubernetes.frontDoorFrom)",
      );
    if (servers === undefined) throw sandboxNotRunning(id, project);
    return servers;
  };
  const partOf = async (id: string) =>
    (await projectParts(db)).byId.get(id) ??
    // A project made within the second: read again.
    (await projectParts(db, true)).byId.get(id) ??
    (() => {
      throw new HttpError(404, "not_found", `no project ${id}`);
    })();

  routes.handle(devServersRoute, async ({ params: { id }, project }) => {
    const servers = await serversOf(id, project);
    const { port, tls } = options.frontDoor!;
    return {
      dev_servers: devServerNames(await partOf(id), servers, domainOf()).map(({ server, hosts }) => ({
        port: server.port,
        address: server.address,
        worktree: server.worktree ?? null,
        reachable: reachableAddress(server.address),
        hosts,
        url: hosts[0] ? frontDoorUrl(hosts[0], port, tls) : null,
      })),
      private_ports: await privatePorts(db, id),
    };
  });

  routes.handle(devServerSessionRoute, async ({ userId, params: { id }, project, body }) => {
    const servers = await serversOf(id, project);
    const part = await partOf(id);
    const asked: DevServerHost = { project: part, ...(body ?? {}) };
    const server = devServerFor(asked, servers);
    if (!server)
      throw new HttpError(
        404,
        "not_found",
        `nothing listens on ${describeAsked(asked)} in the sandbox of ${id}`,
      );
    const sub =
      asked.port !== undefined
        ? `p${asked.port}.`
        : asked.worktree
          ? `${worktreeHostLabel(asked.worktree)}.`
          : "";
    const base = frontDoorUrl(`${sub}${part}.${domainOf()}`, options.frontDoor!.port, options.frontDoor!.tls);
    const ticket = options.sessions.issue(userId, id);
    return {
      url: `${base}__sbx/session?ticket=${ticket}`,
      front_door_url: base,
      port: server.port,
      expires_in: 60,
    };
  });

  routes.handle(
    devServerTicketRoute,
    async ({ reply, readQuery }) => {
      // Every answer is the database's (a 503 while it is down, like every route's), then the query's.
      await pingDatabase(db);
      const { host, ticket } = readQuery();
      const named = await devServerHostProject(db, host, domainOf());
      if (!named) return options.notFound(reply);
      return options.redeem(reply, named.id, ticket);
    },
    { deferQuery: true },
  );

  routes.handle(
    devServerAuthRoute,
    async ({ request, reply, readQuery }) => {
      await pingDatabase(db);
      const { host } = readQuery();
      const named = await devServerHostProject(db, host, domainOf());
      if (!named || !find) return options.notFound(reply);
      const row = await options.ownersRunningProject(request, reply, named.id, { wake: true });
      if (!row) return reply;
      // A recent reading when it has a server the front door reaches there; else the sockets as they are now.
      const recent = await routable(named.id, FORWARD_AUTH_READING_MS);
      const hit = recent && devServerFor(named.asked, recent);
      const servers = hit && reachableAddress(hit.address) ? recent : await routable(named.id);
      if (servers === null) return options.notFound(reply);
      const server = servers && devServerFor(named.asked, servers);
      const what = describeAsked(named.asked);
      if (!server)
        return notServing(
          reply,
          `${row.name}: nothing listens on ${what}`,
          `No dev server of <b>${escapeHtml(row.name)}</b> listens on ${escapeHtml(what)} now: it is not running, ` +
            `or stopped. Start it in the sandbox and reload this page.`,
        );
      if (!reachableAddress(server.address))
        return notServing(
          reply,
          `${row.name}: port ${server.port} listens on ${server.address} only`,
          `The dev server on port ${server.port} listens on <code>${escapeHtml(server.address)}</code> alone, which ` +
            `only the sandbox reaches. Start it on every address (<code>0.0.0.0</code>: for example ` +
            `<code>--host 0.0.0.0</code>) and reload this page.`,
        );
      // The sandbox's bridge address, or where its backend said it is (a Pod's own address).
      const upstream = server.host ?? (row.subnet ? tenantAddresses(row.subnet).sandbox : undefined);
      if (!upstream) return options.notFound(reply);
      return reply
        .status(200)
        .header(
          FRONT_DOOR_UPSTREAM_HEADER,
          `${upstream.includes(":") ? `[${upstream}]` : upstream}:${server.port}`,
        )
        .send();
    },
    { deferQuery: true },
  );
}
