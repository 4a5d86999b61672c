// One handler per operation kind: what an operation does to its project's stack and sandbox once the worker
// has claimed it and made its stack ready (reconciler.ts), and what a failed one leaves recorded. A handler
// names no backend: the project's own is in its context.
import type { EngineEvent } from "@pulumi/pulumi/automation/index.js";
import { driftBasis, recordDrift, recordDriftFailure } from "../store/drift.js";
import type { TenantSpec } from "../../components/tenant/spec.js";
import type { SandboxBackend } from "../backends/backend.js";
import type { Database } from "../store/db.js";
import { purgeTenantObjects } from "../gcp/storage.js";
import type { Operation, OperationKind } from "../store/operations.js";
import {
  markTenantDeleted,
  recordLastStart,
  recordPause,
  settleFailedSnapshot,
  type PauseRecord,
  type StartRecord,
} from "../store/tenants.js";
import { deleteProjectRecordings } from "../terminal/recording.js";
import type { TenantCloud } from "../tenants/config.js";
import { driftedResources, type DriftRemediation } from "../tenants/drift.js";
import { sameBasis } from "../tenants/drift-basis.js";
import { observeDriftBasis, precheckDrift } from "../tenants/drift-precheck.js";
import { discardStagedHome } from "../tenants/fork.js";
import { deleteAllSecrets } from "../store/secrets.js";
import type { TenantState } from "../store/tenants.js";
import { requestOperation } from "../tenants/service.js";
import {
  createTenant,
  destroyTenant,
  tenantStack,
  upTenant,
  type TenantStackOptions,
} from "../tenants/stack.js";

/** What a handler works with: the operation, its project's recorded spec and backend, and the reconciler's means. */
export interface OperationContext {
  readonly operation: Operation;
  readonly db: Database;
  readonly spec: TenantSpec;
  readonly backend: SandboxBackend;
  /** The stack's options (events to the operation, its cancellation, each stack's program its backend's). */
  readonly stack: TenantStackOptions;
  /** The same with the project's secrets opened: for what runs the tenant program (an up). */
  withSecrets(): Promise<TenantStackOptions>;
  /** The tenant program version this reconciler applies. */
  readonly programVersion: string;
  setState(state: TenantState): Promise<void>;
  /** After an up: the version the stack is on, and on GCP the sandbox's token (TenantCloud). */
  applied(): Promise<void>;
  /** The final backup, outside the worker's slot: "ok", "skipped: why" or "failed: why". */
  finalBackup(): Promise<string>;
  /** A deleted project's guest token is forgotten. */
  forgetToken(): void;
  /** What a drift check that finds drift does for this project. */
  remediation(): Promise<DriftRemediation>;
  readonly gcp?: TenantCloud;
  readonly recordingsDir?: string;
}

export interface OperationHandler {
  /** Does the operation; its result is recorded with it. */
  run(context: OperationContext): Promise<unknown>;
  /**
   * What a failure (not a cancellation) leaves recorded of the project; absent: the tenant is in error with
   * the message.
   */
  failed?(db: Database, projectId: string, message: string, stallAfter: number): Promise<void>;
}

const settled = (running: boolean): TenantState => (running ? "running" : "stopped");

/**
 * After an up: how the sandbox sleeps, when the spec stops it (its memory kept, and its size, or its files
 * alone), recorded for the project's view and the memory retention (cleared when it runs); and when it runs,
 * how a start this operation made went (resumed, or booted from its disks and why), where the backend says.
 */
async function recordPauseOrStart({ db, spec, backend, operation }: OperationContext): Promise<{
  pause?: PauseRecord;
  start?: StartRecord;
}> {
  const pause = spec.running ? null : ((await backend.paused?.(spec)) ?? { kind: "files" as const });
  await recordPause(db, spec.projectId, pause);
  if (pause) return { pause };
  // A start this operation made (its boot recorded after the operation began), as the backend tells it.
  const start = await backend.started?.(spec);
  const began = operation.started_at ? new Date(operation.started_at).getTime() : Date.now();
  if (!start || Date.parse(start.at) < began) return {};
  await recordLastStart(db, spec.projectId, start);
  return { start };
}

/** A create, a stop, a start, an update: the stack converged to the spec (`up --refresh` after a create). */
function converge(kind: "stop" | "start" | "update"): OperationHandler {
  return {
    async run(context) {
      const { spec, backend } = context;
      // A stop makes a final backup first: nothing written before it is lost.
      const backup = kind === "stop" ? await context.finalBackup() : undefined;
      // A stopped sandbox has nothing to bring to its disks (an update may only drop its kept memory).
      if (kind === "update" && spec.running) await backend.beforeRestart(spec);
      // The state stays the last settled one until this finishes; the operation shows the progress.
      const result = await upTenant(spec, await context.withSecrets(), true);
      await context.applied();
      const sleep = await recordPauseOrStart(context);
      await context.setState(settled(spec.running));
      return {
        changes: result.summary.resourceChanges,
        programVersion: context.programVersion,
        ...(backup ? { backup } : {}),
        ...sleep,
      };
    },
  };
}

