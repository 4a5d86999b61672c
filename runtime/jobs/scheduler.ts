import type { Database } from "../store/db.js";
import { recordJobEnd, recordJobStart, tryLeadJob, type JobRun } from "../store/jobs.js";

/** A background job: it looks at the fleet and enqueues operations; it never touches a stack itself. */
export interface Job {
  readonly name: string;
  readonly intervalMs: number;
  /** One run; what it returns is recorded as the run's outcome detail (keep it small). */
  run(): Promise<unknown>;
}

/** The advisory-lock key of a job: one leader per job per database. */
function lockKey(job: string): number {
  let hash = 7_272_760;
  for (const char of job) hash = (hash * 31 + char.charCodeAt(0)) | 0;
  return hash;
}

/**
 * Runs jobs on their intervals, each under exactly one leader per database: on Postgres a run holds a
 * transaction-scoped advisory lock (another runtime's scheduler skips that tick), on PGlite the database is
 * one process's anyway. A run that is still going when its next tick comes is not started twice. Every
 * run's start, duration and outcome go to `job_runs`, which /metrics and operators read.
 */
export class JobScheduler {
  private readonly timers: NodeJS.Timeout[] = [];
  private readonly running = new Map<string, Promise<JobRun | undefined>>();
  private stopped = false;

  constructor(
    private readonly db: Database,
    private readonly jobs: readonly Job[],
    private readonly log?: (message: string, fields?: Record<string, unknown>) => void,
  ) {}

  /** Whether this scheduler runs the job. */
  has(name: string): boolean {
    return this.jobs.some((job) => job.name === name);
  }

  start(): void {
    this.stopped = false;
    for (const job of this.jobs) {
      // A run that cannot even start (the database is down) is logged, never left to crash the process.
      const tick = () =>
        this.runNow(job.name).catch((error: Error) =>
          this.log?.("job could not run", { job: job.name, error: error.message }),
        );
      const timer = setInterval(() => void tick(), job.intervalMs);
      timer.unref();
      this.timers.push(timer);
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    for (const timer of this.timers.splice(0)) clearInterval(timer);
    await Promise.allSettled(this.running.values());
  }

  /**
   * Runs a job now (a tick, or an operator's request). Resolves with the recorded run, or undefined when
   * the job was already running here or another runtime holds its lock: a sweep started twice runs once.
   */
  runNow(name: string): Promise<JobRun | undefined> {
    const job = this.jobs.find((j) => j.name === name);
    if (!job) return Promise.reject(new Error(`no job named ${name}`));
    if (this.stopped) return Promise.resolve(undefined);
    const inFlight = this.running.get(name);
    if (inFlight) return inFlight.then(() => undefined);
    const run = this.lead(job).finally(() => this.running.delete(name));
    this.running.set(name, run);
    return run;
  }

  private async lead(job: Job): Promise<JobRun | undefined> {
    if (this.db.kind === "pglite") return this.record(job);
    return this.db.transaction(async (tx) => {
      // The job's own queries use the pool, not this transaction: it only holds the lock.
      return (await tryLeadJob(tx, lockKey(job.name))) ? this.record(job) : undefined;
    });
  }

  private async record(job: Job): Promise<JobRun> {
    const started = Date.now();
    await recordJobStart(this.db, job.name);
    let outcome: "succeeded" | "failed" = "succeeded";
    let detail: unknown;
    try {
      detail = await job.run();
    } catch (error) {
      outcome = "failed";
      detail = { error: (error as Error).message };
      this.log?.("job failed", { job: job.name, error: (error as Error).message });
    }
    return recordJobEnd(this.db, job.name, { durationMs: Date.now() - started, outcome, detail });
  }
}
