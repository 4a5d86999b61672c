import type { SandboxBackends } from "../backends/registry.js";
import type { Database } from "../store/db.js";
import { runningTenants } from "../store/tenants.js";
import type { TenantTokens } from "../gcp/credentials.js";
import type { GuestTokens } from "../gcp/guest-token.js";
import type { Job } from "./scheduler.js";

/**
 * On GCP, each minute: the running sandboxes' storage tokens that expire soon renewed (those whose backup
 * daemon runs inside and reads the token the runtime writes; a sandbox backed up from outside gets one minted
 * at each backup, never written), and a renewed token, or one a guest could not be given before, copied into
 * each microVM. A failure is the run's detail; the rest go on, and the next run tries again.
 */
export function tenantTokensJob(
  db: Database,
  tokens: Pick<TenantTokens, "renewDue">,
  guests: Pick<GuestTokens, "deliver"> | undefined,
  backends: SandboxBackends,
  intervalMs = 60_000,
): Job {
  return {
    name: "tenant-tokens",
    intervalMs,
    run: async () => {
      const rows = await runningTenants(db);
      const failures = await tokens.renewDue(
        rows.filter((row) => backends.of(row.spec).traits.backupDaemonInside).map((row) => row.project_id),
      );
      for (const row of rows)
        await guests
          ?.deliver(row.spec)
          .catch((error: Error) => (failures[row.project_id] = `delivery: ${error.message}`));
      return failures;
    },
  };
}
