import { randomUUID } from "node:crypto";
import type { FastifyRequest } from "fastify";
import { generateSshKeyPair } from "../../../lib/ssh-keygen.js";
import { PROJECT, type RateLimit } from "../../../stacks/config.js";
import { backendKinds, type SandboxBackends } from "../../backends/registry.js";
import { HttpError } from "../../errors.js";
import type { SecretBox } from "../../secrets.js";
import type { Database, Queryable } from "../../store/db.js";
import {
  createProgress,
  operationFinishedOrAfter,
  operationByIdempotencyKey,
  operationsQueued,
  type OperationState,
} from "../../store/operations.js";
import { liveProjects, ownProject } from "../../store/project-view.js";
import { recordProject, sealedProjectKey, type IdleAction } from "../../store/projects.js";
import type { WarmPool } from "../../tenants/pool.js";
import { requestCreateIn, type Isolation, type TenantDefaults } from "../../tenants/service.js";
import type { TenantSpecInput } from "../../../components/tenant/spec.js";
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
import { bandwidthSpec, idleActionOf } from "./settings.js";
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
    409: "the Idempotency-Key was used for another request",
    429: "too many creations (agent-sandbox:runtime.rateLimits.createProject)",
    503: "the host has no subnet or SSH port left (`details.capacity` names the config key; Retry-After)",
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
/** How often a waiting create looks at its operation (one indexed read) when nothing here wakes it. */
const CREATE_POLL_MS = 200;

/** What one create asks for, whichever API it came through. */
export interface NewProject {
  readonly userId: string;
  readonly name: string;
  readonly allowlist?: string[];
  readonly ports?: TenantSpecInput["ports"];
  /** The platform's `tenants.backend` when absent. */
  readonly backend?: string;
  /** A container's isolation (`runc`, `gvisor`); the platform's `tenants.isolation` when absent. */
  readonly isolation?: Isolation;
  /** A microVM whose guest runs VMs of its own (refused naming why where the host offers none). */
  readonly nestedVirtualization?: boolean;
  /** Bandwidth caps (the spec's names); a backend that shapes none refuses them. */
  readonly bandwidth?: TenantSpecInput["bandwidth"];
  /** What the idle handling does to it (`pause`, `stop`, `none`). */
  readonly idle: IdleAction;
  /** The caller's Idempotency-Key, scoped to the caller. */
  readonly idempotencyKey?: string;
  /** Recorded in the create's own transaction, after the project: when it fails, nothing is made. */
  readonly alongside?: (tx: Queryable, projectId: string) => Promise<void>;
}

/** Makes projects as POST /projects does: the one path of every API that makes one. */
export interface ProjectMaker {
  /**
   * Checks the quota and the rate, makes the SSH key pair, and records the project (from the warm pool or
   * cold) in one transaction; resolves with its id and its private key.
   */
  make(project: NewProject): Promise<{ projectId: string; privateKey: string }>;
  /**
   * Waits until the project's create operation has finished, `ms` have passed, the client has hung up or
   * the server is closing, whichever comes first.
   */
  settled(request: FastifyRequest, projectId: string, ms: number): Promise<void>;
}

/**
 * The rate of project creations: one budget for creates and forks alike (a database bucket by name, so every
 * limiter made here shares it, in every process).
 */
export function createProjectLimiter(options: Pick<CreateRouteOptions, "db" | "createRate">): RateLimiter {
  return new RateLimiter(
    options.db,
    "createProject",
    options.createRate,
    `${PROJECT}:runtime.rateLimits.createProject`,
    "project creations",
  );
}

