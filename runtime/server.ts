import Fastify, { type FastifyInstance } from "fastify";
import type { Auth } from "./api/auth.js";
import { registerAuthRoutes } from "./api/auth-routes.js";
import { openApiDocument } from "./api/openapi.js";
import { registerProjectRoutes, type ProjectRoutesOptions } from "./api/project-routes.js";
import { isDatabaseUnavailable } from "./db.js";
import { HttpError } from "./errors.js";
import { healthReport, type Prerequisite } from "./health.js";

export interface ServerOptions {
  readonly prerequisites: readonly Prerequisite[];
  readonly auth?: Auth;
  /** The project API (needs `auth`). */
  readonly projects?: Omit<ProjectRoutesOptions, "auth">;
  /** pino options; `false` silences request logs (tests). */
  readonly logger?: boolean | { level: string };
}

/** Request bodies are small JSON documents; anything larger is refused before it is read. */
export const BODY_LIMIT_BYTES = 64 * 1024;

/** The runtime's HTTP service. No I/O happens here until a request arrives. */
export function buildServer(options: ServerOptions): FastifyInstance {
  const app = Fastify({
    logger: options.logger ?? { level: "info" },
    requestIdHeader: "x-request-id",
    bodyLimit: BODY_LIMIT_BYTES,
    // Behind no proxy by default; request.ip is the peer (login throttling per address relies on it).
    trustProxy: false,
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

  const document = openApiDocument("0.1.0");
  app.get("/openapi.json", async () => document);

  if (options.auth) registerAuthRoutes(app, options.auth);
  if (options.auth && options.projects)
    registerProjectRoutes(app, { ...options.projects, auth: options.auth });
  return app;
}
