import type { SandboxBackends } from "../backends/registry.js";
import type { Database } from "../store/db.js";
import { idleShutdownCandidates, recordProjectConnection } from "../store/projects.js";
import { staleMemoryImages } from "../store/tenants.js";
import { requestOperation } from "../tenants/service.js";
import { IDLE_SHUTDOWN } from "../tenants/wake.js";
import type { Job } from "./scheduler.js";

export interface IdleShutdownOptions {
  /** A running project with no activity for this long is snapshotted and paused (or stopped). */
  readonly idleMinutes: number;
  readonly intervalMs: number;
  /** Whether this runtime's terminal proxy holds a live session on the project. */
  readonly liveTerminal: (projectId: string) => boolean;
  /** Each project's backend, which counts the SSH sessions to its sandbox. */
  readonly backends: SandboxBackends;
}

/**
 * The idle shutdown: every running project whose idle action is not `none`, with no live terminal, no SSH
 * session and no activity (created, started, connected, typed) for `idleMinutes`, gets the
 * snapshot-with-stop operation a user could ask for: a pause (its memory kept where the backend can, a
 * microVM's) or, for `stop`, with its memory dropped. An SSH session counts as activity. One request per
 * idle period (its idempotency key is the last activity), never while another operation is pending on the
 * project. A backend that keeps no snapshots is not stopped. Either way the project is asleep: the next
 * request that needs it wakes it (runtime/tenants/wake.ts).
 */
export function idleShutdownJob(db: Database, options: IdleShutdownOptions): Job {
  return {
    name: "idle-shutdown",
    intervalMs: options.intervalMs,
    async run() {
      const rows = await idleShutdownCandidates(db);
      const stopped: string[] = [];
      const deadline = Date.now() - options.idleMinutes * 60_000;
      for (const { id, idle_action, last_active, spec } of rows) {
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
        const { created } = await requestOperation(db, id, "snapshot", key, {
          running: false,
          keepMemory: idle_action === "pause",
        });
        if (created) stopped.push(id);
      }
      return { checked: rows.length, stopped };
    },
  };
}

/** The prefix of a memory retention's update: one per kept image (its save time in the key). */
export const MEMORY_RETENTION = "memory-retention-";

/**
 * Memory images are kept like snapshots, not forever: a sandbox paused with its memory for longer than
 * `retentionHours` has its image dropped by an update of its stack (the spec's `keepMemory` false: the
 * provider removes the file), its disks kept. It stays asleep; its next start boots from its disks. Zero
 * keeps images until the next start.
 */
export function memoryRetentionJob(db: Database, retentionHours: number, intervalMs: number): Job {
  return {
    name: "memory-retention",
    intervalMs,
    async run() {
      if (retentionHours <= 0) return { dropped: [] };
      const dropped: string[] = [];
      for (const { project_id, saved_at } of await staleMemoryImages(db, retentionHours)) {
        const key = `${MEMORY_RETENTION}${project_id}-${Date.parse(saved_at)}`;
        const { created } = await requestOperation(db, project_id, "update", key, { keepMemory: false });
        if (created) dropped.push(project_id);
      }
      return { dropped };
    },
  };
}
