import type Docker from "dockerode";
import { bandwidthRefused, type SandboxBackends } from "../../backends/registry.js";
import { HttpError } from "../../errors.js";
import { readBackupStatus, type BackupStatus } from "../../sandbox/backup.js";
import { SandboxNotRunningError } from "../../sandbox/exec.js";
import type { SandboxRunners } from "../../sandbox/runner.js";
import type { Database } from "../../store/db.js";
import { getDrift } from "../../store/drift.js";
import { listProjects } from "../../store/project-view.js";
import { recordProjectSettings } from "../../store/projects.js";
import { listSnapshots } from "../../store/snapshots.js";
import { backupRecordAndBackend, recordBackup } from "../../store/tenants.js";
import { requestOperation, requestSettingsChange, type TenantDefaults } from "../../tenants/service.js";
import { notFound, project, recorded } from "../answers.js";
import {
  BackupStatusBody,
  DriftBody,
  ProjectBody,
  ProjectListBody,
  SnapshotListBody,
  type SandboxView,
} from "../responses.js";
import { route, type Routes } from "../route.js";
import { createProjectRoute } from "./create.js";
import { EmptyBody, ProjectParams, RestoreBody, SnapshotBody, StopBody } from "./schemas.js";
import { idleActionOf, PatchProjectBody, settingsChange } from "./settings.js";
import { tenantError, type ProjectView } from "./view.js";

export const listProjectsRoute = route({
  method: "get",
  path: "/projects",
  summary: "The caller's projects",
  access: "user",
  responses: { 200: { description: "projects", body: ProjectListBody } },
});

export const getProjectRoute = route({
  method: "get",
  path: "/projects/{id}",
  summary: "A project, its status and current operation",
  params: ProjectParams,
  access: "owner",
  responses: { 200: project, 404: notFound },
});

export const patchProjectRoute = route({
  method: "patch",
  path: "/projects/{id}",
  summary:
    "Change a live project: allowlist (no restart), limits (in place), image (next start, or now with restart), protected paths; idle shutdown, drift remediation",
  params: ProjectParams,
  body: PatchProjectBody,
  access: "owner",
  responses: {
    200: { description: "project settings changed; nothing to apply to the sandbox", body: ProjectBody },
    202: { description: "recorded; an update of the sandbox's stack applies it", body: ProjectBody },
    404: notFound,
    409: "the image named is not on this platform's engine (`details.image`), or bandwidth caps for a project whose backend shapes none",
  },
});

export const startProjectRoute = route({
  method: "post",
  path: "/projects/{id}/start",
  summary: "Start the sandbox",
  params: ProjectParams,
  body: EmptyBody,
  bodyOptional: true,
  access: "owner",
  responses: { 202: recorded, 404: notFound },
});

export const stopProjectRoute = route({
  method: "post",
  path: "/projects/{id}/stop",
  summary: "Stop the sandbox (a pause: its memory kept where the backend can, unless keep_memory is false)",
  params: ProjectParams,
  body: StopBody,
  bodyOptional: true,
  access: "owner",
  responses: { 202: recorded, 404: notFound },
});

export const snapshotProjectRoute = route({
  method: "post",
  path: "/projects/{id}/snapshot",
  summary: "Final backup, then commit the sandbox's system state and push it (the newest 5 are kept)",
  params: ProjectParams,
  body: SnapshotBody,
  bodyOptional: true,
  access: "owner",
  responses: { 202: recorded, 404: notFound },
});

export const restoreProjectRoute = route({
  method: "post",
  path: "/projects/{id}/restore",
  summary: "Run a snapshot (the newest unless named) on the project's volume, and start it",
  params: ProjectParams,
  body: RestoreBody,
  bodyOptional: true,
  access: "owner",
  responses: {
    202: recorded,
    404: notFound,
    409: "the project has no snapshot of the tag named (`details.snapshot`)",
  },
});

export const listSnapshotsRoute = route({
  method: "get",
  path: "/projects/{id}/snapshots",
  summary: "The project's snapshots, newest first",
  params: ProjectParams,
  access: "owner",
  responses: { 200: { description: "snapshots", body: SnapshotListBody }, 404: notFound },
});

export const driftRoute = route({
  method: "get",
  path: "/projects/{id}/drift",
  summary: "The last drift check of the project's stack: each resource changed or deleted out of band",
  params: ProjectParams,
  access: "owner",
  responses: { 200: { description: "drift", body: DriftBody }, 404: notFound },
});

export const backupStatusRoute = route({
  method: "get",
  path: "/projects/{id}/backup-status",
  summary: "Last backup time, result and size on the backup remote",
  params: ProjectParams,
  access: "owner",
  responses: { 200: { description: "backup status", body: BackupStatusBody }, 404: notFound },
});

