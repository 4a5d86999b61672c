// Which sandboxes a request wakes (runtime/tenants/wake.ts), on PGlite with the operations queue's own
// claim and finish playing the reconciler's worker (no stack runs here): a stop of the platform's is undone
// once however many wakers come at once, an owner's stop only by a resume that asks for it, and a start that
// fails or does not finish in time is the waker's error. Real sandboxes woken: tests/integration/e2b-control-plane.test.ts.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { wakeAnswer } from "../../runtime/api/wake.js";
import { claimOperation, finishOperation, type Operation } from "../../runtime/store/operations.js";
import { tenantDefaults } from "../../runtime/tenants/config.js";
import { requestOperation } from "../../runtime/tenants/service.js";
import { IDLE_SHUTDOWN, wakeProject, WakeError } from "../../runtime/tenants/wake.js";
import { StackConfig } from "../../stacks/config.js";
import { apiHarness, type ApiHarness } from "../helpers/api.js";
import { testDatabase } from "../helpers/postgres.js";

let h: ApiHarness<"alice">;
let dataDir: string;

/** The worker's part: the next operation claimed and finished as `state`. */
async function work(state: "succeeded" | "failed" = "succeeded"): Promise<Operation> {
  const operation = await claimOperation(h.db, "worker", 60_000, "any");
  if (!operation) throw new Error("no operation to work on");
  await finishOperation(h.db, operation.id, "worker", {
    state,
    error: state === "failed" ? "engine said no" : undefined,
  });
  return operation;
}

const operations = async (id: string) =>
  (
    await h.db.query<Pick<Operation, "kind" | "idempotency_key">>(
      "select kind, idempotency_key from operations where project_id = $1 order by seq",
      [id],
    )
  ).rows;

/** A project made and run: its create worked on. */
async function runningProject(): Promise<string> {
  const made = await h.as("alice", "POST", "/projects", { name: "wake" });
  expect(made.statusCode, made.body).toBe(202);
  await work();
  return (made.json() as { project_id: string }).project_id;
}

beforeAll(async () => {
  dataDir = mkdtempSync(path.join(tmpdir(), "wake-"));
  const config = StackConfig.parse({
    target: "local",
    host: { dataDir },
    tenants: { subnetPool: "10.98.0.0/16" },
  });
  h = await apiHarness({
    database: await testDatabase("pglite", { under: dataDir }),
    config,
    users: ["alice"],
    server: { projects: { defaults: { ...tenantDefaults(config), hostUsage: undefined } } },
  });
}, 120_000);

afterAll(async () => {
  await h?.close();
  rmSync(dataDir, { recursive: true, force: true });
});

describe("waking a sandbox for a request", () => {
  it("wakes one the idle shutdown stopped: three wakers, one start keyed by that stop, each back once it ran", async () => {
    const id = await runningProject();
    expect(await wakeProject(h.db, id, { timeoutMs: 1000 })).toBe(false);
    const { operation: stop } = await requestOperation(h.db, id, "snapshot", `${IDLE_SHUTDOWN}${id}-1`, {
      running: false,
    });
    // While its stop is under way, nothing is woken.
    expect(await wakeProject(h.db, id, { timeoutMs: 1000 })).toBe(false);
    await work();
    const wakers = [1, 2, 3].map(() => wakeProject(h.db, id, { timeoutMs: 30_000 }));
    // Each waker has queued or found the start before the worker takes it.
    await new Promise((resolve) => setTimeout(resolve, 200));
    const started = await work();
    expect(started).toMatchObject({ kind: "start", idempotency_key: `wake-${stop.id}` });
    expect(await Promise.all(wakers)).toEqual([true, true, true]);
    expect((await operations(id)).map((o) => o.kind)).toEqual(["create", "snapshot", "start"]);
    // Awake: nothing more to do.
    expect(await wakeProject(h.db, id, { timeoutMs: 1000 })).toBe(false);
  });

  it("leaves an owner's stop alone unless the request is a resume (anyStop)", async () => {
    const id = await runningProject();
    await requestOperation(h.db, id, "stop");
    await work();
    expect(await wakeProject(h.db, id, { timeoutMs: 1000 })).toBe(false);
    expect((await operations(id)).map((o) => o.kind)).toEqual(["create", "stop"]);
    const resumed = wakeProject(h.db, id, { timeoutMs: 30_000, anyStop: true });
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect((await work()).kind).toBe("start");
    expect(await resumed).toBe(true);
  });

  it("a start that fails, or does not finish in time, is the waker's error naming it", async () => {
    const id = await runningProject();
    await requestOperation(h.db, id, "stop", `e2b-timeout-${id}-1`);
    await work();
    const late = await wakeProject(h.db, id, { timeoutMs: 300 }).catch((error: unknown) => error);
    expect(late).toBeInstanceOf(WakeError);
    expect(late).toMatchObject({
      reason: "timeout",
      message: expect.stringMatching(/start did not finish within 0 s; it goes on/),
    });
    // A second waker finds the same start, still queued, and waits for it; it fails.
    const failing = wakeProject(h.db, id, { timeoutMs: 30_000 }).catch((error: unknown) => error);
    await new Promise((resolve) => setTimeout(resolve, 200));
    await work("failed");
    expect(await failing).toMatchObject({
      reason: "failed",
      message: "the sandbox's start failed: engine said no",
    });
    // As the API answers them: a late start 504 wake_timeout, a failed one 500 wake_failed, each with its message.
    expect(wakeAnswer(late)).toMatchObject({
      status: 504,
      code: "wake_timeout",
      message: (late as Error).message,
    });
    expect(wakeAnswer(await failing)).toMatchObject({
      status: 500,
      code: "wake_failed",
      message: "the sandbox's start failed: engine said no",
    });
    // A failed wake is not repeated by the next request: it answers as a stopped sandbox does.
    expect(await wakeProject(h.db, id, { timeoutMs: 1000 })).toBe(false);
    expect((await operations(id)).filter((o) => o.kind === "start")).toHaveLength(1);
  });
});
