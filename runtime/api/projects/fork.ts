import { randomUUID } from "node:crypto";
import type { FastifyRequest } from "fastify";
import { z } from "zod";
import { generateSshKeyPair } from "../../../lib/ssh-keygen.js";
import { PROJECT } from "../../../stacks/config.js";
import { HttpError } from "../../errors.js";
import { listForks, recordFork } from "../../store/forks.js";
import { operationsQueued } from "../../store/operations.js";
import { liveProjects, ownProject, type ProjectRow } from "../../store/project-view.js";
import { recordProject, type IdleAction } from "../../store/projects.js";
import { getTenant } from "../../store/tenants.js";
import type { TenantSpec } from "../../../components/tenant/spec.js";
import type { ImageCopies } from "../../../lib/host/filesystem-copy.js";
import type { Queryable } from "../../store/db.js";
import { MAX_FORKS, stageForkHomes, type ForkableHome, type StagedHomes } from "../../tenants/fork.js";
import { requestCreateIn, type BackendFields } from "../../tenants/service.js";
import { notFound } from "../answers.js";
import { ProjectBody, PROJECT_STATUSES } from "../responses.js";
import { projectNotFound, route, type Routes } from "../route.js";
import { displayName } from "../validation.js";
import { createProjectLimiter, type CreateRouteOptions } from "./create.js";
import { ProjectParams, projectStatus } from "./schemas.js";
import { tenantError } from "./view.js";

// POST /projects/{id}/fork and GET /projects/{id}/forks: N new projects from one point of a project's home
// (runtime/tenants/fork.ts), and the tree of them.

const Timestamp = z.iso.datetime();

export const ForkProjectBody = z
  .object({
    /** How many forks (1-10); the number of `names` when absent, else 1. */
    count: z.number().int().min(1).max(MAX_FORKS).optional(),
    /** Each fork's name, one per fork; `<source>-fork-<n>` when absent. */
    names: z.array(displayName(100)).min(1).max(MAX_FORKS).optional(),
  })
  .strict()
  .superRefine((body, ctx) => {
    if (body.names && body.count !== undefined && body.names.length !== body.count)
      ctx.addIssue({
        code: "custom",
        path: ["names"],
        message: `must hold one name per fork: count is ${body.count}, names has ${body.names.length}`,
      });
  })
  // The refinement, as the OpenAPI document states it: with both, as many names as the count says.
  .meta({
    anyOf: [
      { not: { required: ["count", "names"] } },
      ...Array.from({ length: MAX_FORKS }, (_, index) => ({
        properties: { count: { const: index + 1 }, names: { minItems: index + 1, maxItems: index + 1 } },
      })),
    ],
  });

export const ForkAnswerBody = z
  .object({
    /** The source and the one point every fork's home was copied at. */
    source: z.object({ project_id: z.uuid(), forked_at: Timestamp }).strict(),
    /** The new projects, each with its create operation and its SSH private key (shown this once). */
    projects: z.array(ProjectBody),
    /**
     * The copy: how long the source's writes were held (`fsfreeze`), how long all copies took, and the disk
     * space they hold (allocated blocks; the host's copy-on-write, where it has one, shares them).
     */
    copy: z
      .object({
        frozen_ms: z.number().int(),
        total_ms: z.number().int(),
        bytes_allocated: z.number().int(),
      })
      .strict(),
  })
  .strict();

export const ForkListBody = z
  .object({
    project_id: z.uuid(),
    /** The project's live forks and theirs, by depth (1: its own), oldest first. */
    forks: z.array(
      z
        .object({
          project_id: z.uuid(),
          name: z.string(),
          status: z.enum(PROJECT_STATUSES),
          forked_from: z.uuid(),
          forked_at: Timestamp,
          depth: z.number().int(),
        })
        .strict(),
    ),
  })
  .strict();

export const forkProjectRoute = route({
  method: "post",
  path: "/projects/{id}/fork",
  summary:
    "Fork a running or stopped project: N new projects (1-10) of the caller's, each with a copy of its home taken at one point, and its own network, keys and secrets",
  params: ProjectParams,
  body: ForkProjectBody.optional(),
  bodyOptional: true,
  access: "owner",
  responses: {
    202: {
      description: "copied and recorded: each fork's create is queued (follow them)",
      body: ForkAnswerBody,
    },
    403: "the forks would pass the project quota (agent-sandbox:runtime.projectQuota); nothing is made",
    404: notFound,
    409: "the project is not running or stopped (`details.status`), or its home cannot be copied (`details.reason`)",
    429: "too many creations (agent-sandbox:runtime.rateLimits.createProject; a fork takes one)",
    503: "the host has no subnet or SSH port left for every fork (`details.capacity`); nothing is made",
  },
});

