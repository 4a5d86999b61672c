import type { SandboxBackends } from "../backends/registry.js";
import type { Database } from "../store/db.js";
import { expiredE2bSandboxes } from "../store/e2b-sandboxes.js";
import { getTenant } from "../store/tenants.js";
import { requestOperation } from "../tenants/service.js";
import type { Job } from "./scheduler.js";

/**
 * E2B's timeout: every E2B sandbox past its `timeout_at` is deleted (its project's ordinary delete), or,
 * where the SDK asked to auto-pause, stopped as the idle shutdown stops a project (snapshot, then stop; a
 * plain stop where the backend keeps no snapshots). One request per sandbox and timeout: its idempotency key
 * is the timeout, so a tick that finds it again while the request waits adds nothing.
 */
export function e2bTimeoutJob(db: Database, backends: SandboxBackends, intervalMs: number): Job {
  return {
    name: "e2b-timeout",
    intervalMs,
    async run() {
      const killed: string[] = [];
      const paused: string[] = [];
      for (const sandbox of await expiredE2bSandboxes(db)) {
        const id = sandbox.project_id;
        const key = `e2b-timeout-${id}-${sandbox.timeout_at.getTime()}`;
        if (sandbox.on_timeout === "kill") {
          const { created } = await requestOperation(db, id, "delete", key);
          if (created) killed.push(id);
          continue;
        }
        const tenant = await getTenant(db, id);
        if (!tenant) continue;
        const { created } = backends.of(tenant.spec).traits.snapshots
          ? await requestOperation(db, id, "snapshot", key, { running: false })
          : await requestOperation(db, id, "stop", key);
        if (created) paused.push(id);
      }
      return { killed, paused };
    },
  };
}
