import type { FastifyInstance, FastifyRequest } from "fastify";
import type { E2bConfig } from "../../../stacks/config.js";
import { HttpError } from "../../errors.js";
import type { Database } from "../../store/db.js";
import {
  listE2bSandboxes,
  ownE2bSandbox,
  recordE2bSandbox,
  setE2bTimeout,
  type E2bSandboxView,
} from "../../store/e2b-sandboxes.js";
import { isDatabaseUnavailable } from "../../store/db.js";
import { ownProject } from "../../store/project-view.js";
import { requestOperation, type TenantDefaults } from "../../tenants/service.js";
import { E2B_PAUSE, operationSettled, wakeProject } from "../../tenants/wake.js";
import type { Auth } from "../auth.js";
import type { ProjectMaker } from "../projects/create.js";
import type { ProjectForker } from "../projects/fork.js";
import { tenantError } from "../projects/view.js";
import type { Routes } from "../route.js";
import { clientGone, wakeAnswer } from "../wake.js";
import { ENVD_VERSION, envdAccessToken } from "./access.js";
import {
  connectBody,
  connectSandboxRoute,
  createSandboxRoute,
  encodeCursor,
  forkBody,
  forkSandboxRoute,
  getSandboxRoute,
  killSandboxRoute,
  listSandboxesRoute,
  newSandboxBody,
  pauseSandboxRoute,
  setTimeoutRoute,
  timeoutBody,
} from "./schemas.js";

export interface E2bControlOptions {
  readonly db: Database;
  readonly auth: Auth;
  readonly defaults: TenantDefaults;
  /** POST /projects's way of making a project: each E2B sandbox is one. */
  readonly maker: ProjectMaker;
  /** POST /projects/{id}/fork's way of forking one: a fork is an E2B sandbox of its own. */
  readonly forker: ProjectForker;
  /** agent-sandbox:runtime.e2b. */
  readonly limits: E2bConfig;
}

/** E2B's `clientID` (deprecated there): one value, since this platform has no clients of that kind. */
const CLIENT_ID = "agent-sandbox";
const MIB = 1024 * 1024;

/**
 * The templates a create may name, each with the image it runs: E2B's default (`base`) and the platform's
 * image by its name, with and without its `:latest` tag.
 */
export function e2bTemplates(defaults: Pick<TenantDefaults, "image">): ReadonlyMap<string, string> {
  const image = defaults.image;
  return new Map([
    ["base", image],
    [image, image],
    [image.replace(/:latest$/, ""), image],
  ]);
}

/** An E2B error answer: `{code, message}` (E2B's SDKs read `message`, and `code` for a 404). */
function e2bErrorHandler(scope: FastifyInstance): void {
  scope.setErrorHandler((error, request, reply) => {
    let status = 500;
    let message = `internal error (request id ${request.id})`;
    if (error instanceof HttpError) {
      [status, message] = [error.status, error.message];
      const retry = (error.details as { retry_after?: number } | undefined)?.retry_after;
      if (retry !== undefined) void reply.header("retry-after", String(retry));
    } else if (isDatabaseUnavailable(error)) {
      [status, message] = [503, "the database is unavailable; try again shortly"];
    } else if ((error as { statusCode?: number }).statusCode) {
      // Fastify's own refusals (a malformed or too large body): the client's to fix, in its words.
      status = (error as { statusCode: number }).statusCode;
      message = (error as Error).message;
    }
    if (status >= 500 && status !== 503 && status !== 504) request.log.error({ err: error }, "E2B API error");
    return reply.status(status).send({ code: status, message });
  });
}

/** The SDK's NotFound: another user's sandbox, a killed one and none at all are the same answer. */
const sandboxNotFound = (id: string) => new HttpError(404, "not_found", `sandbox ${id} not found`);

/**
 * The E2B control plane under /e2b on the API's port: create, list, get, kill, set the timeout and connect,
 * each E2B sandbox an ordinary project of the caller's (its own tenant stack). Registered in a scope of its
 * own, where every error is answered in E2B's form.
 */
