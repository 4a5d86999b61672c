// The front door's runtime side: the owner's session URL, the cookie it sets, and the
// forward-auth check Caddy makes before every request to a sandbox's dev server.
import type { FastifyReply, FastifyRequest } from "fastify";
import { z } from "zod";
import { pingDatabase, type Database } from "../../store/db.js";
import { frontDoorProject, projectExists, projectsByFrontDoorLabel } from "../../store/projects.js";
import { liveE2bSandbox } from "../../store/e2b-sandboxes.js";
import { tenantPorts } from "../../store/tenants.js";
import { HttpError } from "../../errors.js";
import { ProjectParams, projectStatus } from "../projects/schemas.js";
import type { Auth } from "../auth.js";
import { redeemTicket, TicketError, TicketIssuer, type TicketClaims } from "../../terminal/tickets.js";
import {
  e2bHost,
  FRONT_DOOR_COOKIE,
  FRONT_DOOR_SESSION_PATH,
  FRONT_DOOR_UPSTREAM_HEADER,
  frontDoorRoutes,
  frontDoorUrl,
  LOCAL_FRONT_DOOR_DOMAIN,
  type FrontDoorRouteHosts,
} from "../../../lib/front-door.js";
import { tenantAddresses } from "../../../lib/subnets.js";
import { devServerFor } from "../../../lib/dev-server-names.js";
import {
  devServerApiRoutes,
  devServerHostProject,
  registerDevServerRoutes,
  type DevServerFinder,
} from "./dev-servers.js";
import { route, type Routes } from "../route.js";
import { clientGone } from "../wake.js";
import { WAKE_WAIT_MS, wakeProject } from "../../tenants/wake.js";

/** How long the cookie lets its owner in (then `sbx open` or the console makes a new one). */
export const FRONT_DOOR_COOKIE_SECONDS = 3600;

export interface FrontDoorRoutesOptions {
  readonly db: Database;
  /** Derives the keys of the session tickets and the cookies. */
  readonly auth: Auth;
  /** The front door's listen port and domain (URLs); absent: the platform runs none. */
  readonly frontDoor?: { readonly port: number; readonly domain?: string; readonly tls?: boolean };
  /** Each project's dev servers now, found without being declared (SandboxBackends.devServers). */
  readonly devServers?: DevServerFinder;
}

export const FrontDoorSessionBody = z
  .object({
    /** Which declared route (by name; none: the unnamed one, else the first declared). */
    name: z.string().max(32).optional(),
    /** Which declared port (with `name`: that name's); none: the first of the name. */
    port: z.number().int().min(1).max(65535).optional(),
  })
  .strict()
  .optional();

export const FrontDoorTicketQuery = z.object({ ticket: z.string().min(1).max(2048) }).strict();

export const FrontDoorSessionAnswer = z
  .object({
    /** Open it (browser or curl -L with a cookie jar) within 60 s, once. */
    url: z.string(),
    /** The route's URL, for the cookie's owner. */
    front_door_url: z.string(),
    port: z.number().int(),
    expires_in: z.number().int(),
  })
  .strict();

const NOT_FOUND = "<!doctype html><title>404 Not Found</title><h1>404 Not Found</h1>\n";
const escapeHtml = (text: string) => text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

function cookieOf(header: string | undefined): string | undefined {
  for (const part of (header ?? "").split(";")) {
    const [key, ...value] = part.trim().split("=");
    if (key === FRONT_DOOR_COOKIE) return value.join("=");
  }
  return undefined;
}

/** The token's claims for `project`, or undefined for a bad, expired or foreign one. */
function verified(issuer: TicketIssuer, token: string, project: string): TicketClaims | undefined {
  try {
    return issuer.verify(token, project, undefined);
  } catch (error) {
    if (error instanceof TicketError) return undefined;
    throw error;
  }
}

export const frontDoorSessionRoute = route({
  method: "post",
  path: "/projects/{id}/front-door/session",
  summary:
    "A one-time URL (60 s) on a front-door route's own host; opening it sets a host-scoped HttpOnly cookie (an hour) that lets the owner through to the sandbox's dev server (docs/front-door.md)",
  params: ProjectParams,
  body: FrontDoorSessionBody,
  bodyOptional: true,
  access: "owner",
  responses: {
    200: { description: "the one-time URL and the route's own URL", body: FrontDoorSessionAnswer },
    404: "no such project of the caller's, or no declared port of this name",
    409: "the project declares no front-door ports, or this platform runs no front door",
  },
});

