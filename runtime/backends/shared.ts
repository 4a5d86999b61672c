// What two backends share: the final backup of a sandbox whose backup daemon runs inside it (a container's,
// a microVM's), and the snapshot options both need.
import type { TenantSpec } from "../../components/tenant/spec.js";
import type { Database } from "../store/db.js";
import { SandboxNotRunningError } from "../sandbox/exec.js";
import type { SandboxRunner } from "../sandbox/runner.js";
import { backupNow, recordAfterFinalBackup } from "../sandbox/backup.js";
import type { SnapshotOptions } from "../tenants/snapshots.js";
import type { BackendLog } from "./backend.js";

/**
 * The daemon's `once` through the backend's runner, then what it says of its backups recorded for
 * backup-status (SandboxBackend.finalBackup).
 */
export async function backUpInside(
  db: Database,
  spec: TenantSpec,
  deadlineSeconds: number,
  runner: () => Promise<SandboxRunner>,
  log?: BackendLog,
): Promise<string> {
  const projectId = spec.projectId;
  let ok: boolean;
  let failure: string | undefined;
  let sandbox: SandboxRunner | undefined;
  const askedAt = new Date();
  try {
    sandbox = await runner();
    const outcome = await backupNow(sandbox, deadlineSeconds);
    [ok, failure] = [outcome.ok, outcome.ok ? undefined : outcome.why];
  } catch (error) {
    if (error instanceof SandboxNotRunningError) return "skipped: the sandbox is not running";
    [ok, failure] = [false, (error as Error).message];
  }
  // The status is recorded for backup-status while stopped; not reading it does not change the outcome.
  const recorded = sandbox
    ? await recordAfterFinalBackup(db, sandbox, projectId, { ok, askedAt, endedAt: new Date() })
    : undefined;
  if (recorded && "unread" in recorded)
    log?.("backup status unreadable after the final backup", { project: projectId, error: recorded.unread });
  if (ok) return "ok";
  const said = recorded && "status" in recorded ? recorded.status.last_error : undefined;
  return `failed: ${failure ?? said ?? "see the sandbox's backup log"}`;
}

/** The snapshot options a snapshot needs, or the error of a runtime configured without them. */
export function snapshotOptions(options: SnapshotOptions | undefined): SnapshotOptions {
  if (!options) throw new Error("this reconciler has no snapshot registry configured");
  return options;
}
