import type { Database } from "../store/db.js";
import { projectsDueForDriftCheck } from "../store/drift.js";
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
      const due = await projectsDueForDriftCheck(db);
      const enqueued: string[] = [];
      for (const projectId of due) {
        const { created } = await requestOperation(db, projectId, "check-drift");
        if (created) enqueued.push(projectId);
      }
      return { enqueued: enqueued.length };
    },
  };
}