export const listForksRoute = route({
  method: "get",
  path: "/projects/{id}/forks",
  summary: "The project's forks and theirs: each one's source and the point it was copied at",
  params: ProjectParams,
  access: "owner",
  responses: { 200: { description: "the fork tree", body: ForkListBody }, 404: notFound },
});

export const forkRoutes = [forkProjectRoute, listForksRoute] as const;

/** Statuses a source may be forked in: its home is there and not being replaced or removed. */
const FORKABLE = new Set(["running", "stopped"]);

/** Each fork's name: the ones asked for, else `<source>-fork-<n>` (within the 100 characters a name has). */
export function forkNames(sourceName: string, count: number, names?: readonly string[]): string[] {
  if (names) return [...names];
  return Array.from({ length: count }, (_, index) => {
    const suffix = `-fork-${index + 1}`;
    return `${[...sourceName].slice(0, 100 - suffix.length).join("")}${suffix}`;
  });
}

/**
 * The source's status as a fork sees it: its project's, except that one whose delete is queued is deleting
 * already (its state says so only once the reconciler has begun the delete).
 */
function sourceStatus(row: ProjectRow): string {
  const deleteAhead = row.op_kind === "delete" && (row.op_state === "pending" || row.op_state === "running");
  return deleteAhead ? "deleting" : projectStatus(row.state, row);
}

/** A 409 naming why the source cannot be forked now. */
function notForkable(row: Pick<ProjectRow, "id">, status: string): HttpError {
  return new HttpError(
    409,
    "not_forkable",
    `project ${row.id} is ${status}: only a running or stopped project can be forked`,
    { status },
  );
}

/** What one fork asks for, whichever API it came through. */
export interface ForkRequest {
  readonly userId: string;
  /** The caller's project to fork (`owner` access already checked). */
  readonly source: ProjectRow;
  readonly count: number;
  readonly names?: readonly string[];
  /** What the idle handling does to the forks: the source's when absent. */
  readonly idle?: IdleAction;
  /** Recorded in the forks' own transaction, after each project: when it fails, nothing is made. */
  readonly alongside?: (tx: Queryable, projectId: string) => Promise<void>;
}

/** Forks made: each new project's id, name and SSH private key, and the copy they were made from. */
export interface Forked {
  readonly forks: readonly { readonly id: string; readonly name: string; readonly privateKey: string }[];
  readonly copies: ImageCopies;
}

/** Makes forks as POST /projects/{id}/fork does: the one path of every API that forks a project. */
export interface ProjectForker {
  /**
   * Checks the source's status and home, the quota (all forks or none) and the rate, makes each fork's SSH
   * key pair, copies the home at one point, and records every fork in one transaction.
   */
  fork(request: ForkRequest): Promise<Forked>;
}