export const frontDoorTicketRoute = route({
  method: "get",
  path: "/front-door/session/{id}",
  summary:
    "Caddy, for `/__sbx/session?ticket=` on a route's host: redeems the one-time ticket, sets the cookie, redirects to `/`",
  params: ProjectParams,
  query: FrontDoorTicketQuery,
  access: "anyone",
  responses: {
    302: { description: "the cookie is set; Location: /", body: z.string(), contentType: "text/plain" },
    404: { description: "a bad, expired or used ticket", body: z.string(), contentType: "text/html" },
  },
});

export const frontDoorAuthRoute = route({
  method: "get",
  path: "/front-door/auth/{id}",
  summary:
    "Caddy's forward-auth before every front-door request: 200 lets the cookie's owner through; 404 for anyone else (the project's existence is not revealed); a sandbox the platform put to sleep is woken for its owner first, the answer held until it runs; 503 with a page naming the state when the sandbox is not running",
  params: ProjectParams,
  access: "anyone",
  responses: {
    200: { description: "the owner: go on to the sandbox", body: z.string(), contentType: "text/plain" },
    404: {
      description: "no cookie, a bad one, or not the owner",
      body: z.string(),
      contentType: "text/html",
    },
    503: { description: "the 'not running' page", body: z.string(), contentType: "text/html" },
  },
});

export const FrontDoorPortParams = z
  .object({
    id: ProjectParams.shape.id,
    port: z.coerce.number().int().min(1).max(65535),
  })
  .strict();

export const frontDoorPortAuthRoute = route({
  method: "get",
  path: "/front-door/auth/{id}/ports/{port}",
  summary:
    "Caddy's forward-auth for an E2B sandbox's port host (`<port>-<id>.<domain>`, what the SDK's getHost names): as /front-door/auth/{id} for the owner's cookie, and a 200 says where the sandbox's port is (X-Sbx-Upstream)",
  params: FrontDoorPortParams,
  access: "anyone",
  responses: {
    200: {
      description: "the owner: go on to the sandbox's port",
      body: z.string(),
      contentType: "text/plain",
    },
    404: {
      description: "no cookie, a bad one, not the owner, or not an E2B sandbox",
      body: z.string(),
      contentType: "text/html",
    },
    503: { description: "the 'not running' page", body: z.string(), contentType: "text/html" },
  },
});

export const FrontDoorTlsAskQuery = z.object({ domain: z.string().min(1).max(253) }).strict();

export const frontDoorTlsAskRoute = route({
  method: "get",
  path: "/front-door/tls-ask",
  summary:
    "Caddy's on-demand TLS question on a public front door, before it asks for a certificate: 200 when the name is one this platform serves (the domain, `api.<domain>`, a live E2B sandbox's envd host `49983-<id>.<domain>`, a declared dev-server route's host), 404 for any other",
  query: FrontDoorTlsAskQuery,
  access: "anyone",
  responses: {
    200: {
      description: "served: Caddy may get its certificate",
      body: z.string(),
      contentType: "text/plain",
    },
    404: "not a name this platform serves",
  },
});

/** The routes above, in the document's order. */
export const frontDoorApiRoutes = [
  frontDoorSessionRoute,
  frontDoorTicketRoute,
  frontDoorAuthRoute,
  frontDoorPortAuthRoute,
  frontDoorTlsAskRoute,
  ...devServerApiRoutes,
] as const;