export const deleteProjectRoute = route({
  method: "delete",
  path: "/projects/{id}",
  summary: "Delete the project and its sandbox",
  params: ProjectParams,
  body: EmptyBody,
  bodyOptional: true,
  access: "owner",
  responses: { 202: recorded, 404: notFound },
});

/** The routes above, in the document's order. */
export const projectRoutes = [
  listProjectsRoute,
  createProjectRoute,
  getProjectRoute,
  patchProjectRoute,
  startProjectRoute,
  stopProjectRoute,
  snapshotProjectRoute,
  restoreProjectRoute,
  listSnapshotsRoute,
  driftRoute,
  backupStatusRoute,
  deleteProjectRoute,
] as const;

export interface ProjectRoutesOptions {
  readonly db: Database;
  readonly defaults: TenantDefaults;
  /** The engine the sandboxes run on (an image a PATCH names must be on it). */
  readonly docker: Docker;
  /** Each project's sandbox by its backend (backup-status asks the sandbox's backup daemon). */
  readonly sandboxes: SandboxRunners;
  /** Each project's backend: what it keeps, and its live sandbox where it observes one (a Pod). */
  readonly backends: SandboxBackends;
  readonly view: ProjectView;
}

/** How long one project's view waits for the cluster before it answers without the Pod's state. */
const OBSERVE_TIMEOUT_MS = 3_000;

