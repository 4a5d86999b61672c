import type { Database } from "../store/db.js";
import { runningTenantsOfBackends } from "../store/tenants.js";
import type { BackupTrigger, KubernetesBackupRecord, KubernetesBackups } from "../kubernetes/backup.js";
import type { Job } from "./scheduler.js";

/**
 * The periodic backups of the sandboxes the runtime backs up from outside (a Pod's: runtime/kubernetes/backup.ts;
 * the others' daemons run inside them), those of the backends `kinds` (the registry's without a backup daemon
 * inside: `BackendTraits.backupDaemonInside`): every `tickMs`, each running one whose last attempt is older than
 * its spec's `backupIntervalSeconds` (or that has none) is backed up, one after another; with
 * `backupAfterChangeSeconds`, also one whose last attempt is at least that old and whose home changed since
 * (the container daemon's schedule).
 */
export function outsideBackupsJob(
  backups: KubernetesBackups,
  db: Database,
  kinds: readonly string[],
  tickMs = 30_000,
): Job {
  return {
    name: "kubernetes-backups",
    intervalMs: tickMs,
    run: async () => {
      const rows = await runningTenantsOfBackends<KubernetesBackupRecord>(db, kinds);
      const now = Date.now();
      const done: Record<string, string> = {};
      for (const row of rows) {
        const last = Date.parse(row.last_backup?.last_attempt_at ?? "") || 0;
        const after = row.spec.backupAfterChangeSeconds ?? 0;
        let trigger: BackupTrigger | undefined;
        if (now - last >= (row.spec.backupIntervalSeconds ?? 300) * 1000) trigger = "interval";
        else if (
          after > 0 &&
          now - last >= after * 1000 &&
          (await backups.changedSince(row.project_id, new Date(last)))
        )
          trigger = "change";
        if (!trigger) continue;
        const outcome = await backups.backUp(db, row.spec, trigger);
        done[row.project_id] = outcome.ok
          ? "ok"
          : `${outcome.skipped ? "skipped" : "failed"}: ${outcome.why}`;
      }
      return done;
    },
  };
}
