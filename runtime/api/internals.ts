// The runtime's own state: readiness (/healthz), Prometheus metrics (/metrics) and the API's document
// (/openapi.json). Readiness is anyone's to know; its details and the metrics are for this host, operators
// and the holder of the metrics token.
import { createHash, timingSafeEqual } from "node:crypto";
import type { FastifyRequest } from "fastify";
import { z } from "zod";
import { PROJECT } from "../../stacks/config.js";
import { isDatabaseUnavailable, type Database } from "../store/db.js";
import { HttpError } from "../errors.js";
import { healthReport, publicHealth, type Prerequisite } from "../health.js";
import { LOOPBACK } from "../http-limits.js";
import type { Metrics } from "../metrics.js";
import type { WarmPool } from "../tenants/pool.js";
import { credentialsOf, type Auth } from "./auth.js";
import { HealthBody } from "./responses.js";
import { route, type Routes } from "./route.js";

/**
 * Who asks for the runtime's internals (`/metrics`, `/healthz`'s checks): a caller on this host, an
 * operator (`runtime.admins`), the holder of the metrics token, another signed-in user, or anyone.
 */
export type InternalsCaller = "local" | "operator" | "metrics-token" | "user" | "public";

/** Headers a reverse proxy adds: a relayed request is not local, whatever the proxy's own address. */
const RELAY_HEADERS = ["forwarded", "x-forwarded-for", "x-real-ip"] as const;

/**
 * A request from this host itself: a loopback peer that did not relay it for someone else. (A proxy on
 * this host that adds none of the relay headers makes everyone local: see docs/security.md.)
 */
export function isLocalRequest(request: FastifyRequest): boolean {
  return LOOPBACK.test(request.ip) && RELAY_HEADERS.every((name) => request.headers[name] === undefined);
}

const digest = (value: string) => createHash("sha256").update(value).digest();

export const healthRoute = route({
  method: "get",
  path: "/healthz",
  summary:
    "Readiness: `status` to anyone; each prerequisite's check (versions, paths) to a caller on the runtime's own host, an operator's access token or the metrics token",
  access: "anyone",
  database: false,
  responses: {
    200: { description: "ready", body: HealthBody },
    401: "an Authorization header that is neither a valid access token nor the metrics token",
    503: { description: "not ready", body: HealthBody },
  },
});

export const metricsRoute = route({
  method: "get",
  path: "/metrics",
  summary:
    "Prometheus metrics: requests, operations by state, reconciler queue depth. For the metrics token, an operator's access token, or a caller on the runtime's own host",
  access: "anyone",
  documentedAuth: true,
  security: [{ bearer: [] }, { metricsToken: [] }],
  responses: {
    200: { description: "text exposition format 0.0.4", body: z.string(), contentType: "text/plain" },
    403: "the access token of someone not an operator (agent-sandbox:runtime.admins)",
  },
});

export const openApiRoute = route({
  method: "get",
  path: "/openapi.json",
  summary: "This document",
  access: "anyone",
  database: false,
  responses: { 200: { description: "OpenAPI 3.1", body: z.object({}).loose() } },
});

/** The routes above, in the document's order. */
export const internalsRoutes = [healthRoute, metricsRoute, openApiRoute] as const;

export interface InternalsOptions {
  readonly prerequisites: readonly Prerequisite[];
  /** Verifies access tokens (absent: only this host and the metrics token see the internals). */
  readonly auth?: Auth;
  /** Operators' emails, lower case (`agent-sandbox:runtime.admins`). */
  readonly operators: ReadonlySet<string>;
  /** The bearer token that opens the internals to a scraper elsewhere. */
  readonly metricsToken?: string;
  readonly metrics: Metrics;
  readonly db?: Database;
  readonly reconcilerInFlight?: () => number;
  readonly pool?: WarmPool;
  /** The OpenAPI document this runtime serves. */
  readonly document: unknown;
}

export function registerInternalsRoutes(routes: Routes, options: InternalsOptions): void {
  const metricsTokenDigest = options.metricsToken === undefined ? undefined : digest(options.metricsToken);
  /** Who asks; a credential that is neither the metrics token nor a user's (a session's or a key's) is a 401 saying so. */
  const internalsCaller = async (request: FastifyRequest): Promise<InternalsCaller> => {
    const local = isLocalRequest(request);
    const credentials = credentialsOf(request.headers);
    if (credentials.authorization === undefined && credentials.apiKey === undefined)
      return local ? "local" : "public";
    const bearer = /^Bearer (\S+)$/.exec(credentials.authorization ?? "")?.[1];
    if (bearer && metricsTokenDigest && timingSafeEqual(digest(bearer), metricsTokenDigest))
      return "metrics-token";
    const notMetrics = metricsTokenDigest ? ", and not the metrics token" : "";
    if (!options.auth) throw new HttpError(401, "unauthorized", "Authorization is not the metrics token");
    const { userId } = await options.auth.caller(credentials).catch((error: unknown) => {
      throw error instanceof HttpError
        ? new HttpError(401, "unauthorized", `${error.message}${notMetrics}`)
        : error;
    });
    if (await options.auth.isOperator(userId, options.operators)) return "operator";
    return local ? "local" : "user";
  };
  const seesInternals = (caller: InternalsCaller) =>
    caller === "local" || caller === "operator" || caller === "metrics-token";

  // Ready or not is anyone's to know (a load balancer's probe); which prerequisite, its version and path
  // are for this host, operators and the metrics token.
  routes.handle(healthRoute, async ({ request, reply }) => {
    // With the database down no token can be checked: the caller counts as if it had sent none, and still
    // learns that the runtime is not ready.
    const caller = await internalsCaller(request).catch((error: unknown) => {
      if (isDatabaseUnavailable(error)) return isLocalRequest(request) ? "local" : "public";
      throw error;
    });
    const report = await healthReport(options.prerequisites);
    return reply
      .status(report.status === "ready" ? 200 : 503)
      .send(seesInternals(caller) ? report : publicHealth(report));
  });

  routes.handle(metricsRoute, async ({ request, reply }) => {
    const caller = await internalsCaller(request);
    if (caller === "public")
      throw new HttpError(
        401,
        "unauthorized",
        "GET /metrics needs the metrics token or an operator's access token (Authorization: Bearer ...), or a request from this host",
      );
    if (!seesInternals(caller))
      throw new HttpError(
        403,
        "forbidden",
        `metrics are for operators (${PROJECT}:runtime.admins) and the holder of the metrics token`,
      );
    const pool = options.pool;
    const text = await options.metrics.render(
      options.db,
      options.reconcilerInFlight,
      pool?.enabled ? () => pool.status() : undefined,
    );
    return reply.type("text/plain; version=0.0.4; charset=utf-8").send(text);
  });

  routes.handle(openApiRoute, () => options.document);
}