/** A project's own routes: read it, change its settings, start, stop, snapshot, restore and delete it. */
export function registerProjectRoutes(routes: Routes, options: ProjectRoutesOptions): void {
  const { db, view } = options;

  routes.handle(listProjectsRoute, async ({ request, userId }) => ({
    projects: (await listProjects(db, userId)).map((row) => view(row, request, userId)),
  }));

  routes.handle(getProjectRoute, async ({ request, userId, project: row }) => {
    const id = row.id;
    const body = view(row, request, userId);
    // The live sandbox where its backend observes one (a Pod: the stack being applied does not say it was
    // scheduled, pulled its image or passed its readiness probe). One that does not answer in time is unknown.
    const observing = options.backends.observe(id, row.backend);
    if (!observing) return body;
    const observed = await Promise.race([
      observing.catch((error: Error) => ({ phase: "unknown" as const, message: error.message })),
      new Promise<SandboxView>((resolve) =>
        setTimeout(
          () =>
            resolve({
              phase: "unknown",
              message: `the cluster did not answer within ${OBSERVE_TIMEOUT_MS} ms`,
            }),
          OBSERVE_TIMEOUT_MS,
        ).unref(),
      ),
    ]);
    return { ...body, sandbox: observed };
  });

  // Live settings: stack settings are one `update` of the tenant's stack (202 with it in `operation`);
  // project settings alone (the idle action, drift remediation, private ports) change nothing on the stack (200).
  routes.handle(
    patchProjectRoute,
    async ({ request, reply, userId, params: { id }, body, project, reloadProject }) => {
      if (body.image) {
        const found = await options.docker
          .getImage(body.image)
          .inspect()
          .then(() => true)
          .catch((error: { statusCode?: number }) => {
            if (error.statusCode === 404) return false;
            throw error;
          });
        // A well-formed reference to an image that is not there is a fact about the engine, not bad input.
        if (!found)
          throw new HttpError(
            409,
            "image_not_found",
            `image: ${body.image} is not on the engine (build one with npm run image:repo)`,
            { field: "image", image: body.image },
          );
      }
      // Refused before anything is recorded, naming why: the project's backend shapes no bandwidth.
      if (body.bandwidth && !options.backends.traits(project.backend).bandwidth)
        tenantError(bandwidthRefused(project.backend, 409));
      const change = settingsChange(body);
      const queued = change
        ? await requestSettingsChange(db, id, change, (before, after) =>
            options.backends.applyAllowlist(before, after),
          ).catch(tenantError)
        : undefined;
      const idle = idleActionOf(body, project.idle);
      if (idle !== undefined || body.drift_remediation !== undefined || body.private_ports !== undefined)
        await recordProjectSettings(db, id, {
          idle,
          driftRemediation: body.drift_remediation,
          privatePorts: body.private_ports,
        });
      return reply.status(queued?.operation ? 202 : 200).send(view(await reloadProject(), request, userId));
    },
  );

  for (const [kind, declared] of [
    ["start", startProjectRoute],
    ["delete", deleteProjectRoute],
  ] as const)
    routes.handle(declared, async ({ request, reply, userId, params: { id }, reloadProject }) => {
      await requestOperation(db, id, kind).catch(tenantError);
      return reply.status(202).send(view(await reloadProject(), request, userId));
    });

  // A stop is a pause where the backend keeps memory (a microVM's), unless asked to drop it.
  routes.handle(stopProjectRoute, async ({ request, reply, userId, params: { id }, body, reloadProject }) => {
    await requestOperation(db, id, "stop", undefined, {
      running: false,
      keepMemory: body.keep_memory,
    }).catch(tenantError);
    return reply.status(202).send(view(await reloadProject(), request, userId));
  });

  routes.handle(
    snapshotProjectRoute,
    async ({ request, reply, userId, params: { id }, body, project, reloadProject }) => {
      const { backend } = project;
      // Refused before it is queued, naming why: its operation could only fail.
      if (!options.backends.traits(backend).snapshots)
        throw new HttpError(
          409,
          "snapshots_unsupported",
          `project ${id} runs on ${backend}, which keeps no snapshots; its home is kept across a stop and a start`,
          { backend },
        );
      await requestOperation(db, id, "snapshot", undefined, body.stop ? { running: false } : {}).catch(
        tenantError,
      );
      return reply.status(202).send(view(await reloadProject(), request, userId));
    },
  );

  routes.handle(
    restoreProjectRoute,
    async ({ request, reply, userId, params: { id }, body, reloadProject }) => {
      const snapshots = await listSnapshots(db, id);
      const chosen = body.snapshot ? snapshots.find((s) => s.tag === body.snapshot) : snapshots[0];
      if (body.snapshot && !chosen)
        // The project is there; the snapshot its body names is not (a 404 would say the project is gone).
        throw new HttpError(409, "snapshot_not_found", `project has no snapshot ${body.snapshot}`, {
          snapshot: body.snapshot,
        });
      // Without any snapshot, a restore starts the base image; an empty home is filled from the backup.
      const image = chosen?.image ?? options.defaults.image;
      await requestOperation(db, id, "restore", undefined, { image, running: true }).catch(tenantError);
      return reply.status(202).send(view(await reloadProject(), request, userId));
    },
  );

  routes.handle(driftRoute, async ({ params: { id } }) => {
    const drift = await getDrift(db, id);
    return {
      project_id: id,
      status: drift?.status ?? "never-checked",
      checked_at: drift?.checked_at.toISOString() ?? null,
      resources: drift?.resources ?? [],
      error: drift?.error ?? null,
      stalled: drift?.stalled ?? false,
    };
  });

  routes.handle(listSnapshotsRoute, async ({ params: { id } }) => {
    return {
      snapshots: (await listSnapshots(db, id)).map((s) => ({
        tag: s.tag,
        image: s.image,
        digest: s.digest,
        created_at: s.created_at.toISOString(),
      })),
    };
  });

  routes.handle(backupStatusRoute, async ({ request, params: { id } }): Promise<BackupStatusBody> => {
    const recorded = await backupRecordAndBackend<BackupStatus>(db, id);
    let status: BackupStatus | null = recorded?.last_backup ?? null;
    let source: "sandbox" | "recorded" = "recorded";
    try {
      // A sandbox backed up from outside (a Pod's): the runtime's record is the answer, and what the sandbox
      // would say is its agent's to write.
      if (options.backends.traits(recorded?.backend).backupDaemonInside) {
        status = await readBackupStatus(await options.sandboxes(id), id);
        source = "sandbox";
      }
    } catch (error) {
      // A stopped sandbox cannot be asked, and one that answers no status (the tenant's to break) is not
      // believed: what it said last is the answer, never a 500.
      if (!(error instanceof SandboxNotRunningError))
        request.log.warn({ err: error, project: id }, "backup status unreadable; answering the recorded one");
    }
    if (source === "sandbox" && status) await recordBackup(db, id, status);
    // The sandbox wrote these: a field of another type than documented is left out, not passed on.
    const text = (value: unknown) => (typeof value === "string" ? value : null);
    return {
      project_id: id,
      source,
      last_backup_at: text(status?.last_success_at),
      last_attempt_at: text(status?.last_attempt_at),
      last_result: text(status?.last_result),
      last_error: text(status?.last_error),
      state: text(status?.state) ?? "never-run",
      interval_seconds: Number.isFinite(status?.interval_seconds) ? status!.interval_seconds! : null,
      after_change_seconds: Number.isFinite(status?.after_change_seconds)
        ? status!.after_change_seconds!
        : null,
      last_trigger: text(status?.last_trigger),
      usage: status?.usage ?? null,
    };
  });
}
