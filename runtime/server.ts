import { randomUUID } from "node:crypto";
import Fastify, { LogController, type FastifyInstance, type FastifyReply } from "fastify";
import type { Auth } from "./api/auth.js";
import { registerAuthRoutes } from "./api/auth-routes.js";
import type { InviteCodes } from "./api/invites.js";
import { openApiDocument } from "./api/openapi.js";
import { registerProjectRoutes, type ProjectRoutesOptions } from "./api/project-routes.js";
import { registerTerminalRoutes } from "./api/terminal-routes.js";
import { registerAdminRoutes } from "./api/admin-routes.js";
import type { JobScheduler } from "./jobs/scheduler.js";
import { registerWebConsole, type WebConsoleOptions } from "./api/web-console.js";
import { isDatabaseUnavailable } from "./db.js";
import { HttpError } from "./errors.js";
import { healthReport, type Prerequisite } from "./health.js";
import { Metrics } from "./metrics.js";
import { RuntimeConfig } from "../stacks/config.js";

/** Who may register, how many projects a user may hold, and how fast both may be asked for. */
export type AccountLimits = Pick<RuntimeConfig, "registration" | "projectQuota" | "rateLimits">;

export interface ServerOptions {
  readonly prerequisites: readonly Prerequisite[];
  readonly auth?: Auth;
  /** `agent-sandbox:runtime`'s registration, projectQuota and rateLimits; their defaults when absent. */
  readonly limits?: AccountLimits;
  /** Operators' emails (`agent-sandbox:runtime.admins`): they get `/admin/*`; everyone else a 404 there. */
  readonly admins?: readonly string[];
  /** The background jobs an operator can run now. */
  readonly jobs?: JobScheduler;
  /** Verifies invite codes (required when `limits.registration` is `invite`). */
  readonly invites?: InviteCodes;
  /** The project API (needs `auth`). */
  readonly projects?: Omit<ProjectRoutesOptions, "auth" | "quota" | "createRate">;
  /** pino options; `false` silences request logs (tests). */
  readonly logger?: boolean | { level: string; stream?: NodeJS.WritableStream };
  readonly metrics?: Metrics;
  /** Serve the web console (dist/web) at `/`. */
  readonly webConsole?: WebConsoleOptions;
  /** The in-process reconciler's running operations, for /metrics. */
  readonly reconcilerInFlight?: () => number;
}

/** A caller's request id is kept when it is a sane token (it ends up in logs); else one is made. */
const REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

declare module "fastify" {
  interface FastifyInstance {
    /** Every route registered, as `METHOD url` (the OpenAPI test checks each is documented). */
    readonly routeTable: readonly string[];
  }
}

/** Request bodies are small JSON documents; anything larger is refused before it is read. */
export const BODY_LIMIT_BYTES = 64 * 1024;

/** The codes of the 4xx errors Fastify raises itself (body parsing), by status. */
const FRAMEWORK_ERROR_CODES: Record<number, string> = {
  413: "payload_too_large",
  415: "unsupported_media_type",
};

/** A route's URL pattern (`/projects/:id`, `/assets/*`) as a regular expression over request paths. */
const routePattern = (url: string) =>
  new RegExp(
    `^${url
      .split(/(:\w+|\*)/)
      .map((part) =>
        part === "*" ? ".*" : part.startsWith(":") ? "[^/]+" : part.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"),
      )
      .join("")}$`,
  );

