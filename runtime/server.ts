import { randomUUID } from "node:crypto";
import Fastify, { type FastifyInstance } from "fastify";
import type { Auth } from "./api/auth.js";
import { registerAuthRoutes } from "./api/auth-routes.js";
import { openApiDocument } from "./api/openapi.js";
import { registerProjectRoutes, type ProjectRoutesOptions } from "./api/project-routes.js";
import { registerTerminalRoutes } from "./api/terminal-routes.js";
import { registerWebConsole, type WebConsoleOptions } from "./api/web-console.js";
import { isDatabaseUnavailable } from "./db.js";
import { HttpError } from "./errors.js";
import { healthReport, type Prerequisite } from "./health.js";
import { Metrics } from "./metrics.js";

export interface ServerOptions {
  readonly prerequisites: readonly Prerequisite[];
  readonly auth?: Auth;
  /** The project API (needs `auth`). */
  readonly projects?: Omit<ProjectRoutesOptions, "auth">;
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

/** The runtime's HTTP service. No I/O happens here until a request arrives. */
export function buildServer(options: ServerOptions): FastifyInstance {
  const app = Fastify({
    logger: options.logger ?? { level: "info" },
    requestIdHeader: false,
    // One line per request (below), not Fastify's two: half the logging cost on the hot path.
    disableRequestLogging: true,
    genReqId: (request) => {
      const given = request.headers["x-request-id"];
      return typeof given === "string" && REQUEST_ID.test(given) ? given : randomUUID();
    },
    bodyLimit: BODY_LIMIT_BYTES,
    // Behind no proxy by default; request.ip is the peer (login throttling per address relies on it).
    trustProxy: false,
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
      return reply.status(status).send({ error: "bad_request", message: (error as Error).message });
    }
    // Raw errors and stack traces stay in the log, keyed by request id.
    request.log.error({ err: error }, "unhandled error");
    return reply.status(500).send({ error: "internal", message: "internal error", request_id: request.id });
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

  if (options.auth) registerAuthRoutes(app, options.auth);
  if (options.webConsole) registerWebConsole(app, options.webConsole);
  if (options.auth && options.projects) {
    registerProjectRoutes(app, { ...options.projects, auth: options.auth });
    registerTerminalRoutes(app, { db: options.projects.db, auth: options.auth });
  }
  return app;
}
