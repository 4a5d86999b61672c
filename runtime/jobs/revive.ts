import { promises as fs } from "node:fs";
import * as path from "node:path";
import type Docker from "dockerode";
import { tenantNames } from "../../components/tenant/names.js";
import { microVmFiles, readMicroVm } from "../../lib/microvm/launcher.js";
import { LABELS, MANAGED_BY } from "../../lib/constants.js";
import { isNotFound } from "../../lib/docker-client.js";
import type { Database } from "../db.js";
import { requestOperation } from "../tenants/service.js";
import type { Job } from "./scheduler.js";

/**
 * The sandbox revival (issue 18): a project that should run (desired `running`, recorded `running`, nothing
 * in flight) whose container has exited behind the platform's back gets the `start` its user would ask for.
 * The cause it is for: a restarted Docker engine (or a rebooted host) stops every container and starts none
 * (they carry no restart policy), while the platform still records them as running; before this, nothing
 * started them until their users did. A container must be seen exited in two runs in a row, so a container
 * something is already dealing with (a test, an operator) is left to it; one start per exit (the idempotency
 * key is the exit time), so a sandbox that keeps dying is started once per death, not in a tight loop.
 * A microVM (issue 19) is the same with its qemu process for the container: its state directory is there
 * and its qemu is not running (a host reboot, a killed process); the death is told by the boot it ended
 * (its pid file's time), which a clean stop removes.
 */
export function sandboxRevivalJob(db: Database, docker: Docker, intervalMs: number): Job {
  let seenExited = new Set<string>();
  return {
    name: "sandbox-revival",
    intervalMs,
    async run() {
      const { rows } = await db.query<{ project_id: string; state_root: string | null }>(
        `select t.project_id,
                case when t.spec->>'backend' = 'microvm' then t.spec->'microvm'->>'stateRoot' end as state_root
           from tenants t
          where t.state = 'running' and (t.spec->>'running')::boolean
            and not exists (select 1 from operations o where o.project_id = t.project_id
                             and o.state in ('pending', 'running'))`,
      );
      if (rows.length === 0) {
        seenExited = new Set();
        return { checked: 0, revived: [] };
      }
      const containers = rows.some((r) => r.state_root === null)
        ? await docker.listContainers({
            all: true,
            filters: { label: [`${LABELS.managedBy}=${MANAGED_BY}`], status: ["exited"] },
          })
        : [];
      const exitedNames = new Set(containers.flatMap((c) => c.Names.map((n) => n.replace(/^\//, ""))));
      /** When each exited sandbox's end began: the container's exit, the dead VM's boot. */
      const deaths = new Map<string, string>();
      for (const { project_id: id, state_root: stateRoot } of rows) {
        if (stateRoot === null) {
          if (exitedNames.has(tenantNames(id).container)) deaths.set(id, "");
        } else {
          const died = await deadMicroVm(path.join(stateRoot, id));
          if (died !== undefined) deaths.set(id, died);
        }
      }
      const exited = new Set(deaths.keys());
      const revived: string[] = [];
      for (const id of exited) {
        if (!seenExited.has(id)) continue;
        let finishedAt = deaths.get(id)!;
        if (finishedAt === "") {
          try {
            finishedAt = (await docker.getContainer(tenantNames(id).container).inspect()).State.FinishedAt;
          } catch (error) {
            if (isNotFound(error)) continue;
            throw error;
          }
        }
        const { created } = await requestOperation(db, id, "start", `revive-${id}-${finishedAt}`);
        if (created) revived.push(id);
      }
      seenExited = exited;
      return { checked: rows.length, exited: exited.size, revived };
    },
  };
}

/**
 * The time of the boot a microVM's qemu died in (its pid file's), or undefined while it runs or when there
 * is no VM in `stateDir` at all (a missing VM is drift, for the drift check and its repair).
 */
async function deadMicroVm(stateDir: string): Promise<string | undefined> {
  const state = await readMicroVm(stateDir).catch(() => undefined);
  if (!state || state.running) return undefined;
  const booted = await fs.stat(microVmFiles(stateDir).pid).catch(() => undefined);
  return booted ? booted.mtime.toISOString() : "no-pid-file";
}