const E2B_HOST_LABEL = /^([1-9][0-9]{0,4})-([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$/;
const ROUTE_HOST_LABEL = /^(?:p[0-9]{1,5}-)?([0-9a-f]{12})(?:-[a-z0-9-]{1,32})?$/;

/**
 * Whether the front door serves `host` (lowercase, no port): the platform's own names, an E2B sandbox's envd
 * host while its project lives, a dev-server route's host while its project declares that port, a found dev
 * server's name while a server listens there.
 */
async function servesHost(
  db: Database,
  frontDoor: NonNullable<FrontDoorRoutesOptions["frontDoor"]>,
  host: string,
  find?: DevServerFinder,
): Promise<boolean> {
  const domain = frontDoor.domain ?? LOCAL_FRONT_DOOR_DOMAIN;
  if (host === domain || host === `api.${domain}`) return true;
  if (!host.endsWith(`.${domain}`)) return false;
  const label = host.slice(0, -domain.length - 1);
  // An E2B sandbox's names, `<port>-<id>` (envd's port and every other, as the SDK's getHost forms them).
  const e2b = E2B_HOST_LABEL.exec(label);
  if (e2b) return Number(e2b[1]) <= 65535 && (await liveE2bSandbox(db, e2b[2]!)) !== undefined;
  // A found dev server's name while a server listens there: no certificate is asked for a made-up worktree.
  const named = find && (await devServerHostProject(db, host, domain));
  if (named) {
    const servers = await find(named.id, 1_000);
    return !!servers && devServerFor(named.asked, servers) !== undefined;
  }
  const projectLabel = ROUTE_HOST_LABEL.exec(label)?.[1];
  if (!projectLabel) return false;
  for (const id of await projectsByFrontDoorLabel(db, projectLabel)) {
    const declared = frontDoorRoutes(id, (await tenantPorts(db, id)) ?? [], frontDoor.port, domain);
    if (declared.some((entry) => entry.hosts.includes(host))) return true;
  }
  return false;
}

/** The declared route a session asks for (by port and/or name; none: the unnamed one, else the first). */
function declaredEntry(
  declared: readonly FrontDoorRouteHosts[],
  body: z.infer<typeof FrontDoorSessionBody>,
): FrontDoorRouteHosts {
  if (declared.length === 0)
    throw new HttpError(
      409,
      "conflict",
      "the project declares no front-door ports (PATCH /projects/{id} with ports)",
    );
  const entry =
    declared.find(
      (r) =>
        (body?.port === undefined || r.port === body.port) &&
        (body?.name === undefined ? body?.port !== undefined || r.name === undefined : r.name === body.name),
    ) ?? (body?.name === undefined && body?.port === undefined ? declared[0] : undefined);
  if (!entry)
    throw new HttpError(
      404,
      "not_found",
      `no declared front-door port${body?.port === undefined ? "" : ` ${body.port}`}${body?.name === undefined ? "" : ` is named ${body.name}`}`,
    );
  return entry;
}

export function registerFrontDoorRoutes(routes: Routes, options: FrontDoorRoutesOptions): void {
  const { db, auth } = options;
  // One-time session tickets (60 s) and the cookie (an hour), each under its own derived key, so a
  // terminal ticket is neither, and a session ticket is no cookie.
  const sessions = new TicketIssuer(auth.derivedKey("front door sessions v1"));
  const cookies = new TicketIssuer(auth.derivedKey("front door cookies v1"), FRONT_DOOR_COOKIE_SECONDS);
  const notFound = (reply: FastifyReply) => reply.status(404).type("text/html").send(NOT_FOUND);

  // The owner asks for a one-time URL on the route's own host; opening it sets the cookie there.
  routes.handle(frontDoorSessionRoute, async ({ userId, params: { id }, body }) => {
    if (!options.frontDoor) throw new HttpError(409, "conflict", "this platform runs no front door");
    const { port, domain, tls } = options.frontDoor;
    const entry =
      // An E2B sandbox's port needs no declaration: its host is the SDK's getHost(port), `<port>-<id>.<domain>`.
      body?.port !== undefined && body.name === undefined && (await liveE2bSandbox(db, id))
        ? { port: body.port, url: frontDoorUrl(e2bHost(id, body.port, domain), port, tls) }
        : declaredEntry(frontDoorRoutes(id, (await tenantPorts(db, id)) ?? [], port, domain, tls), body);
    const base = entry.url.replace(/\/$/, "");
    const ticket = sessions.issue(userId, id);
    return {
      url: `${base}${FRONT_DOOR_SESSION_PATH}?ticket=${ticket}`,
      front_door_url: `${base}/`,
      port: entry.port,
      expires_in: 60,
    };
  });

  /** A one-time ticket of `id`'s redeemed: the cookie set, on to `/`; anything else 404. */
  const redeem = async (reply: FastifyReply, id: string, ticket: string) => {
    const claims = verified(sessions, ticket, id);
    if (!claims || !(await redeemTicket(db, claims))) return notFound(reply);
    const cookie = cookies.issue(claims.user, id);
    return reply
      .status(302)
      .header(
        "set-cookie",
        `${FRONT_DOOR_COOKIE}=${cookie}; Path=/; HttpOnly; SameSite=Lax; Max-Age=${FRONT_DOOR_COOKIE_SECONDS}${options.frontDoor?.tls ? "; Secure" : ""}`,
      )
      .header("location", "/")
      .send();
  };

  // Caddy, for `/__sbx/session?ticket=...` on a route's host: redeem it, set the cookie, go to `/`.
  routes.handle(
    frontDoorTicketRoute,
    async ({ reply, params: { id }, readQuery }) => {
      // The project first (the database answers, or this is a 503 like every route's), then the ticket.
      const exists = await projectExists(db, id);
      const { ticket } = readQuery();
      return exists ? redeem(reply, id, ticket) : notFound(reply);
    },
    { deferQuery: true },
  );

  // Caddy's on-demand TLS, at the first handshake for a name under the domain: a certificate only for a name
  // served here, so that nobody can make the front door ask its CA for names of their choosing.
  routes.handle(
    frontDoorTlsAskRoute,
    async ({ reply, readQuery }) => {
      // Every answer is the database's (a 503 while it is down, like every route's: Caddy then gives no
      // certificate and asks again at a later handshake), even for a name decided without it; then the name.
      await pingDatabase(db);
      const host = readQuery().domain.toLowerCase().replace(/\.$/, "");
      if (!options.frontDoor || !(await servesHost(db, options.frontDoor, host, options.devServers)))
        throw new HttpError(404, "not_found", `${host} is not a name this platform's front door serves`);
      return reply.status(200).type("text/plain").send("served\n");
    },
    { deferQuery: true },
  );

  /**
   * The owner's running project, or the answer already sent: 404 for no cookie, a bad one, another user's
   * (as for a project that does not exist), 503 with a page naming the state when it is not running.
   */
  const ownersRunningProject = async (
    request: FastifyRequest,
    reply: FastifyReply,
    id: string,
    { wake }: { wake: boolean } = { wake: false },
  ) => {
    // The project first (the database answers, or this is a 503 like every route's), then the cookie.
    let row = await frontDoorProject(db, id);
    const cookie = cookieOf(request.headers.cookie);
    const claims = row && cookie !== undefined ? verified(cookies, cookie, id) : undefined;
    if (!row || !claims || claims.user !== row.user_id) {
      await notFound(reply);
      return undefined;
    }
    // Its owner's request to a sandbox the platform put to sleep wakes it, held until it runs (Caddy waits
    // for this answer); a failed or late wake leaves the page below, naming the state.
    if (row.state !== "running" && wake) {
      const woken = await wakeProject(db, id, { timeoutMs: WAKE_WAIT_MS, gone: clientGone(request) }).catch(
        (error: Error) => {
          request.log.warn(
            { project: id, error: error.message },
            "the front door could not wake the sandbox",
          );
          return false;
        },
      );
      if (woken) row = (await frontDoorProject(db, id)) ?? row;
    }
    if (row.state !== "running") {
      const status = projectStatus(row.state, row);
      await reply
        .status(503)
        .header("retry-after", "10")
        .type("text/html")
        .send(
          `<!doctype html><title>${escapeHtml(row.name)}: not running</title>\n` +
            `<h1>The sandbox of ${escapeHtml(row.name)} is not running</h1>\n` +
            `<p>The project is <b>${escapeHtml(status)}</b>. Start it (<code>sbx start</code>, or Start in the ` +
            `console) and reload this page.</p>\n`,
        );
      return undefined;
    }
    return row;
  };

  // Caddy's forward_auth, before every request: 200 lets it through to the sandbox; any other answer is
  // the browser's.
  routes.handle(frontDoorAuthRoute, async ({ request, reply, params: { id } }) => {
    if (!(await ownersRunningProject(request, reply, id, { wake: true }))) return reply;
    return reply.status(200).send();
  });

  registerDevServerRoutes(routes, {
    db,
    frontDoor: options.frontDoor,
    find: options.devServers,
    sessions,
    ownersRunningProject,
    redeem,
    notFound,
  });

  // The same for an E2B sandbox's port host, whose route cannot name the sandbox's address ahead: a 200
  // says it. Only an E2B sandbox's (its names are E2B's form) on a backend whose sandbox has a bridge address.
  routes.handle(frontDoorPortAuthRoute, async ({ request, reply, params: { id, port } }) => {
    const row = await ownersRunningProject(request, reply, id);
    if (!row) return reply;
    if (!row.subnet || !(await liveE2bSandbox(db, id))) return notFound(reply);
    return reply
      .status(200)
      .header(FRONT_DOOR_UPSTREAM_HEADER, `${tenantAddresses(row.subnet).sandbox}:${port}`)
      .send();
  });
}