export function projectForker(options: CreateRouteOptions): ProjectForker {
  const { db, secrets } = options;
  const quotaKey = `${PROJECT}:runtime.projectQuota`;
  const quotaExceeded = (live: number, count: number) =>
    new HttpError(
      403,
      "quota_exceeded",
      `project quota reached: ${count} fork${count === 1 ? "" : "s"} would make ${live + count} projects, and at most ${options.quota} are allowed per user (${quotaKey} is ${options.quota}); nothing was made`,
      { quota: options.quota, config_key: quotaKey, live, count },
    );
  // Forks and creates share one budget.
  const createLimiter = createProjectLimiter(options);

  /** The forks recorded in one transaction, all or none: quota and capacity checked under its locks. */
  const recordForks = async (
    request: ForkRequest,
    spec: TenantSpec,
    forks: readonly { id: string; name: string; publicKey: string; privateKey: string }[],
    staged: StagedHomes,
    backendFields: BackendFields,
  ) => {
    const { userId, source } = request;
    await db.transaction(async (tx) => {
      for (const fork of forks) {
        await requestCreateIn(tx, options.defaults, {
          projectId: fork.id,
          ownerId: userId,
          allowlist: spec.allowlist,
          limits: spec.limits,
          ports: spec.ports,
          sshPublicKey: fork.publicKey,
          backendFields,
          forkFields: staged.fieldsOf(fork.id),
        });
        await recordProject(tx, {
          id: fork.id,
          userId,
          name: fork.name,
          sealedPrivateKey: secrets.seal(fork.privateKey),
          idle: request.idle ?? source.idle,
        });
        await recordFork(tx, fork.id, source.id, staged.copies.at);
        await request.alongside?.(tx, fork.id);
      }
      // Under the owner's lock (requestCreateIn took it): no other create interleaves.
      const live = await liveProjects(tx, userId);
      if (live > options.quota) throw quotaExceeded(live - forks.length, forks.length);
      // The source went on while its home was copied: a source deleted meanwhile makes no forks.
      const now = await ownProject(tx, userId, source.id);
      const status = now ? sourceStatus(now) : "deleting";
      if (!FORKABLE.has(status)) throw notForkable(source, status);
    });
  };

  return {
    async fork(request) {
      const { userId, source, count } = request;
      const status = sourceStatus(source);
      if (!FORKABLE.has(status)) throw notForkable(source, status);
      const tenant = await getTenant(db, source.id);
      if (!tenant) throw projectNotFound();
      const backend = options.backends.of(tenant.spec);
      const home: ForkableHome = backend.forkableHome
        ? await backend.forkableHome(tenant.spec)
        : {
            ok: false,
            reason: `project ${source.id} runs on ${backend.kind}: its home is not an image of this host, and cannot be forked here`,
          };
      if (!home.ok)
        throw new HttpError(409, "not_forkable", home.reason, {
          status,
          reason: home.reason,
          backend: source.backend,
        });
      // Checks before work: the backend's admission (the source's backend and isolation: a fork's home is a
      // copy in that backend's own form; a container's absent isolation is runc, whatever the platform's
      // default), the quota and the rate, before any copy or key is made.
      const backendFields = (() => {
        try {
          return options.backends.admit(tenant.spec.backend, options.defaults, {
            ...(backend.traits.isolation ? { isolation: tenant.spec.isolation ?? "runc" } : {}),
            // A nested source's forks are nested, where this host still offers it (else refused naming why).
            ...(tenant.spec.microvm?.nested ? { nestedVirtualization: true } : {}),
          });
        } catch (error) {
          return tenantError(error);
        }
      })();
      const live = await liveProjects(db, userId);
      if (live + count > options.quota) throw quotaExceeded(live, count);
      await createLimiter.take(userId);
      const forks = await Promise.all(
        forkNames(source.name, count, request.names).map(async (name) => {
          const id = randomUUID();
          const keys = await generateSshKeyPair(`agent@${id}`);
          return { id, name, publicKey: keys.publicKey, privateKey: keys.privateKey };
        }),
      );
      const staged = await stageForkHomes(
        tenant.spec,
        home,
        forks.map((f) => f.id),
      ).catch(tenantError);
      try {
        await recordForks(request, tenant.spec, forks, staged, backendFields);
      } catch (error) {
        await staged.discard();
        return tenantError(error);
      }
      // Committed: this process's reconciler claims the creates now, not at its next poll.
      operationsQueued();
      return {
        forks: forks.map(({ id, name, privateKey }) => ({ id, name, privateKey })),
        copies: staged.copies,
      };
    },
  };
}

/** POST /projects/{id}/fork and GET /projects/{id}/forks; returns the forker, for the other APIs that fork. */
export function registerForkRoutes(routes: Routes, options: CreateRouteOptions): ProjectForker {
  const { db, view } = options;
  const forker = projectForker(options);

  const forkView = async (
    request: FastifyRequest,
    userId: string,
    fork: { id: string; privateKey: string },
  ): Promise<ProjectBody> => {
    const row = await ownProject(db, userId, fork.id);
    if (!row) throw projectNotFound();
    return view(row, request, userId, fork.privateKey);
  };

  routes.handle(forkProjectRoute, async ({ request, reply, userId, body, project: source }) => {
    const { forks, copies } = await forker.fork({
      userId,
      source,
      count: body?.count ?? body?.names?.length ?? 1,
      names: body?.names,
    });
    return reply.status(202).send({
      source: { project_id: source.id, forked_at: copies.at.toISOString() },
      projects: await Promise.all(forks.map((fork) => forkView(request, userId, fork))),
      copy: { frozen_ms: copies.frozenMs, total_ms: copies.totalMs, bytes_allocated: copies.bytesAllocated },
    });
  });

  routes.handle(listForksRoute, async ({ userId, params: { id } }) => ({
    project_id: id,
    forks: (await listForks(db, userId, id)).map((row) => ({
      project_id: row.id,
      name: row.name,
      status: projectStatus(row.state, row),
      forked_from: row.forked_from,
      forked_at: row.forked_at.toISOString(),
      depth: row.depth,
    })),
  }));
  return forker;
}
