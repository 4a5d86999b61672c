// The `project_drift` table: each project's last drift check, and how many in a row could not run.
import type { Queryable } from "./db.js";

/** One resource a refresh preview found changed behind the stack's back. */
export interface DriftedResource {
  readonly type: string;
  readonly urn: string;
  /** `deleted`: gone out of band; `changed`: `properties` differ from what the stack recorded. */
  readonly change: "deleted" | "changed";
  readonly properties: readonly string[];
}

export type DriftStatus = "clean" | "drifted" | "failed";

/**
 * What a drift check's reads depend on beyond the plugins' own (runtime/tenants/drift-basis.ts): the
 * stack's checkpoint and the Kubernetes objects it names, as the cluster answered for them. Recorded when the
 * engine's refresh found the stack clean and all of this was the same before and after it.
 */
export interface DriftBasis {
  /** SHA-256 (hex) of the checkpoint's bytes. */
  readonly checkpoint: string;
  /** The Pulumi CLI that ran the refresh (`pinnedPulumiVersion`). */
  readonly cli: string;
  /** Digest of the `PULUMI_K8S_*` settings the Kubernetes provider would read from the environment. */
  readonly environment: string;
  /** Each Kubernetes object of the stack, by URN: `<uid>/<resourceVersion>` as the cluster answered. */
  readonly objects: Readonly<Record<string, string>>;
}

export interface DriftRecord {
  readonly project_id: string;
  readonly checked_at: Date;
  readonly status: DriftStatus;
  readonly resources: readonly DriftedResource[];
  readonly error: string | null;
  /** Consecutive checks that could not run; at the platform's limit the project is `stalled`. */
  readonly failures: number;
  readonly stalled: boolean;
  readonly clean_basis: DriftBasis | null;
}

/**
 * Records a check's result; a check that ran resets the failure count (and a stall). `basis`: what the
 * engine's clean refresh saw, for the next pre-check to compare with (`undefined` keeps the recorded one,
 * `null` clears it); a finding of drift always clears it.
 */
export async function recordDrift(
  db: Queryable,
  projectId: string,
  resources: readonly DriftedResource[],
  basis?: DriftBasis | null,
): Promise<void> {
  const drifted = resources.length > 0;
  const keep = basis === undefined && !drifted;
  await db.query(
    `insert into project_drift (project_id, checked_at, status, resources, error, failures, stalled, clean_basis)
       values ($1, now(), $2, $3, null, 0, false, $4)
     on conflict (project_id) do update set checked_at = now(), status = excluded.status,
       resources = excluded.resources, error = null, failures = 0, stalled = false,
       clean_basis = case when $5 then project_drift.clean_basis else excluded.clean_basis end`,
    [
      projectId,
      drifted ? "drifted" : "clean",
      JSON.stringify(resources),
      drifted || !basis ? null : JSON.stringify(basis),
      keep,
    ],
  );
}

/** What the engine's last clean refresh of the project's stack saw, if it is recorded. */
export async function driftBasis(db: Queryable, projectId: string): Promise<DriftBasis | undefined> {
  const { rows } = await db.query<{ clean_basis: DriftBasis | null }>(
    "select clean_basis from project_drift where project_id = $1",
    [projectId],
  );
  return rows[0]?.clean_basis ?? undefined;
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

/**
 * The projects the drift sweep checks, by id: those with a stack up and no check pending or running, less
 * the stalled ones (a person looks at those first).
 */
export async function projectsDueForDriftCheck(db: Queryable): Promise<string[]> {
  const { rows } = await db.query<{ project_id: string }>(
    `select t.project_id from tenants t left join project_drift d on d.project_id = t.project_id
      where t.state in ('running', 'stopped', 'updating', 'snapshotting', 'restoring')
        and not coalesce(d.stalled, false)
        and not exists (select 1 from operations o where o.project_id = t.project_id
                         and o.kind = 'check-drift' and o.state in ('pending', 'running'))
      order by t.project_id`,
  );
  return rows.map((row) => row.project_id);
}

/** Live projects whose last check found drift, could not run, or that are stalled. */
export async function driftCounts(
  db: Queryable,
): Promise<{ drifted: number; failed: number; stalled: number }> {
  const { rows } = await db.query<{ drifted: number; failed: number; stalled: number }>(
    `select count(*) filter (where d.status = 'drifted')::int as drifted,
            count(*) filter (where d.status = 'failed')::int as failed,
            count(*) filter (where d.stalled)::int as stalled
       from project_drift d join tenants t on t.project_id = d.project_id where t.state <> 'deleted'`,
  );
  return rows[0] ?? { drifted: 0, failed: 0, stalled: 0 };
}

/** Clears the project's stall and its count of failed checks, so the sweep checks it again. */
export async function clearDriftStall(db: Queryable, projectId: string): Promise<void> {
  await db.query("update project_drift set stalled = false, failures = 0 where project_id = $1", [projectId]);
}
