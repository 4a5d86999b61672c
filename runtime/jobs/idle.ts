import type { SandboxBackends } from "../backends/registry.js";
import type { Database } from "../store/db.js";
import { idleShutdownCandidates, recordProjectConnection } from "../store/projects.js";
import { requestOperation } from "../tenants/service.js";
import { IDLE_SHUTDOWN } from "../tenants/wake.js";
import type { Job } from "./scheduler.js";

export interface IdleShutdownOptions {
  /** A running project with no activity for this long is snapshotted and stopped. */
  readonly idleMinutes: number;
  readonly intervalMs: number;
  /** Whether this runtime's terminal proxy holds a live session on the project. */
  readonly liveTerminal: (projectId: string) => boolean;
  /** Each project's backend, which counts the SSH sessions to its sandbox. */
  readonly backends: SandboxBackends;
}

/**
 * The idle shutdown: every running project that opted in, with no live terminal, no SSH session and no
 * activity (created, started, connected, typed) for `idleMinutes`, gets the snapshot-with-stop operation a
 * user could ask for. An SSH session counts as activity now. One request per idle period (its idempotency
 * key is the last activity), never while another operation is pending on the project. A backend that keeps
 * no snapshots is not stopped.
 */
export function idleShutdownJob(db: Database, options: IdleShutdownOptions): Job {
  return {
    name: "idle-shutdown",
    intervalMs: options.intervalMs,
    async run() {
      const rows = await idleShutdownCandidates(db);
      const stopped: string[] = [];
      const deadline = Date.now() - options.idleMinutes * 60_000;
      for (const { id, last_active, spec } of rows) {
        if (options.liveTerminal(id)) continue;
        const backend = options.backends.of(spec);
        // A sandbox that keeps no snapshots (a Pod) is left running: its snapshot could only fail, and a plain
        // stop waits until its SSH gateway's sessions count as activity (docs/kubernetes.md, "Left to do").
        if (!backend.traits.snapshots) continue;
        const sessions = await backend.sshSessions(spec);
        if (sessions > 0) {
          await recordProjectConnection(db, id);
          continue;
        }
        if (new Date(last_active).getTime() > deadline) continue;
        const key = `${IDLE_SHUTDOWN}${id}-${new Date(last_active).getTime()}`;
        const { created } = await requestOperation(db, id, "snapshot", key, { running: false });
        if (created) stopped.push(id);
      }
      return { checked: rows.length, stopped };
    },
  };
}
