import type { EngineEvent } from "@pulumi/pulumi/automation/index.js";
import type { Queryable } from "../store/db.js";

/** One resource a refresh preview found changed behind the stack's back. */
export interface DriftedResource {
  readonly type: string;
  readonly urn: string;
  /** `deleted`: gone out of band; `changed`: `properties` differ from what the stack recorded. */
  readonly change: "deleted" | "changed";
  readonly properties: readonly string[];
}

export type DriftStatus = "clean" | "drifted" | "failed";

export interface DriftRecord {
  readonly project_id: string;
  readonly checked_at: Date;
  readonly status: DriftStatus;
  readonly resources: readonly DriftedResource[];
  readonly error: string | null;
  /** Consecutive checks that could not run; at the platform's limit the project is `stalled`. */
  readonly failures: number;
  readonly stalled: boolean;
}

/** What the platform does about drift: tell the owner, or put the stack's resources back. */
export type DriftRemediation = "report" | "repair";

/** Top-level output names whose values differ (values are not kept: they may be secrets). */
function differingProperties(old: Record<string, unknown>, now: Record<string, unknown>): string[] {
  return [...new Set([...Object.keys(old), ...Object.keys(now)])]
    .filter((key) => JSON.stringify(old[key]) !== JSON.stringify(now[key]))
    .sort();
}

/**
 * The drifted resources in a refresh preview's engine events: a refresh step reports a resource read as
 * changed as `update` (old and new outputs) and one that no longer exists as `delete`.
 */
export function driftedResources(events: readonly EngineEvent[]): DriftedResource[] {
  const found: DriftedResource[] = [];
  for (const event of events) {
    const step = event.resOutputsEvent?.metadata;
    if (!step || (step.op !== "update" && step.op !== "delete")) continue;
    found.push(
      step.op === "delete"
        ? { type: step.type, urn: step.urn, change: "deleted", properties: [] }
        : {
            type: step.type,
            urn: step.urn,
            change: "changed",
            properties: differingProperties(step.old?.outputs ?? {}, step.new?.outputs ?? {}),
          },
    );
  }
  return found;
}

/** Records a check's result; a check that ran resets the failure count (and a stall). */
export async function recordDrift(
  db: Queryable,
  projectId: string,
  resources: readonly DriftedResource[],
): Promise<void> {
  await db.query(
    `insert into project_drift (project_id, checked_at, status, resources, error, failures, stalled)
       values ($1, now(), $2, $3, null, 0, false)
     on conflict (project_id) do update set checked_at = now(), status = excluded.status,
       resources = excluded.resources, error = null, failures = 0, stalled = false`,
    [projectId, resources.length > 0 ? "drifted" : "clean", JSON.stringify(resources)],
  );
}

/** Records a check that could not run; after `stallAfter` in a row the project is marked stalled. */
export async function recordDriftFailure(
  db: Queryable,
  projectId: string,
  error: string,
  stallAfter: number,
): Promise<void> {
  await db.query(
    `insert into project_drift (project_id, checked_at, status, resources, error, failures, stalled)
       values ($1, now(), 'failed', '[]', $2, 1, $3 <= 1)
     on conflict (project_id) do update set checked_at = now(), status = 'failed', error = excluded.error,
       failures = project_drift.failures + 1, stalled = project_drift.failures + 1 >= $3`,
    [projectId, error, stallAfter],
  );
}

export async function getDrift(db: Queryable, projectId: string): Promise<DriftRecord | undefined> {
  return (await db.query<DriftRecord>("select * from project_drift where project_id = $1", [projectId]))
    .rows[0];
}
