import type Docker from "dockerode";
import { tenantNames } from "../../components/tenant/names.js";
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
 */
export function sandboxRevivalJob(db: Database, docker: Docker, intervalMs: number): Job {
  let seenExited = new Set<string>();
  return {
    name: "sandbox-revival",
    intervalMs,
    async run() {
      const { rows } = await db.query<{ project_id: string }>(
        `select t.project_id from tenants t
          where t.state = 'running' and (t.spec->>'running')::boolean
            and not exists (select 1 from operations o where o.project_id = t.project_id
                             and o.state in ('pending', 'running'))`,
      );
      if (rows.length === 0) {
        seenExited = new Set();
        return { checked: 0, revived: [] };
      }
      const containers = await docker.listContainers({
        all: true,
        filters: { label: [`${LABELS.managedBy}=${MANAGED_BY}`], status: ["exited"] },
      });
      const exitedNames = new Set(containers.flatMap((c) => c.Names.map((n) => n.replace(/^\//, ""))));
      const exited = new Set(
        rows.map((r) => r.project_id).filter((id) => exitedNames.has(tenantNames(id).container)),
      );
      const revived: string[] = [];
      for (const id of exited) {
        if (!seenExited.has(id)) continue;
        let finishedAt: string;
        try {
          finishedAt = (await docker.getContainer(tenantNames(id).container).inspect()).State.FinishedAt;
        } catch (error) {
          if (isNotFound(error)) continue;
          throw error;
        }
        const { created } = await requestOperation(db, id, "start", `revive-${id}-${finishedAt}`);
        if (created) revived.push(id);
      }
      seenExited = exited;
      return { checked: rows.length, exited: exited.size, revived };
    },
  };
}
