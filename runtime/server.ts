import { randomUUID } from "node:crypto";
import { STATUS_CODES } from "node:http";
import Fastify, { LogController, type FastifyInstance, type FastifyReply } from "fastify";
import type { Auth } from "./api/auth.js";
import { capConnectionsPerAddress, DEFAULT_HTTP_LIMITS, nodeServerOptions } from "./http-limits.js";
import { registerApiKeyRoutes } from "./api/auth/api-keys.js";
import { registerAuthRoutes } from "./api/auth/routes.js";
import type { InviteCodes } from "./api/invites.js";
import { openApiDocument } from "./api/openapi.js";
import { registerE2bControlRoutes } from "./api/e2b/control.js";
import { registerCreateRoute, type CreateRouteOptions } from "./api/projects/create.js";
import { registerForkRoutes } from "./api/projects/fork.js";
import { registerProjectRoutes, type ProjectRoutesOptions } from "./api/projects/routes.js";
import { projectView, type ProjectViewOptions } from "./api/projects/view.js";
import { registerTerminalRoutes } from "./api/terminal/routes.js";
import { registerAdminRoutes } from "./api/admin/routes.js";
import { registerSecretRoutes } from "./api/secrets/routes.js";
import { registerExecRoutes } from "./api/exec/routes.js";
import { registerAgentRoutes } from "./api/agent/routes.js";
import { projectSecretValues } from "./tenants/project-secrets.js";
import { registerFileRoutes } from "./api/files/routes.js";
import { registerEnvd } from "./api/e2b/envd/index.js";
import { registerSyncRoutes } from "./api/sync/routes.js";
import { registerInternalsRoutes } from "./api/internals.js";
import { registerMcpRoutes } from "./api/mcp/routes.js";
import { AgentDelivery } from "./api/agent-config/delivery.js";
import { registerAgentConfigRoutes } from "./api/agent-config/routes.js";
import { Routes } from "./api/route.js";
import { backendKinds, platformBackends, type SandboxBackends } from "./backends/registry.js";
import type { SandboxRunners } from "./sandbox/runner.js";
import type { KubernetesProjects } from "./kubernetes/sandbox.js";
import { registerFrontDoorRoutes } from "./api/front-door/routes.js";
import type { JobScheduler } from "./jobs/scheduler.js";
import { registerWebConsole, type WebConsoleOptions } from "./api/web-console.js";
import { isDatabaseUnavailable } from "./store/db.js";
import { HttpError } from "./errors.js";
import { type Prerequisite } from "./health.js";
import { Metrics } from "./metrics.js";
import { E2bConfig, RuntimeConfig } from "../stacks/config.js";

/** Who may register, how many projects a user may hold, and how fast both may be asked for. */
export type AccountLimits = Pick<RuntimeConfig, "registration" | "projectQuota" | "rateLimits">;

