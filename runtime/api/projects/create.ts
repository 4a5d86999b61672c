import { randomUUID } from "node:crypto";
import type { FastifyRequest } from "fastify";
import { generateSshKeyPair } from "../../../lib/ssh-keygen.js";
import { PROJECT, type RateLimit } from "../../../stacks/config.js";
import { backendKinds, type SandboxBackends } from "../../backends/registry.js";
import { HttpError } from "../../errors.js";
import type { SecretBox } from "../../secrets.js";
import type { Database } from "../../store/db.js";
import { createProgress, operationByIdempotencyKey, type OperationState } from "../../store/operations.js";
import { liveProjects, ownProject } from "../../store/project-view.js";
import { recordProject, sealedProjectKey } from "../../store/projects.js";
import type { WarmPool } from "../../tenants/pool.js";
import { requestCreateIn, type TenantDefaults } from "../../tenants/service.js";
import { RateLimiter } from "../rate-limit.js";
import { ProjectBody } from "../responses.js";
import { projectNotFound, route, type Routes } from "../route.js";
import {
  createProjectBody,
  CreateProjectBody,
  createWaitOf,
  IdempotencyKey,
  PreferHeader,
} from "./schemas.js";
import { tenantError, type ProjectView } from "./view.js";

export const createProjectRoute = route({
  method: "post",
  path: "/projects",
  summary:
    "Create a project (Idempotency-Key honoured); the answer waits for the sandbox up to agent-sandbox:runtime.createWaitSeconds (less with Prefer)",
  body: CreateProjectBody,
  headers: { "Idempotency-Key": IdempotencyKey, Prefer: PreferHeader },
  access: "user",
  responses: {
    201: {
      description:
        "created and running within the wait (seed 000's answer: `running`, `ssh` with the private key shown this once, `terminal_url`)",
      body: ProjectBody,
    },
    202: {
      description:
        "recorded, not running when the wait ended (or at once with Prefer: respond-async): follow GET /projects/{id}; with the SSH private key (shown this once)",
      body: ProjectBody,
    },
    200: { description: "idempotent repeat, with the same key", body: ProjectBody },
    403: "project quota reached (agent-sandbox:runtime.projectQuota)",
    409: "no subnet or SSH port left, or the Idempotency-Key was used for another request",
    429: "too many creations (agent-sandbox:runtime.rateLimits.createProject)",
  },
});

export interface CreateRouteOptions {
  readonly db: Database;
  readonly secrets: SecretBox;
  readonly defaults: TenantDefaults;
  /** Each project's backend: what a create of it adds to the spec, and whether it claims from the pool. */
  readonly backends: SandboxBackends;
  /** Live projects per user (`agent-sandbox:runtime.projectQuota`). */
  readonly quota: number;
  /** Creates per user (`agent-sandbox:runtime.rateLimits.createProject`). */
  readonly createRate: RateLimit;
  /**
   * How long a create waits for its sandbox to run before answering 202
   * (`agent-sandbox:runtime.createWaitSeconds`, which runtime/main.ts passes); absent or 0: at once.
   */
  readonly createWaitSeconds?: number;
  /** The warm pool a create claims from first (absent: every create is cold). */
  readonly pool?: WarmPool;
  readonly view: ProjectView;
}

/** Operation states after which nothing more happens to it. */
const FINISHED = new Set<OperationState>(["succeeded", "failed", "cancelled"]);
/** How often a waiting create looks at its operation (one indexed read). */
const CREATE_POLL_MS = 200;

