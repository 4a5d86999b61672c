import Fastify, { type FastifyInstance } from "fastify";
import { HttpError } from "./errors.js";
import { healthReport, type Prerequisite } from "./health.js";

export interface ServerOptions {
  readonly prerequisites: readonly Prerequisite[];
  /** pino options; `false` silences request logs (tests). */
  readonly logger?: boolean | { level: string };
}

/** The runtime's HTTP service. No I/O happens here until a request arrives. */
export function buildServer(options: ServerOptions): FastifyInstance {
  const app = Fastify({
    logger: options.logger ?? { level: "info" },
    requestIdHeader: "x-request-id",
  });

  app.setErrorHandler((error, request, reply) => {
    if (error instanceof HttpError) {
      return reply
        .status(error.status)
        .send({ error: error.code, message: error.message, details: error.details });
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

  return app;
}
