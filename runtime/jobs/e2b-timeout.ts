import type { Database } from "../store/db.js";
import { expiredE2bSandboxes } from "../store/e2b-sandboxes.js";
import { requestOperation } from "../tenants/service.js";
import { E2B_TIMEOUT } from "../tenants/wake.js";
import type { Job } from "./scheduler.js";

/**
 * E2B's timeout: every E2B sandbox past its `timeout_at` is deleted (its project's ordinary delete), or,
 * where the SDK asked to auto-pause, stopped as a user's stop stops it: the container (or microVM) is
 * stopped, not removed, so its filesystem and home are kept and its memory is not. One request per sandbox
 * and timeout: its idempotency key is the timeout, so a tick that finds it again while the request waits
 * adds nothing.
 */
export function e2bTimeoutJob(db: Database, intervalMs: number): Job {
  return {
    name: "e2b-timeout",
    intervalMs,
    async run() {
      const killed: string[] = [];
      const paused: string[] = [];
      for (const sandbox of await expiredE2bSandboxes(db)) {
        const id = sandbox.project_id;
        const key = `${E2B_TIMEOUT}${id}-${sandbox.timeout_at.getTime()}`;
        const pause = sandbox.on_timeout === "pause";
        const { created } = await requestOperation(db, id, pause ? "stop" : "delete", key);
        if (created) (pause ? paused : killed).push(id);
      }
      return { killed, paused };
    },
  };
}