/** POST /projects: a project made, from the warm pool or cold, and answered once it runs or the wait ends. */
export function registerCreateRoute(routes: Routes, options: CreateRouteOptions): void {
  const { db, secrets, view } = options;
  const quotaKey = `${PROJECT}:runtime.projectQuota`;
  const quotaExceeded = () =>
    new HttpError(
      403,
      "quota_exceeded",
      `project quota reached: at most ${options.quota} projects per user (${quotaKey} is ${options.quota}); delete one to create another`,
      { quota: options.quota, config_key: quotaKey },
    );
  /** The project this create (or the earlier one with the same key) made, as it is now: 404 once deleted. */
  const madeProject = async (userId: string, id: string) =>
    (await ownProject(db, userId, id)) ?? Promise.reject(projectNotFound());
  const createLimiter = new RateLimiter(
    db,
    "createProject",
    options.createRate,
    `${PROJECT}:runtime.rateLimits.createProject`,
    "project creations",
  );

  // A waiting create answers 202 at once when the server is closing, rather than hold its shutdown.
  let closing = false;
  routes.app.addHook("preClose", async () => {
    closing = true;
  });

  /**
   * Waits until the project's create operation has finished, `ms` have passed, the client has hung up or
   * the server is closing, whichever comes first.
   */
  const createSettled = async (request: FastifyRequest, projectId: string, ms: number): Promise<void> => {
    const deadline = Date.now() + ms;
    while (Date.now() < deadline && !closing && !request.raw.socket?.destroyed) {
      const row = await createProgress(db, projectId);
      if (!row || row.state === "deleting" || row.state === "deleted" || !row.op_state) return;
      if (FINISHED.has(row.op_state)) return;
      await new Promise((resolve) => setTimeout(resolve, Math.min(CREATE_POLL_MS, deadline - Date.now())));
    }
  };

  /** The create an Idempotency-Key already made, once settled as a first request would be (200). */
  const repeatedCreate = async (
    request: FastifyRequest,
    userId: string,
    scopedKey: string,
    waitMs: number,
  ): Promise<{ body: ProjectBody } | undefined> => {
    const made = await operationByIdempotencyKey(db, scopedKey);
    if (!made) return undefined;
    const projectId = (await madeProject(userId, made.project_id)).id;
    await createSettled(request, projectId, waitMs);
    const sealedKey = await sealedProjectKey(db, projectId);
    if (sealedKey === undefined) throw new Error(`project ${projectId} has no SSH private key recorded`);
    const existing = await madeProject(userId, projectId);
    return { body: view(existing, request, userId, secrets.open(sealedKey)) };
  };

  // Checks before work: the input, the quota and the rate are settled before ssh-keygen runs or anything
  // is allocated, and the quota once more under the allocation lock, where no other create can interleave.
  // Then the answer waits for the sandbox (runtime.createWaitSeconds, or less by `Prefer`): 201 with seed
  // 000's shape (`running`, `ssh`, `terminal_url`) when it runs by then, 202 to follow otherwise.
  routes.handle(
    createProjectRoute,
    async ({ request, reply, userId, body, headers: { "idempotency-key": key } }) => {
      const wait = createWaitOf(request.headers.prefer, options.createWaitSeconds ?? 0);
      if (wait.applied) void reply.header("preference-applied", wait.applied);
      const scopedKey = key ? `${userId}:create:${key}` : undefined;
      if (scopedKey) {
        const repeat = await repeatedCreate(request, userId, scopedKey, wait.ms);
        if (repeat) return reply.status(200).send(repeat.body);
      }
      if ((await liveProjects(db, userId)) >= options.quota) throw quotaExceeded();
      await createLimiter.take(userId);
      let projectId: string = randomUUID();
      const keys = await generateSshKeyPair(`agent@${projectId}`);
      const created = await db
        .transaction(async (tx) => {
          // A ready member of the warm pool (runtime/tenants/pool.ts), made the caller's in this transaction;
          // without one, a cold create, which takes the allocation lock until commit: one at a time from here.
          const backend = body.backend ?? options.defaults.backend;
          // Before anything is allocated: a backend this platform cannot run now is refused naming why.
          const backendFields = options.backends.admit(backend, options.defaults);
          const claimed = await (options.backends.traits(backend).warmPool ? options.pool : undefined)?.claim(
            tx,
            {
              ownerId: userId,
              sshPublicKey: keys.publicKey,
              allowlist: body.allowlist,
              ports: body.ports,
              idempotencyKey: scopedKey,
            },
          );
          if (claimed) projectId = claimed;
          else
            await requestCreateIn(tx, options.defaults, {
              projectId,
              ownerId: userId,
              allowlist: body.allowlist,
              ports: body.ports,
              sshPublicKey: keys.publicKey,
              idempotencyKey: scopedKey,
              backendFields,
            });
          await recordProject(tx, {
            id: projectId,
            userId,
            name: body.name,
            sealedPrivateKey: secrets.seal(keys.privateKey),
            idleShutdown: body.idle_shutdown ?? true,
          });
          if ((await liveProjects(tx, userId)) > options.quota) throw quotaExceeded();
          return true as const;
        })
        .catch(async (error: unknown) => {
          // The same key sent twice at once: both looked before either had committed, and the other one
          // recorded its create first (this one then fails on the key, or on the lock): this is its repeat.
          const repeat = scopedKey ? await repeatedCreate(request, userId, scopedKey, wait.ms) : undefined;
          return repeat ?? tenantError(error);
        });
      if (created !== true) return reply.status(200).send(created.body);
      await createSettled(request, projectId, wait.ms);
      const project = view(await madeProject(userId, projectId), request, userId, keys.privateKey);
      return reply.status(project.status === "running" ? 201 : 202).send(project);
    },
    { body: createProjectBody(backendKinds(options.backends)) },
  );
}
