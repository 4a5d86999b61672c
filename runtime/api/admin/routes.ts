import { z } from "zod";
import { HttpError } from "../../errors.js";
import type { JobScheduler } from "../../jobs/scheduler.js";
import type { Database } from "../../store/db.js";
import { clearDriftStall } from "../../store/drift.js";
import { listJobRuns } from "../../store/jobs.js";
import { cancelOperation, openOperations } from "../../store/operations.js";
import { allLiveProjects } from "../../store/project-view.js";
import { projectExists } from "../../store/projects.js";
import type { WarmPool } from "../../tenants/pool.js";
import { EmptyBody, projectStatus, ProjectParams } from "../projects/schemas.js";
import { route, type Routes } from "../route.js";
import { adminOnly } from "../answers.js";
import {
  AdminJobsBody,
  AdminOperationsBody,
  AdminPoolBody,
  AdminProjectsBody,
  CancelBody,
  JobRunBody,
  UnstallBody,
} from "../responses.js";

/** The jobs an operator may start now (runtime/jobs/). */
export const JOB_NAMES = ["drift-sweep", "idle-shutdown", "memory-retention", "sandbox-revival"] as const;

export const OperationParams = z
  .object({ operationId: z.uuid({ message: "must be an operation id (UUID)" }) })
  .strict();
export const JobParams = z
  .object({ job: z.enum(JOB_NAMES, { message: `must be one of ${JOB_NAMES.join(", ")}` }) })
  .strict();

export const adminProjectsRoute = route({
  method: "get",
  path: "/admin/projects",
  summary: "Operators: every live project with its owner, status, drift and last operation",
  access: "operator",
  responses: { 200: { description: "projects", body: AdminProjectsBody }, 404: adminOnly },
});

export const adminOperationsRoute = route({
  method: "get",
  path: "/admin/operations",
  summary: "Operators: the operations queue (waiting and running)",
  access: "operator",
  responses: { 200: { description: "operations", body: AdminOperationsBody }, 404: adminOnly },
});

export const cancelOperationRoute = route({
  method: "post",
  path: "/admin/operations/{operationId}/cancel",
  summary: "Operators: cancel an operation (a waiting one now; a running one's engine is aborted)",
  params: OperationParams,
  body: EmptyBody,
  bodyOptional: true,
  access: "operator",
  responses: {
    202: { description: "cancelled or asked to stop", body: CancelBody },
    404: "no such operation, or not an operator",
    409: "the operation has already finished",
  },
});

export const unstallRoute = route({
  method: "post",
  path: "/admin/projects/{id}/unstall",
  summary: "Operators: clear a project's stalled drift checks, so that sweeps check it again",
  params: ProjectParams,
  body: EmptyBody,
  bodyOptional: true,
  access: "operator",
  responses: {
    200: { description: "cleared", body: UnstallBody },
    404: "no such project, or not an operator",
  },
});

export const adminJobsRoute = route({
  method: "get",
  path: "/admin/jobs",
  summary: "Operators: each background job's last run (start, duration, outcome) and its totals",
  access: "operator",
  responses: { 200: { description: "jobs", body: AdminJobsBody }, 404: adminOnly },
});

export const adminPoolRoute = route({
  method: "get",
  path: "/admin/pool",
  summary: "Operators: the warm pool (members ready, being made, failed; claims and misses; why it is short)",
  access: "operator",
  responses: { 200: { description: "the pool", body: AdminPoolBody }, 404: adminOnly },
});

export const runJobRoute = route({
  method: "post",
  path: "/admin/jobs/{job}/run",
  summary:
    "Operators: run a background job now (drift-sweep, idle-shutdown, sandbox-revival); one already running is not started twice",
  params: JobParams,
  body: EmptyBody,
  bodyOptional: true,
  access: "operator",
  responses: {
    200: { description: "the run", body: JobRunBody },
    404: "not an operator, or a job this runtime does not run",
  },
});

/** The routes above, in the document's order. */
export const adminRoutes = [
  adminProjectsRoute,
  adminOperationsRoute,
  cancelOperationRoute,
  unstallRoute,
  adminJobsRoute,
  adminPoolRoute,
  runJobRoute,
] as const;

