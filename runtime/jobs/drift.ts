import type { Database } from "../store/db.js";
import { requestOperation } from "../tenants/service.js";
import type { Job } from "./scheduler.js";

/**
 * The drift sweep: a `check-drift` operation (a refresh preview, recorded per project by the reconciler)
 * for every live tenant stack that is not stalled and has no check already waiting. It only enqueues: a
 * stack that an operation is updating is checked after it, through the same queue, never beside it.
 */
export function driftSweepJob(db: Database, intervalMs: number): Job {
  return {
    name: "drift-sweep",
    intervalMs,
    async run() {
      const { rows } = await db.query<{ project_id: string }>(
        `select t.project_id from tenants t left join project_drift d on d.project_id = t.project_id
          where t.state in ('running', 'stopped', 'updating', 'snapshotting', 'restoring')
            and not coalesce(d.stalled, false)
            and not exists (select 1 from operations o where o.project_id = t.project_id
                             and o.kind = 'check-drift' and o.state in ('pending', 'running'))
          order by t.project_id`,
      );
      const enqueued: string[] = [];
      for (const { project_id } of rows) {
        const { created } = await requestOperation(db, project_id, "check-drift");
        if (created) enqueued.push(project_id);
      }
      return { enqueued: enqueued.length };
    },
  };
}