export interface ServerOptions {
  readonly prerequisites: readonly Prerequisite[];
  readonly auth?: Auth;
  /**
   * `agent-sandbox:runtime`'s registration, projectQuota and rateLimits, and the exec and files limits
   * of the sandbox API; their defaults when absent.
   */
  readonly limits?: AccountLimits &
    Partial<Pick<RuntimeConfig, "exec" | "files" | "http" | "trustedProxies" | "e2b">>;
  /** Operators' emails (`agent-sandbox:runtime.admins`): they get `/admin/*`; everyone else a 404 there. */
  readonly admins?: readonly string[];
  /** The background jobs an operator can run now. */
  readonly jobs?: JobScheduler;
  /** Verifies invite codes (required when `limits.registration` is `invite`). */
  readonly invites?: InviteCodes;
  /** The project API (needs `auth`). */
  /**
   * `sandboxes`: how exec, files, sync, ports and backup-status reach a project's sandbox; absent, each
   * project's backend (runtime/backends/): the engine for containers, the guest's sshd for microVMs (when
   * `defaults.microvm` says this host runs them), the cluster's exec for kubernetes projects.
   */
  readonly projects?: Omit<ProjectRoutesOptions, "sandboxes" | "backends" | "view"> &
    Omit<CreateRouteOptions, "quota" | "createRate" | "backends" | "view"> &
    Omit<ProjectViewOptions, "frontDoor"> & {
      readonly sandboxes?: SandboxRunners;
      /** Each project's backend (runtime/backends/); absent, the platform's, over `docker` and `kubernetes`. */
      readonly backends?: SandboxBackends;
      /** Kubernetes projects' runners through the cluster's exec (runtime/kubernetes/sandbox.ts). */
      readonly kubernetes?: KubernetesProjects;
    };
  /** pino options; `false` silences request logs (tests). */
  readonly logger?: boolean | { level: string; stream?: NodeJS.WritableStream };
  readonly metrics?: Metrics;
  /** Serve the web console (dist/web) at `/`. */
  readonly webConsole?: WebConsoleOptions;
  /** The in-process reconciler's running operations, for /metrics. */
  readonly reconcilerInFlight?: () => number;
  /**
   * The bearer token that opens `/metrics` and `/healthz`'s details to a scraper elsewhere
   * (`metricsToken()`); without one, only callers on this host and operators get them.
   */
  readonly metricsToken?: string;
  /**
   * The agent pane's turns (runtime/api/agent/), recorded beside the terminal's sessions in this directory
   * (`recordingsDir(dataDir)`); without it, the agent routes are not served.
   */
  readonly agent?: { readonly recordingsDir: string; readonly turnTimeoutSeconds?: number };
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
  const httpLimits = options.limits?.http ?? DEFAULT_HTTP_LIMITS;
  const { requestTimeout, ...nodeOptions } = nodeServerOptions(httpLimits);
  const app = Fastify({
    logger: options.logger ?? { level: "info" },
    // Slow clients: headers and the whole request each have a deadline (runtime.http).
    requestTimeout,
    http: nodeOptions,
    requestIdHeader: false,
    // One line per request (below), not Fastify's two: half the logging cost on the hot path.
    logController: new LogController({ disableRequestLogging: true }),
    genReqId: (request) => {
      const given = request.headers["x-request-id"];
      return typeof given === "string" && REQUEST_ID.test(given) ? given : randomUUID();
    },
    bodyLimit: BODY_LIMIT_BYTES,
    // Behind no proxy by default; request.ip is the peer (login throttling per address relies on it). Behind
    // a trusted one (runtime.trustedProxies: the GCP host's front door), the client its X-Forwarded-For names.
    trustProxy: options.limits?.trustedProxies?.length ? [...options.limits.trustedProxies] : false,
    // A path Fastify cannot route (bad percent-encoding, a segment past 100 characters) is invalid input,
    // answered as every other is; anything else it raises before routing is an internal error.
    // What Node refuses before Fastify has a request (a request line and headers past 16 KiB, a malformed
    // request, a client too slow): answered in the API's error shape, as every other refusal is.
    clientErrorHandler: (error, socket) => {
      if ((error as { code?: string }).code === "ECONNRESET" || socket.destroyed) return;
      const code = (error as { code?: string }).code;
      const [status, body] =
        code === "HPE_HEADER_OVERFLOW"
          ? [431, { error: "header_too_large", message: "request line and headers larger than 16 KiB" }]
          : code === "ERR_HTTP_REQUEST_TIMEOUT"
            ? [408, { error: "request_timeout", message: "the request was not received in time" }]
            : [400, { error: "bad_request", message: "malformed HTTP request" }];
      const text = JSON.stringify(body);
      if (socket.writable)
        socket.write(
          `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nConnection: close\r\nContent-Type: application/json\r\n` +
            `Content-Length: ${Buffer.byteLength(text)}\r\n\r\n${text}`,
        );
      socket.destroy(error);
    },
    frameworkErrors: (error, request, untyped) => {
      const reply = untyped as FastifyReply;
      if (error.code === "FST_ERR_BAD_URL" || error.code === "FST_ERR_MAX_PARAM_LENGTH")
        return reply.status(400).send({ error: "bad_request", message: `invalid path: ${error.message}` });
      request.log.error({ err: error }, "routing error");
      return reply.status(500).send({ error: "internal", message: "internal error", request_id: request.id });
    },
  });

  capConnectionsPerAddress(app.server, httpLimits, (address, open) =>
    app.log.warn({ address, open }, "connection refused: too many open connections from one address"),
  );

