// The `job_runs` table: each background job's last run and its counts; and the lock that makes one runtime
// the leader of a job's run.
import type { Queryable } from "./db.js";

export interface JobRun {
  readonly job: string;
  readonly last_started_at: Date | null;
  readonly last_finished_at: Date | null;
  readonly last_duration_ms: number | null;
  readonly last_outcome: "succeeded" | "failed" | null;
  readonly last_detail: unknown;
  readonly runs: number;
  readonly failures: number;
}

/** A job's last run as /metrics reports it: times in seconds since the epoch. */
export interface JobRunFigures {
  readonly job: string;
  readonly finished: number | null;
  readonly duration_ms: number | null;
  readonly ok: boolean | null;
  readonly runs: number;
  readonly failures: number;
}

/**
 * Takes the job's transaction-scoped advisory lock if no one holds it: true when this transaction leads the
 * run (it holds the lock until it ends), false when another runtime does.
 */
export async function tryLeadJob(tx: Queryable, lockKey: number): Promise<boolean> {
  const { rows } = await tx.query<{ leader: boolean }>("select pg_try_advisory_xact_lock($1) as leader", [
    lockKey,
  ]);
  return rows[0]?.leader ?? false;
}

export async function recordJobStart(db: Queryable, job: string): Promise<void> {
  await db.query(
    `insert into job_runs (job, last_started_at) values ($1, now())
       on conflict (job) do update set last_started_at = now()`,
    [job],
  );
}

export async function recordJobEnd(
  db: Queryable,
  job: string,
  end: { durationMs: number; outcome: "succeeded" | "failed"; detail: unknown },
): Promise<JobRun> {
  const { rows } = await db.query<JobRun>(
    `update job_runs set last_finished_at = now(), last_duration_ms = $2, last_outcome = $3,
            last_detail = $4, runs = runs + 1, failures = failures + case when $3 = 'failed' then 1 else 0 end
      where job = $1 returning *`,
    [job, end.durationMs, end.outcome, JSON.stringify(end.detail ?? null)],
  );
  return rows[0]!;
}

export async function listJobRuns(db: Queryable): Promise<JobRun[]> {
  return (await db.query<JobRun>("select * from job_runs order by job")).rows;
}

export async function jobRunFigures(db: Queryable): Promise<JobRunFigures[]> {
  return (
    await db.query<JobRunFigures>(
      `select job, extract(epoch from last_finished_at)::float8 as finished, last_duration_ms as duration_ms,
              last_outcome = 'succeeded' as ok, runs::int, failures::int from job_runs order by job`,
    )
  ).rows;
}