export function registerE2bControlRoutes(routes: Routes, options: E2bControlOptions): void {
  const { db, auth, limits } = options;
  e2bErrorHandler(routes.app);

  /** The owner's sandbox, or the SDK's NotFound. */
  const ownSandbox = async (userId: string, id: string) =>
    (await ownE2bSandbox(db, userId, id)) ?? Promise.reject(sandboxNotFound(id));

  /** What create and connect answer: E2B's `Sandbox`. */
  const sandboxBody = (sandbox: E2bSandboxView) => ({
    sandboxID: sandbox.project_id,
    templateID: sandbox.template,
    clientID: CLIENT_ID,
    envdVersion: ENVD_VERSION,
    envdAccessToken: envdAccessToken(auth, sandbox.project_id),
    trafficAccessToken: null,
    domain: null,
  });

  /** What get and list answer: E2B's `SandboxDetail` / `ListedSandbox`. */
  const detailBody = (sandbox: E2bSandboxView) => ({
    templateID: sandbox.template,
    sandboxID: sandbox.project_id,
    clientID: CLIENT_ID,
    startedAt: sandbox.created_at.toISOString(),
    endAt: sandbox.timeout_at.toISOString(),
    envdVersion: ENVD_VERSION,
    cpuCount: Math.ceil(sandbox.cpus ?? 1),
    memoryMB: sandbox.memory_mib ?? 0,
    diskSizeMB: Math.floor((sandbox.home_bytes ?? 0) / MIB),
    metadata: sandbox.metadata,
    state: sandbox.running ? "running" : "paused",
    lifecycle: { onTimeout: sandbox.on_timeout, autoResume: sandbox.auto_resume },
    volumeMounts: [],
  });

  routes.handle(
    createSandboxRoute,
    async ({ request, reply, userId, body }) => {
      const template = body.templateID;
      const templates = e2bTemplates(options.defaults);
      if (!templates.has(template))
        throw new HttpError(
          400,
          "unknown_template",
          `template ${JSON.stringify(template)} is not on this platform; its templates are ${[...templates.keys()].join(", ")}`,
        );
      const made = await options.maker
        .make({
          userId,
          name: `e2b ${template}`.slice(0, 100),
          // The sandbox's timeout governs its life, not the idle shutdown.
          idle: "none",
          alongside: (tx, projectId) =>
            recordE2bSandbox(tx, {
              projectId,
              template,
              metadata: body.metadata ?? {},
              envVars: body.envVars ?? {},
              timeoutSeconds: body.timeout ?? limits.defaultTimeoutSeconds,
              onTimeout: body.autoPause ? "pause" : "kill",
              autoResume: body.autoResume?.enabled === true,
            }),
        })
        .catch(tenantError);
      const started = await startedSandbox(request, userId, made.projectId);
      if (started instanceof HttpError) throw started;
      return reply.status(201).send(sandboxBody(started));
    },
    { body: newSandboxBody(limits.maxTimeoutSeconds) },
  );

  /**
   * The sandbox once its create has settled (up to runtime.e2b.createWaitSeconds), or the error to answer:
   * one that is not running is deleted, since the SDK never learns its id and nothing is left for it.
   */
  const startedSandbox = async (
    request: FastifyRequest,
    userId: string,
    id: string,
  ): Promise<E2bSandboxView | HttpError> => {
    await options.maker.settled(request, id, limits.createWaitSeconds * 1000);
    const sandbox = await ownE2bSandbox(db, userId, id);
    if (sandbox?.state === "running") return sandbox;
    const project = await ownProject(db, userId, id);
    await requestOperation(db, id, "delete").catch((error: Error) =>
      request.log.warn({ err: error, project: id }, "E2B sandbox that did not start not deleted"),
    );
    if (project?.state === "error" || project?.op_state === "failed")
      return new HttpError(
        500,
        "create_failed",
        `sandbox ${id} failed to start: ${project.op_error ?? project.last_error ?? "unknown error"}; it is being deleted`,
      );
    return new HttpError(
      504,
      "create_timeout",
      `sandbox ${id} was not running within ${limits.createWaitSeconds} s (agent-sandbox:runtime.e2b.createWaitSeconds); it is being deleted`,
    );
  };

  routes.handle(listSandboxesRoute, async ({ reply, userId, query }) => {
    const rows = await listE2bSandboxes(db, userId, {
      metadata: query.metadata ?? {},
      states: query.state ?? ["running", "paused"],
      after: query.nextToken,
      limit: query.limit,
    });
    const page = rows.slice(0, query.limit);
    const last = page.at(-1);
    if (rows.length > query.limit && last)
      void reply.header(
        "x-next-token",
        encodeCursor({ createdAt: last.created_at.toISOString(), id: last.project_id }),
      );
    return page.map(detailBody);
  });

  routes.handle(getSandboxRoute, async ({ userId, params: { sandboxID } }) => {
    const sandbox = await ownSandbox(userId, sandboxID);
    return {
      ...detailBody(sandbox),
      envdAccessToken: envdAccessToken(auth, sandbox.project_id),
      domain: null,
    };
  });

  routes.handle(killSandboxRoute, async ({ reply, userId, params: { sandboxID } }) => {
    await ownSandbox(userId, sandboxID);
    await requestOperation(db, sandboxID, "delete").catch(tenantError);
    return reply.status(204).send();
  });

  routes.handle(
    setTimeoutRoute,
    async ({ reply, userId, params: { sandboxID }, body }) => {
      await ownSandbox(userId, sandboxID);
      await setE2bTimeout(db, userId, sandboxID, body.timeout);
      return reply.status(204).send();
    },
    { body: timeoutBody(limits.maxTimeoutSeconds) },
  );

  /** How long a pause's stop or a resume's start holds its request. */
  const waitMs = limits.createWaitSeconds * 1000;
  const busy = (id: string, state: string) =>
    new HttpError(
      409,
      "conflict",
      `sandbox ${id} is not running and another operation of its project is under way (${state}); connect again once it has ended`,
    );

  // Connect resumes a paused sandbox (whoever stopped it): its start, shared by concurrent connects, holds
  // the request until it runs. The timeout is set from the moment it runs.
  routes.handle(
    connectSandboxRoute,
    async ({ request, reply, userId, params: { sandboxID }, body }) => {
      let sandbox = await ownSandbox(userId, sandboxID);
      let resumed = false;
      if (!sandbox.running) {
        resumed = await wakeProject(db, sandboxID, {
          timeoutMs: waitMs,
          anyStop: true,
          gone: clientGone(request),
        }).catch((error: unknown) => {
          throw wakeAnswer(error);
        });
        sandbox = await ownSandbox(userId, sandboxID);
        if (!sandbox.running) throw busy(sandboxID, sandbox.state);
      }
      const timeout = body?.timeout ?? limits.defaultTimeoutSeconds;
      const extended = await setE2bTimeout(db, userId, sandboxID, timeout, true);
      return reply.status(resumed ? 201 : 200).send(sandboxBody(extended ?? sandbox));
    },
    { body: connectBody(limits.maxTimeoutSeconds).optional() },
  );

  // Pause stops the sandbox with its home kept (a stop of the platform's own, which a later connect, or a
  // request that needs it, undoes). Its memory is not kept: its processes end, whatever `memory` asks.
  routes.handle(pauseSandboxRoute, async ({ request, reply, userId, params: { sandboxID } }) => {
    const sandbox = await ownSandbox(userId, sandboxID);
    if (!sandbox.running) throw new HttpError(409, "conflict", `sandbox ${sandboxID} is already paused`);
    const { operation } = await requestOperation(
      db,
      sandboxID,
      "stop",
      `${E2B_PAUSE}${sandboxID}-${Date.now()}`,
    ).catch(tenantError);
    await operationSettled(db, operation, {
      timeoutMs: waitMs,
      gone: clientGone(request),
    }).catch((error: unknown) => {
      throw wakeAnswer(error);
    });
    return reply.status(204).send();
  });

  // Fork: new sandboxes from one point of this one's home (POST /projects/{id}/fork's copy); each answers for
  // itself once its create has settled, as E2B's does (a sandbox, or the error that kept it from starting).
  routes.handle(
    forkSandboxRoute,
    async ({ request, reply, userId, params: { sandboxID }, body }) => {
      const sandbox = await ownSandbox(userId, sandboxID);
      const source = await ownProject(db, userId, sandboxID);
      if (!source) throw sandboxNotFound(sandboxID);
      const count = body?.count ?? 1;
      const { forks } = await options.forker
        .fork({
          userId,
          source,
          count,
          names: Array.from({ length: count }, (_, i) =>
            `e2b ${sandbox.template} fork ${i + 1}`.slice(0, 100),
          ),
          idle: "none",
          alongside: (tx, projectId) =>
            recordE2bSandbox(tx, {
              projectId,
              template: sandbox.template,
              metadata: sandbox.metadata,
              envVars: sandbox.env_vars,
              timeoutSeconds: body?.timeout ?? limits.defaultTimeoutSeconds,
              onTimeout: sandbox.on_timeout,
              autoResume: sandbox.auto_resume,
            }),
        })
        .catch(tenantError);
      const results = await Promise.all(
        forks.map(async ({ id }) => {
          const started = await startedSandbox(request, userId, id);
          return started instanceof HttpError
            ? { error: { code: started.status, message: started.message } }
            : { sandbox: sandboxBody(started) };
        }),
      );
      return reply.status(201).send(results);
    },
    { body: forkBody(limits.maxTimeoutSeconds).optional() },
  );
}