  const routeTable: string[] = [];
  app.decorate("routeTable", routeTable);
  app.addHook("onRoute", (route) => {
    for (const method of [route.method].flat())
      if (method !== "HEAD") routeTable.push(`${method} ${route.url}`);
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
  // §15.5.6); only an unknown path is a 404. The 405 is decided when the request arrives, before its body
  // is parsed and before any authentication: what a path serves is no secret, and a method with a body
  // (QUERY, or POST with malformed JSON) must not be answered as bad input to a route that does not exist.
  let patterns: { pattern: RegExp; method: string }[] | undefined;
  const methodsServedAt = (path: string) => {
    patterns ??= routeTable.map((route) => {
      const [method, url] = route.split(" ") as [string, string];
      return { pattern: routePattern(url), method };
    });
    const methods = new Set(patterns.filter((p) => p.pattern.test(path)).map((p) => p.method));
    if (methods.has("GET")) methods.add("HEAD");
    return methods;
  };
  app.addHook("onRequest", async (request, reply) => {
    if (!request.is404) return;
    const path = request.url.split("?")[0]!;
    const methods = methodsServedAt(path);
    // No route for the path (the not-found handler's 404), or a route that found nothing there.
    if (methods.size === 0 || methods.has(request.method)) return;
    const allow = [...methods].sort().join(", ");
    return reply
      .status(405)
      .header("allow", allow)
      .send({
        error: "method_not_allowed",
        message: `${request.method} is not served at ${path}; use ${allow}`,
      });
  });
  app.setNotFoundHandler(async (request, reply) => {
    const path = request.url.split("?")[0]!;
    return reply.status(404).send({ error: "not_found", message: `${request.method} ${path}: not found` });
  });

  // Each project's backend (runtime/backends/): the API's, over the engine and the cluster unless given.
  const backends =
    options.projects &&
    (options.projects.backends ??
      platformBackends({
        docker: () => options.projects!.docker,
        microvm: options.projects.defaults.microvm ?? (() => undefined),
        kubernetes: options.projects.kubernetes,
      }));
  const operators = new Set((options.admins ?? []).map((email) => email.toLowerCase()));
  const routes = new Routes(app, { auth: options.auth, operators });
  registerInternalsRoutes(routes, {
    prerequisites: options.prerequisites,
    auth: options.auth,
    operators,
    metricsToken: options.metricsToken,
    metrics,
    db: options.projects?.db,
    reconcilerInFlight: options.reconcilerInFlight,
    pool: options.projects?.pool,
    document: openApiDocument("0.1.0", backendKinds(backends)),
  });

  const limits = options.limits ?? RuntimeConfig.parse({});
  if (options.auth) {
    registerAuthRoutes(routes, options.auth, {
      mode: limits.registration,
      invites: options.invites,
      rate: limits.rateLimits.register,
    });
    registerApiKeyRoutes(routes, options.auth);
  }
  if (options.webConsole) registerWebConsole(app, options.webConsole);
  if (options.auth && options.projects)
    registerAdminRoutes(routes, {
      db: options.projects.db,
      jobs: options.jobs,
      pool: options.projects.pool,
    });
  if (options.auth && options.projects && backends) {
    const { db } = options.projects;
    const sandboxes = options.projects.sandboxes ?? backends.runners(db);
    const view = projectView({
      publicHost: options.projects.publicHost,
      terminal: options.projects.terminal,
      frontDoor: options.projects.defaults.host?.frontDoor,
    });
    registerProjectRoutes(routes, { ...options.projects, sandboxes, backends, view });
    const maker = registerCreateRoute(routes, {
      ...options.projects,
      backends,
      view,
      quota: limits.projectQuota,
      createRate: limits.rateLimits.createProject,
    });
    const forker = registerForkRoutes(routes, {
      ...options.projects,
      backends,
      view,
      quota: limits.projectQuota,
      createRate: limits.rateLimits.createProject,
    });
    // E2B's API (docs/e2b.md), in a scope of its own: its errors are answered in E2B's form.
    const auth = options.auth;
    void app.register(async (scope) =>
      registerE2bControlRoutes(routes.in(scope), {
        db,
        auth,
        defaults: options.projects!.defaults,
        maker,
        forker,
        limits: limits.e2b ?? E2bConfig.parse({}),
      }),
    );
    registerTerminalRoutes(routes, { db });
    registerSecretRoutes(routes, { db, secrets: options.projects.secrets });
    // Users' agent configs and logins, written into their projects' homes by a look every 2 s from the
    // server's start to its close (docs/api.md, "Agent configuration and logins").
    const delivery = new AgentDelivery({
      db,
      box: options.projects.secrets,
      sandboxes,
      log: (message, fields) => app.log.warn(fields, message),
    });
    registerAgentConfigRoutes(routes, { db, secrets: options.projects.secrets, delivery });
    app.addHook("onReady", async () => delivery.start());
    app.addHook("onClose", async () => delivery.stop());
    registerExecRoutes(routes, { db, sandboxes, limits: limits.exec });
    if (options.agent) {
      const box = options.projects.secrets;
      registerAgentRoutes(routes, {
        db,
        sandboxes,
        ...options.agent,
        secretValues: (projectId) => projectSecretValues(db, box, projectId),
      });
    }
    registerSyncRoutes(routes, { sandboxes });
    registerFileRoutes(routes, { sandboxes, db, limits: limits.files });
    // E2B's in-sandbox API (envd) under /e2b, for the SDKs: through the same runners as exec and files.
    const defaults = RuntimeConfig.parse({});
    registerEnvd(app, {
      db,
      auth: options.auth,
      sandboxes,
      limits: { exec: limits.exec ?? defaults.exec, files: limits.files ?? defaults.files },
      log: app.log,
    });
    // The MCP server's tools call the routes above, in-process, as the caller's API key.
    registerMcpRoutes(routes);
    registerFrontDoorRoutes(routes, {
      db,
      auth: options.auth,
      frontDoor: options.projects.defaults?.host?.frontDoor,
      devServers: backends.devServers(db),
    });
  }
  return app;
}