export interface AdminRoutesOptions {
  readonly db: Database;
  /** The runtime's background jobs, which an operator can run now. */
  readonly jobs?: JobScheduler;
  /** The warm pool, when the runtime keeps one. */
  readonly pool?: WarmPool;
}

/**
 * The operator's view (`/admin/*`): every project with its owner, status, drift and last operation; the
 * operations queue; force-cancel; clearing a stalled project; running a job now. To anyone but an operator
 * every one of these answers 404, as an unknown path does.
 */
export function registerAdminRoutes(routes: Routes, options: AdminRoutesOptions): void {
  const { db } = options;

  routes.handle(adminProjectsRoute, async () => {
    const rows = await allLiveProjects(db);
    return {
      projects: rows.map((row) => ({
        project_id: row.id,
        name: row.name,
        owner: row.owner,
        status: projectStatus(row.state, row),
        created_at: row.created_at.toISOString(),
        program_version: row.program_version,
        drift:
          row.drift_status && row.drift_checked_at
            ? {
                status: row.drift_status,
                checked_at: row.drift_checked_at.toISOString(),
                stalled: row.drift_stalled ?? false,
              }
            : null,
        operation: row.op_id
          ? { id: row.op_id, kind: row.op_kind, state: row.op_state, error: row.op_error }
          : null,
      })),
    };
  });

  routes.handle(adminOperationsRoute, async () => {
    const rows = await openOperations(db);
    return {
      operations: rows.map((row) => ({
        ...row,
        created_at: row.created_at.toISOString(),
        started_at: row.started_at?.toISOString() ?? null,
      })),
    };
  });

  routes.handle(cancelOperationRoute, async ({ reply, params: { operationId } }) => {
    const state = await cancelOperation(db, operationId);
    if (!state) throw new HttpError(404, "not_found", "operation not found");
    if (state !== "cancelled" && state !== "running")
      throw new HttpError(409, "conflict", `the operation has already ${state}`);
    // A pending one is cancelled now; a running one's worker aborts its engine at its next heartbeat.
    return reply.status(202).send({ id: operationId, state, cancel_requested: true });
  });

  routes.handle(unstallRoute, async ({ params: { id } }) => {
    if (!(await projectExists(db, id))) throw new HttpError(404, "not_found", "project not found");
    await clearDriftStall(db, id);
    return { project_id: id, stalled: false };
  });

  routes.handle(adminJobsRoute, async () => {
    const iso = (date: Date | null) => date?.toISOString() ?? null;
    return {
      jobs: (await listJobRuns(db)).map((run) => ({
        ...run,
        last_started_at: iso(run.last_started_at),
        last_finished_at: iso(run.last_finished_at),
        last_duration_ms: run.last_duration_ms === null ? null : Number(run.last_duration_ms),
        runs: Number(run.runs),
        failures: Number(run.failures),
      })),
    };
  });

  routes.handle(adminPoolRoute, async () => {
    if (!options.pool)
      return {
        enabled: false,
        class: "",
        target: 0,
        ready: 0,
        creating: 0,
        failed: 0,
        claims: 0,
        misses: 0,
        last_error: null,
        last_claim_at: null,
      };
    const status = await options.pool.status();
    return {
      enabled: status.enabled,
      class: status.class,
      target: status.target,
      ready: status.ready,
      creating: status.creating,
      failed: status.failed,
      claims: status.claims,
      misses: status.misses,
      last_error: status.lastError,
      last_claim_at: status.lastClaimAt,
    };
  });

  routes.handle(runJobRoute, async ({ reply, params: { job } }) => {
    if (!options.jobs?.has(job))
      throw new HttpError(404, "not_found", `this runtime does not run the job ${job}`);
    const run = await options.jobs.runNow(job);
    // Undefined: a run of it was already going (here, or under another runtime's lock): it ran once.
    return reply.status(200).send({
      job,
      ran: run !== undefined,
      outcome: run?.last_outcome ?? null,
      detail: run?.last_detail ?? null,
    });
  });
}