/** The runtime's HTTP service. No I/O happens here until a request arrives. */
export function buildServer(options: ServerOptions): FastifyInstance {
  const app = Fastify({
    logger: options.logger ?? { level: "info" },
    requestIdHeader: false,
    // One line per request (below), not Fastify's two: half the logging cost on the hot path.
    logController: new LogController({ disableRequestLogging: true }),
    genReqId: (request) => {
      const given = request.headers["x-request-id"];
      return typeof given === "string" && REQUEST_ID.test(given) ? given : randomUUID();
    },
    bodyLimit: BODY_LIMIT_BYTES,
    // Behind no proxy by default; request.ip is the peer (login throttling per address relies on it).
    trustProxy: false,
    // A path Fastify cannot route (bad percent-encoding, a segment past 100 characters) is invalid input,
    // answered as every other is; anything else it raises before routing is an internal error.
    frameworkErrors: (error, request, untyped) => {
      const reply = untyped as FastifyReply;
      if (error.code === "FST_ERR_BAD_URL" || error.code === "FST_ERR_MAX_PARAM_LENGTH")
        return reply.status(400).send({ error: "bad_request", message: `invalid path: ${error.message}` });
      request.log.error({ err: error }, "routing error");
      return reply.status(500).send({ error: "internal", message: "internal error", request_id: request.id });
    },
  });

  const routes: string[] = [];
  app.decorate("routeTable", routes);
  app.addHook("onRoute", (route) => {
    for (const method of [route.method].flat()) if (method !== "HEAD") routes.push(`${method} ${route.url}`);
  });
  const metrics = options.metrics ?? new Metrics();
  app.addHook("onRequest", async (request, reply) => {
    void reply.header("x-request-id", request.id);
  });
  app.addHook("onResponse", async (request, reply) => {
    // Unmatched URLs share one label value: a scanner must not mint a series per path.
    const route = request.routeOptions.url ?? "unmatched";
    metrics.observeRequest(request.method, route, reply.statusCode, reply.elapsedTime / 1000);
    request.log.info(
      { req: request, res: reply, route, responseTime: reply.elapsedTime },
      "request completed",
    );
  });

  // A POST without a body but with a JSON content type (start, stop...) is an empty request, not an
  // error; anything else goes through Fastify's parser, which refuses prototype poisoning.
  const jsonParser = app.getDefaultJsonParser("error", "error");
  app.removeContentTypeParser("application/json");
  app.addContentTypeParser("application/json", { parseAs: "string" }, (request, body, done) =>
    body === "" ? done(null, undefined) : jsonParser(request, body as string, done),
  );

  app.setErrorHandler((error, request, reply) => {
    if (error instanceof HttpError) {
      const retry = (error.details as { retry_after?: number } | undefined)?.retry_after;
      if (retry !== undefined) void reply.header("retry-after", String(retry));
      return reply
        .status(error.status)
        .send({ error: error.code, message: error.message, details: error.details });
    }
    if (isDatabaseUnavailable(error)) {
      request.log.error({ err: error }, "database unavailable");
      return reply
        .status(503)
        .send({ error: "unavailable", message: "the database is unavailable; try again shortly" });
    }
    const status = (error as { statusCode?: number }).statusCode;
    if (status && status >= 400 && status < 500) {
      return reply
        .status(status)
        .send({ error: FRAMEWORK_ERROR_CODES[status] ?? "bad_request", message: (error as Error).message });
    }
    // Raw errors and stack traces stay in the log, keyed by request id.
    request.log.error({ err: error }, "unhandled error");
    return reply.status(500).send({ error: "internal", message: "internal error", request_id: request.id });
  });

  // A known path asked with a method it does not serve is a 405 naming the ones it does (RFC 9110
  // §15.5.6); only an unknown path is a 404.
  let patterns: { pattern: RegExp; method: string }[] | undefined;
  app.setNotFoundHandler(async (request, reply) => {
    patterns ??= routes.map((route) => {
      const [method, url] = route.split(" ") as [string, string];
      return { pattern: routePattern(url), method };
    });
    const path = request.url.split("?")[0]!;
    const methods = new Set(patterns.filter((p) => p.pattern.test(path)).map((p) => p.method));
    if (methods.has("GET")) methods.add("HEAD");
    // No route for the path, or a route that found nothing there (a static file that is not).
    if (methods.size === 0 || methods.has(request.method))
      return reply.status(404).send({ error: "not_found", message: `${request.method} ${path}: not found` });
    const allow = [...methods].sort().join(", ");
    return reply
      .status(405)
      .header("allow", allow)
      .send({
        error: "method_not_allowed",
        message: `${request.method} is not served at ${path}; use ${allow}`,
      });
  });

  app.get("/healthz", async (_request, reply) => {
    const report = await healthReport(options.prerequisites);
    return reply.status(report.status === "ready" ? 200 : 503).send(report);
  });

  app.get("/metrics", async (_request, reply) => {
    const text = await metrics.render(options.projects?.db, options.reconcilerInFlight);
    return reply.type("text/plain; version=0.0.4; charset=utf-8").send(text);
  });

  const document = openApiDocument("0.1.0");
  app.get("/openapi.json", async () => document);

  const limits = options.limits ?? RuntimeConfig.parse({});
  if (options.auth)
    registerAuthRoutes(app, options.auth, {
      mode: limits.registration,
      invites: options.invites,
      rate: limits.rateLimits.register,
    });
  if (options.webConsole) registerWebConsole(app, options.webConsole);
  if (options.auth && options.projects)
    registerAdminRoutes(app, {
      db: options.projects.db,
      auth: options.auth,
      admins: options.admins ?? [],
      jobs: options.jobs,
    });
  if (options.auth && options.projects) {
    registerProjectRoutes(app, {
      ...options.projects,
      auth: options.auth,
      quota: limits.projectQuota,
      createRate: limits.rateLimits.createProject,
    });
    registerTerminalRoutes(app, { db: options.projects.db, auth: options.auth });
  }
  return app;
}
