import type { SandboxBackends } from "../backends/registry.js";
import type { Database } from "../store/db.js";
import { settledRunningTenants } from "../store/tenants.js";
import { requestOperation } from "../tenants/service.js";
import type { Job } from "./scheduler.js";

/**
 * The sandbox revival: a project that should run (desired `running`, recorded `running`, nothing
 * in flight) whose container has exited behind the platform's back gets the `start` its user would ask for.
 * The cause it is for: a restarted Docker engine (or a rebooted host) stops every container and starts none
 * (they carry no restart policy), while the platform still records them as running; before this, nothing
 * started them until their users did. A container must be seen exited in two runs in a row, so a container
 * something is already dealing with (a test, an operator) is left to it; one start per exit (the idempotency
 * key is the exit time), so a sandbox that keeps dying is started once per death, not in a tight loop.
 * A microVM is the same with its qemu process for the container; each backend says how its
 * sandbox died (SandboxBackend.diedAt).
 */
export function sandboxRevivalJob(db: Database, backends: SandboxBackends, intervalMs: number): Job {
  let seenExited = new Set<string>();
  return {
    name: "sandbox-revival",
    intervalMs,
    async run() {
      const rows = await settledRunningTenants(db);
      /** When each exited sandbox's end began: the container's exit, the dead VM's boot. */
      const deaths = new Map<string, string>();
      for (const { project_id: id, spec } of rows) {
        const died = await backends.of(spec).diedAt(spec);
        if (died !== undefined) deaths.set(id, died);
      }
      const exited = new Set(deaths.keys());
      const revived: string[] = [];
      for (const id of exited) {
        if (!seenExited.has(id)) continue;
        const { created } = await requestOperation(db, id, "start", `revive-${id}-${deaths.get(id)}`);
        if (created) revived.push(id);
      }
      seenExited = exited;
      return { checked: rows.length, exited: exited.size, revived };
    },
  };
}
