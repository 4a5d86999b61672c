// The backup daemon inside a sandbox (sandbox-image/rootfs/usr/local/sbin/sandbox-backup), as the runtime
// asks it: one backup now (the final one before a stop or snapshot), its status, and the record of that
// status the runtime keeps for backup-status while the sandbox is stopped.
import type { Queryable } from "../store/db.js";
import { mergeBackupRecord, recordBackup } from "../store/tenants.js";
import type { SandboxRunner } from "./runner.js";

/** What `sandbox-backup status` reports (sandbox-image/rootfs/usr/local/sbin/sandbox-backup). */
export interface BackupStatus {
  readonly state?: string;
  readonly last_result?: string;
  readonly last_success_at?: string;
  readonly last_attempt_at?: string;
  readonly last_error?: string | null;
  readonly last_duration_ms?: number;
  readonly remote?: string | null;
  readonly interval_seconds?: number;
  readonly after_change_seconds?: number | null;
  readonly last_trigger?: string;
  readonly usage?: { bytes: number; objects: number } | null;
}

const BACKUP = "/usr/local/sbin/sandbox-backup";

/**
 * Runs one backup now (the final one before a snapshot or stop), as root (the backup's state is root's;
 * rclone drops to the agent) and bounded by `deadlineSeconds`: inside, the sync is killed then; outside,
 * the exec a few seconds later should the sandbox not let it end. On failure, why.
 */
export async function backupNow(
  sandbox: SandboxRunner,
  deadlineSeconds: number,
): Promise<{ ok: true } | { ok: false; why?: string }> {
  const result = await sandbox.run([BACKUP, "once", "--deadline", String(deadlineSeconds)], {
    root: true,
    timeoutMs: (deadlineSeconds + 5) * 1000,
  });
  if (result.exitCode === 0) return { ok: true };
  // 75 (EX_TEMPFAIL): the daemon's own sync held the lock past the deadline (the run waits for one under
  // way); the recorded error would be an older one.
  if (result.exitCode === 75)
    return { ok: false, why: "another backup (the daemon's) was still running at the deadline" };
  // Its one line of why; bounded, like everything read back from a sandbox.
  const why = result.stderr.trim().split("\n").at(-1)?.slice(0, 500);
  return why ? { ok: false, why } : { ok: false };
}

/** A final backup's outcome (`backupNow`), with when it was asked for and when it ended. */
export interface FinalBackup {
  readonly ok: boolean;
  readonly askedAt: Date;
  readonly endedAt: Date;
}

/**
 * After a final backup (before a stop or snapshot), records what the sandbox says of its backups for
 * backup-status to answer while it is stopped. A sandbox too slow to answer (a host under load) still had a
 * backup that succeeded: that backup is merged over the record, so backup-status answers it and not an older
 * one, and keeps what the record knew of the daemon (its remote, interval, usage); its times are the
 * runtime's, written as the daemon writes its own. Returns the status read, or why it could not be read.
 */
export async function recordAfterFinalBackup(
  db: Queryable,
  sandbox: SandboxRunner,
  projectId: string,
  backup: FinalBackup,
): Promise<{ status: BackupStatus } | { unread: string }> {
  let status: BackupStatus;
  try {
    status = await readBackupStatus(sandbox, projectId);
  } catch (error) {
    if (backup.ok) {
      const stamp = (at: Date) => at.toISOString().replace(/\.\d{3}Z$/, "+00:00");
      const finished: BackupStatus = {
        state: "idle",
        last_result: "ok",
        last_attempt_at: stamp(backup.askedAt),
        last_success_at: stamp(backup.endedAt),
        last_error: null,
        last_trigger: "once",
      };
      await mergeBackupRecord(db, projectId, finished);
    }
    return { unread: (error as Error).message };
  }
  await recordBackup(db, projectId, status);
  return { status };
}

/** The backup daemon's status and the backup's size on its remote, read in the running sandbox. */
export async function readBackupStatus(sandbox: SandboxRunner, projectId: string): Promise<BackupStatus> {
  const status = await sandbox.run([BACKUP, "status"], { timeoutMs: 15_000 });
  if (status.exitCode !== 0)
    throw new Error(`sandbox-backup status failed in ${projectId}'s sandbox: ${status.stderr.trim()}`);
  // What the sandbox prints is the tenant's to shape: bounded by the exec, and checked before use.
  let parsed: BackupStatus;
  try {
    parsed = JSON.parse(status.stdout) as BackupStatus;
    if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed))
      throw new Error("not an object");
  } catch {
    throw new Error(`sandbox-backup status in ${projectId}'s sandbox did not answer a JSON object`);
  }
  let usage: BackupStatus["usage"] = null;
  if (parsed.remote) {
    // The size is an extra: a remote slow to list (a sandbox under load, a large backup) leaves it out, never
    // the status the daemon wrote.
    const size = await sandbox
      .run(["rclone", "size", "--json", "--contimeout", "5s", "--timeout", "20s", parsed.remote], {
        timeoutMs: 30_000,
      })
      .catch(() => undefined);
    if (size?.exitCode === 0) {
      const { bytes, count } = (() => {
        try {
          return JSON.parse(size.stdout) as { bytes?: unknown; count?: unknown };
        } catch {
          return {};
        }
      })();
      if (Number.isSafeInteger(bytes) && Number.isSafeInteger(count))
        usage = { bytes: bytes as number, objects: count as number };
    }
  }
  return { ...parsed, usage };
}
