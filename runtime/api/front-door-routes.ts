// The front door's runtime side: the owner's session URL, the cookie it sets, and the
// forward-auth check Caddy makes before every request to a sandbox's dev server.
import type { FastifyInstance, FastifyReply } from "fastify";
import { z } from "zod";
import type { Database } from "../db.js";
import type { Auth } from "./auth.js";
import { HttpError } from "../errors.js";
import { parseInput } from "./validation.js";
import { ownProject, ProjectParams, projectStatus } from "./project-routes.js";
import { redeemTicket, TicketError, TicketIssuer, type TicketClaims } from "../terminal/tickets.js";
import { FRONT_DOOR_COOKIE, frontDoorRoutes } from "../../lib/front-door.js";
import type { TenantSpec } from "../../components/tenant/spec.js";
import type { TenantState } from "../tenants/service.js";

/** How long the cookie lets its owner in (then `sbx open` or the console makes a new one). */
export const FRONT_DOOR_COOKIE_SECONDS = 3600;
/** The path Caddy sends `/__sbx/session` to (provider/resources/front-door-route.ts). */
const SESSION_PATH = "/front-door/session";

export interface FrontDoorRoutesOptions {
  readonly db: Database;
  readonly auth: Auth;
  /** The front door's listen port and domain (URLs); absent: the platform runs none. */
  readonly frontDoor?: { readonly port: number; readonly domain?: string; readonly tls?: boolean };
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

export function registerFrontDoorRoutes(app: FastifyInstance, options: FrontDoorRoutesOptions): void {
  const { db, auth } = options;
  // One-time session tickets (60 s) and the cookie (an hour), each under its own derived key, so a
  // terminal ticket is neither, and a session ticket is no cookie.
  const sessions = new TicketIssuer(auth.derivedKey("front door sessions v1"));
  const cookies = new TicketIssuer(auth.derivedKey("front door cookies v1"), FRONT_DOOR_COOKIE_SECONDS);
  const notFound = (reply: FastifyReply) => reply.status(404).type("text/html").send(NOT_FOUND);

  // The owner asks for a one-time URL on the route's own host; opening it sets the cookie there.
  app.post("/projects/:id/front-door/session", async (request) => {
    const userId = await auth.authenticate(request.headers.authorization);
    const { id } = parseInput(ProjectParams, request.params, "params");
    const body = parseInput(FrontDoorSessionBody, request.body, "body");
    await ownProject(db, userId, id);
    if (!options.frontDoor) throw new HttpError(409, "conflict", "this platform runs no front door");
    const { rows } = await db.query<{ ports: TenantSpec["ports"] | null }>(
      "select spec->'ports' as ports from tenants where project_id = $1",
      [id],
    );
    const routes = frontDoorRoutes(
      id,
      rows[0]?.ports ?? [],
      options.frontDoor.port,
      options.frontDoor.domain,
      options.frontDoor.tls,
    );
    if (routes.length === 0)
      throw new HttpError(
        409,
        "conflict",
        "the project declares no front-door ports (PATCH /projects/{id} with ports)",
      );
    const entry =
      routes.find(
        (r) =>
          (body?.port === undefined || r.port === body.port) &&
          (body?.name === undefined
            ? body?.port !== undefined || r.name === undefined
            : r.name === body.name),
      ) ?? (body?.name === undefined && body?.port === undefined ? routes[0] : undefined);
    if (!entry)
      throw new HttpError(
        404,
        "not_found",
        `no declared front-door port${body?.port === undefined ? "" : ` ${body.port}`}${body?.name === undefined ? "" : ` is named ${body.name}`}`,
      );
    const base = entry.url.replace(/\/$/, "");
    const ticket = sessions.issue(userId, id);
    return {
      url: `${base}/__sbx/session?ticket=${ticket}`,
      front_door_url: `${base}/`,
      port: entry.port,
      expires_in: 60,
    };
  });

  // Caddy, for `/__sbx/session?ticket=...` on a route's host: redeem it, set the cookie, go to `/`.
  app.get(`${SESSION_PATH}/:id`, async (request, reply) => {
    const { id } = parseInput(ProjectParams, request.params, "params");
    // The project first (the database answers, or this is a 503 like every route's), then the ticket.
    const { rows } = await db.query("select 1 from projects where id = $1", [id]);
    const { ticket } = parseInput(FrontDoorTicketQuery, request.query, "query");
    const claims = rows.length === 0 ? undefined : verified(sessions, ticket, id);
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
  });

  // Caddy's forward_auth, before every request: 200 lets it through to the sandbox; any other answer is
  // the browser's. Not the owner, no cookie, a bad one: 404, as for a project that does not exist.
  app.get("/front-door/auth/:id", async (request, reply) => {
    const { id } = parseInput(ProjectParams, request.params, "params");
    // The project first (the database answers, or this is a 503 like every route's), then the cookie.
    const { rows } = await db.query<{ user_id: string; name: string; state: TenantState; running: boolean }>(
      `select p.user_id, p.name, t.state, (t.spec->>'running')::boolean as running
         from projects p join tenants t on t.project_id = p.id
        where p.id = $1 and t.state <> 'deleted'`,
      [id],
    );
    const row = rows[0];
    const cookie = cookieOf(request.headers.cookie);
    const claims = row && cookie !== undefined ? verified(cookies, cookie, id) : undefined;
    if (!row || !claims || claims.user !== row.user_id) return notFound(reply);
    if (row.state !== "running") {
      const status = projectStatus(row.state, row);
      return reply
        .status(503)
        .header("retry-after", "10")
        .type("text/html")
        .send(
          `<!doctype html><title>${escapeHtml(row.name)}: not running</title>\n` +
            `<h1>The sandbox of ${escapeHtml(row.name)} is not running</h1>\n` +
            `<p>The project is <b>${escapeHtml(status)}</b>. Start it (<code>sbx start</code>, or Start in the ` +
            `console) and reload this page.</p>\n`,
        );
    }
    return reply.status(200).send();
  });
}
