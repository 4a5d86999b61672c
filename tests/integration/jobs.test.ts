// Background jobs (issue 14): one leader per database runs each job, a run started twice runs once, and
// every run's outcome is recorded where operators and /metrics read it. Two schedulers on one Postgres
// stand for two runtimes; PGlite is one process's database.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openDatabase, type Database } from "../../runtime/store/db.js";
import { JobScheduler, type Job } from "../../runtime/jobs/scheduler.js";
import { listJobRuns } from "../../runtime/store/jobs.js";
import { Metrics } from "../../runtime/metrics.js";
import { DATABASE_KINDS, testDatabase, type TestDatabase } from "../helpers/postgres.js";

/** A job whose runs wait until released, counting how many started. */
function gatedJob(name: string) {
  let release!: () => void;
  let gate = new Promise<void>((resolve) => (release = resolve));
  const job = {
    name,
    intervalMs: 3_600_000,
    started: 0,
    async run() {
      job.started += 1;
      await gate;
      return { done: true };
    },
    release() {
      release();
      gate = new Promise<void>((resolve) => (release = resolve));
    },
  };
  return job;
}

describe.each(DATABASE_KINDS)("background jobs on %s", (kind) => {
  let database: TestDatabase;
  let db: Database;
  let other: Database;

  beforeAll(async () => {
    database = await testDatabase(kind);
    db = database.db;
    // A second runtime's connection to the same database (PGlite: the same process's).
    other = database.url ? await openDatabase({ url: database.url, dataDir: database.dir }) : db;
  });

  afterAll(async () => {
    if (other !== db) await other?.close();
    await database?.close();
  });

  it("a run started twice, here or in another runtime, runs once; both see it recorded", async () => {
    const job = gatedJob("sweep");
    const here = new JobScheduler(db, [job]);
    const first = here.runNow("sweep");
    while (job.started === 0) await new Promise((resolve) => setTimeout(resolve, 10));
    const again = here.runNow("sweep");
    // Another runtime on the same Postgres comes back at once: the job's lock is held. (A PGlite database
    // belongs to one process, so there is no other runtime to ask.)
    if (kind === "postgres") expect(await new JobScheduler(other, [job]).runNow("sweep")).toBeUndefined();
    job.release();
    const recorded = await first;
    expect(await again).toBeUndefined();
    expect(job.started).toBe(1);
    expect(recorded).toMatchObject({ job: "sweep", last_outcome: "succeeded", last_detail: { done: true } });
    expect(Number(recorded!.runs)).toBe(1);
    expect((await listJobRuns(other)).map((r) => [r.job, Number(r.runs)])).toEqual([["sweep", 1]]);
  });

  it("a failing run is recorded as failed, the next one goes ahead, and /metrics shows both", async () => {
    let calls = 0;
    const flaky: Job = {
      name: "flaky",
      intervalMs: 3_600_000,
      async run() {
        calls += 1;
        if (calls === 1) throw new Error("the engine is not there");
        return { calls };
      },
    };
    const scheduler = new JobScheduler(db, [flaky]);
    expect(await scheduler.runNow("flaky")).toMatchObject({
      last_outcome: "failed",
      last_detail: { error: "the engine is not there" },
    });
    let text = await new Metrics().render(db);
    expect(text).toContain('agent_sandbox_job_last_succeeded{job="flaky"} 0');
    expect(text).toContain('agent_sandbox_job_failures_total{job="flaky"} 1');
    expect(await scheduler.runNow("flaky")).toMatchObject({ last_outcome: "succeeded" });
    text = await new Metrics().render(db);
    expect(text).toContain('agent_sandbox_job_last_succeeded{job="flaky"} 1');
    expect(text).toContain('agent_sandbox_job_runs_total{job="flaky"} 2');
    expect(text).toMatch(/agent_sandbox_job_last_run_timestamp_seconds\{job="flaky"\} \d{10}/);
    await expect(scheduler.runNow("no-such-job")).rejects.toThrow("no job named no-such-job");
  });
});