/** The one way projects are made, for the routes of `routes`' server. */
export function projectMaker(routes: Routes, options: CreateRouteOptions): ProjectMaker {
  const { db, secrets } = options;
  const quotaKey = `${PROJECT}:runtime.projectQuota`;
  const quotaExceeded = () =>
    new HttpError(
      403,
      "quota_exceeded",
      `project quota reached: at most ${options.quota} projects per user (${quotaKey} is ${options.quota}); delete one to create another`,
      { quota: options.quota, config_key: quotaKey },
    );
  const createLimiter = createProjectLimiter(options);

  // A waiting create answers at once when the server is closing, rather than hold its shutdown.
  let closing = false;
  routes.app.addHook("preClose", async () => {
    closing = true;
  });

  // Checks before work: the quota and the rate are settled before ssh-keygen runs or anything is
  // allocated, and the quota once more under the allocation lock, where no other create can interleave.
  return {
    async make(project) {
      const { userId } = project;
      if ((await liveProjects(db, userId)) >= options.quota) throw quotaExceeded();
      await createLimiter.take(userId);
      let projectId: string = randomUUID();
      const keys = await generateSshKeyPair(`agent@${projectId}`);
      await db.transaction(async (tx) => {
        // A ready member of the warm pool (runtime/tenants/pool.ts), made the caller's in this transaction;
        // without one, a cold create, which takes the allocation lock until commit: one at a time from here.
        const backend = project.backend ?? options.defaults.backend;
        // Before anything is allocated: a backend this platform cannot run now is refused naming why.
        const backendFields = options.backends.admit(backend, options.defaults, {
          ...(project.isolation ? { isolation: project.isolation } : {}),
          ...(project.nestedVirtualization ? { nestedVirtualization: true } : {}),
          ...(project.bandwidth ? { bandwidth: true } : {}),
        });
        // The pool's members are made with the backend's defaults (a runc container): another isolation is a
        // cold create.
        const pooled =
          options.backends.traits(backend).warmPool &&
          backendFields.isolation === undefined &&
          !project.nestedVirtualization &&
          !project.bandwidth;
        const claimed = await (pooled ? options.pool : undefined)?.claim(tx, {
          ownerId: userId,
          sshPublicKey: keys.publicKey,
          allowlist: project.allowlist,
          ports: project.ports,
          idempotencyKey: project.idempotencyKey,
        });
        if (claimed) projectId = claimed;
        else
          await requestCreateIn(tx, options.defaults, {
            projectId,
            ownerId: userId,
            allowlist: project.allowlist,
            ports: project.ports,
            bandwidth: project.bandwidth,
            sshPublicKey: keys.publicKey,
            idempotencyKey: project.idempotencyKey,
            backendFields,
          });
        await recordProject(tx, {
          id: projectId,
          userId,
          name: project.name,
          sealedPrivateKey: secrets.seal(keys.privateKey),
          idle: project.idle,
        });
        await project.alongside?.(tx, projectId);
        if ((await liveProjects(tx, userId)) > options.quota) throw quotaExceeded();
      });
      // Committed: this process's reconciler claims the create now, not at its next poll.
      operationsQueued();
      return { projectId, privateKey: keys.privateKey };
    },

    async settled(request, projectId, ms) {
      const deadline = Date.now() + ms;
      while (Date.now() < deadline && !closing && !request.raw.socket?.destroyed) {
        const row = await createProgress(db, projectId);
        if (!row || row.state === "deleting" || row.state === "deleted" || !row.op_state) return;
        if (FINISHED.has(row.op_state)) return;
        await operationFinishedOrAfter(projectId, Math.min(CREATE_POLL_MS, deadline - Date.now()));
      }
    },
  };
}

/**
 * POST /projects: a project made, from the warm pool or cold, and answered once it runs or the wait ends.
 * Returns the maker, for the other APIs that make projects on the same server.
 */
export function registerCreateRoute(routes: Routes, options: CreateRouteOptions): ProjectMaker {
  const { db, secrets, view } = options;
  const maker = projectMaker(routes, options);
  /** The project this create (or the earlier one with the same key) made, as it is now: 404 once deleted. */
  const madeProject = async (userId: string, id: string) =>
    (await ownProject(db, userId, id)) ?? Promise.reject(projectNotFound());

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
    await maker.settled(request, projectId, waitMs);
    const sealedKey = await sealedProjectKey(db, projectId);
    if (sealedKey === undefined) throw new Error(`project ${projectId} has no SSH private key recorded`);
    const existing = await madeProject(userId, projectId);
    return { body: view(existing, request, userId, secrets.open(sealedKey)) };
  };

  // The answer waits for the sandbox (runtime.createWaitSeconds, or less by `Prefer`): 201 with seed 000's
  // shape (`running`, `ssh`, `terminal_url`) when it runs by then, 202 to follow otherwise.
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
      const created = await maker
        .make({
          userId,
          name: body.name,
          allowlist: body.allowlist,
          ports: body.ports,
          backend: body.backend,
          isolation: body.isolation,
          nestedVirtualization: body.nested_virtualization,
          ...(body.bandwidth ? { bandwidth: bandwidthSpec(body.bandwidth) } : {}),
          idle: idleActionOf(body) ?? "pause",
          idempotencyKey: scopedKey,
        })
        .catch(async (error: unknown) => {
          // The same key sent twice at once: both looked before either had committed, and the other one
          // recorded its create first (this one then fails on the key, or on the lock): this is its repeat.
          const repeat = scopedKey ? await repeatedCreate(request, userId, scopedKey, wait.ms) : undefined;
          return repeat ?? tenantError(error);
        });
      if ("body" in created) return reply.status(200).send(created.body);
      await maker.settled(request, created.projectId, wait.ms);
      const project = view(await madeProject(userId, created.projectId), request, userId, created.privateKey);
      return reply.status(project.status === "running" ? 201 : 202).send(project);
    },
    { body: createProjectBody(backendKinds(options.backends)) },
  );
  return maker;
}