export const OPERATION_HANDLERS: { readonly [kind in OperationKind]: OperationHandler } = {
  create: {
    async run(context) {
      const { spec } = context;
      await context.setState("creating");
      const result = await createTenant(spec, await context.withSecrets());
      await context.applied();
      await recordPauseOrStart(context);
      await context.setState(settled(spec.running));
      return { changes: result.summary.resourceChanges };
    },
  },
  stop: converge("stop"),
  start: converge("start"),
  update: converge("update"),
  snapshot: {
    async run(context) {
      const { spec, backend } = context;
      if (!backend.snapshots) throw new Error(`a ${backend.kind} project keeps no snapshots`);
      await context.setState("snapshotting");
      const backup = await context.finalBackup();
      const snapshot = await backend.snapshots.take(context.db, spec);
      // A snapshot asked to stop the sandbox too (idle shutdown) converges the stack to stopped.
      const result = spec.running ? undefined : await upTenant(spec, await context.withSecrets(), true);
      if (result) await context.applied();
      const sleep = await recordPauseOrStart(context);
      await context.setState(settled(spec.running));
      return {
        snapshot: { tag: snapshot.tag, image: snapshot.image, digest: snapshot.digest },
        backup,
        ...(result ? { changes: result.summary.resourceChanges } : {}),
        ...sleep,
      };
    },
    // A failed snapshot leaves the sandbox as it was: the operation carries the error.
    async failed(db, projectId) {
      await settleFailedSnapshot(db, projectId);
    },
  },
  restore: {
    async run(context) {
      // The desired image (a snapshot, or the base image when there is none) was recorded with the
      // request; a replaced container keeps the project's volume, so /home/agent is untouched.
      const { spec, backend } = context;
      await context.setState("restoring");
      await backend.beforeRestart(spec);
      await backend.prepareImage(spec);
      const result = await upTenant(spec, await context.withSecrets(), true);
      await context.applied();
      await recordPauseOrStart(context);
      await context.setState(settled(spec.running));
      return { image: spec.image, changes: result.summary.resourceChanges };
    },
  },
  delete: {
    async run(context) {
      const { spec, backend, db } = context;
      await context.setState("deleting");
      const outcome = await destroyTenant(spec.projectId, context.stack);
      context.forgetToken();
      // After the destroy (the sandbox, so its backup daemon, is gone): its objects. Idempotent, so a
      // delete that fails here is retried whole, and never leaves a tenant half in the bucket.
      const objectsPurged = context.gcp
        ? await purgeTenantObjects(context.gcp.storage, spec.projectId)
        : undefined;
      const snapshots = (await backend.snapshots?.deleteAll(db, spec)) ?? [];
      if (context.recordingsDir) await deleteProjectRecordings(context.recordingsDir, spec.projectId);
      await discardStagedHome(spec);
      await deleteAllSecrets(db, spec.projectId);
      // Only now may the subnet and port go to someone else.
      await markTenantDeleted(db, spec.projectId);
      return {
        outcome,
        snapshotsDeleted: snapshots.length,
        ...(objectsPurged !== undefined ? { objectsPurged } : {}),
      };
    },
  },
  "check-drift": {
    async run(context) {
      const { spec, operation, db } = context;
      // Without the engine when the stack provably has no drift (its ~1 s of start-up for ~0.1 s of reads);
      // otherwise, or should the pre-check itself fail (it answers that as not clean, never throws), the
      // engine's refresh preview decides as before. Kubernetes objects are compared with what the engine's
      // last clean refresh saw of them (the recorded basis).
      const precheck = await precheckDrift(
        spec.projectId,
        context.stack,
        await driftBasis(db, spec.projectId),
      );
      if (precheck.clean) {
        await recordDrift(db, spec.projectId, []);
        return { drifted: false, changes: {}, resources: [], checked: "in-process" };
      }
      const stack = await tenantStack(spec, context.stack);
      const events: EngineEvent[] = [];
      const preview = await stack.previewRefresh({
        onEvent: (event) => (events.push(event), context.stack.onEvent?.(event)),
      });
      const changes = Object.fromEntries(
        Object.entries(preview.changeSummary).filter(([op]) => op !== "same"),
      );
      const resources = driftedResources(events);
      const drifted = Object.keys(changes).length > 0;
      // A clean refresh vouches for what the pre-check saw before it, if nothing of it changed meanwhile.
      const after =
        !drifted && resources.length === 0 && precheck.basis
          ? await observeDriftBasis(spec.projectId, context.stack)
          : undefined;
      const vouched = after && precheck.basis && sameBasis(after, precheck.basis) ? after : null;
      await recordDrift(db, spec.projectId, resources, vouched);
      const repair = drifted && (await context.remediation()) === "repair";
      // Repair is an ordinary update (up --refresh), queued behind this check like any other operation.
      if (repair) await requestOperation(db, spec.projectId, "update", `repair-${operation.id}`);
      return {
        drifted,
        changes,
        resources,
        ...(repair ? { repair: "update requested" } : {}),
        checked: "engine",
        precheck: precheck.reason,
        ...(vouched ? { vouched: Object.keys(vouched.objects).length } : {}),
      };
    },
    // A stack that cannot be checked (corrupt state, a lock, a missing plugin) is reported, and after a
    // few such checks in a row marked stalled: the sweep leaves it alone until an operator acts.
    async failed(db, projectId, message, stallAfter) {
      await recordDriftFailure(db, projectId, message, stallAfter).catch(() => undefined);
    },
  },
};
