// The operations table's rules, on both databases: order per stack, one at a time per stack, leases,
// idempotency keys, cancellation. (The reconciler test runs them against real stacks.)
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import type { Database } from "../../runtime/store/db.js";
import { migrate, MIGRATIONS } from "../../runtime/store/migrations.js";
import { DATABASE_KINDS, testDatabase, type TestDatabase } from "../helpers/postgres.js";
import {
  cancelOperation,
  claimOperation,
  enqueueOperation,
  finishOperation,
  getOperation,
  onOperationFinished,
  renewLease,
  SETTLE_AT_MOST,
} from "../../runtime/store/operations.js";

/** The tenant program versions of two workers (a running runtime and a rollout of a newer checkout). */
const [V1, V2] = ["sha256:1111111111111111", "sha256:2222222222222222"];

describe.each(DATABASE_KINDS)("operations on %s", (kind) => {
  let database: TestDatabase;
  let db: Database;

  beforeAll(async () => {
    // Claims look at the whole table: this file gets a database of its own (migrated below).
    database = await testDatabase(kind, { migrate: false });
    db = database.db;
    expect(await migrate(db)).toEqual(MIGRATIONS.map((m) => m.version));
    expect(await migrate(db)).toEqual([]); // applied once only
  });

  afterAll(() => database?.close());

  beforeEach(async () => {
    await db.query("delete from operation_events");
    await db.query("delete from operations");
    await db.query("delete from tenants");
    for (const project of ["p1", "p2", "p3"]) {
      await db.query("insert into tenants (project_id, owner_id, spec) values ($1, 'u', '{}')", [project]);
    }
  });

  it("runs one operation per stack at a time, in order, while other stacks proceed", async () => {
    const first = (await enqueueOperation(db, "p1", "create")).operation;
    const second = (await enqueueOperation(db, "p1", "stop")).operation;
    const other = (await enqueueOperation(db, "p2", "create")).operation;

    expect((await claimOperation(db, "w1", 60_000, V1))?.id).toBe(first.id);
    expect((await claimOperation(db, "w2", 60_000, V1))?.id).toBe(other.id); // p1's stop waits for its create
    expect(await claimOperation(db, "w3", 60_000, V1)).toBeUndefined();

    expect(await finishOperation(db, first.id, "w1", { state: "succeeded", result: { ok: true } })).toBe(
      true,
    );
    expect((await claimOperation(db, "w3", 60_000, V1))?.id).toBe(second.id);
    expect(await getOperation(db, first.id)).toMatchObject({
      state: "succeeded",
      result: { ok: true },
      lease_expires_at: null,
    });
  });

  it("an operation a rollout queued for a program version runs only on a worker of that version, and the project's later operations wait behind it", async () => {
    const rollout = (await enqueueOperation(db, "p1", "update", undefined, V2)).operation;
    const after = (await enqueueOperation(db, "p1", "stop")).operation;
    const other = (await enqueueOperation(db, "p2", "start")).operation;
    expect(rollout.program_version).toBe(V2);

    expect(await claimOperation(db, "rollout", 60_000, V2, true)).toMatchObject({ id: rollout.id });
    await renewLease(db, rollout.id, "rollout", 1); // expires at once: claimed again below
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect((await claimOperation(db, "runtime", 60_000, V1))?.id).toBe(other.id);
    expect(await claimOperation(db, "runtime", 60_000, V1)).toBeUndefined(); // not the rollout's, not p1's stop
    expect(await claimOperation(db, "rollout", 60_000, V2, true)).toMatchObject({ id: rollout.id });
    expect(await claimOperation(db, "rollout", 60_000, V2, true)).toBeUndefined(); // never p2's or p1's stop
    await finishOperation(db, rollout.id, "rollout", { state: "succeeded" });
    expect((await claimOperation(db, "runtime", 60_000, V1))?.id).toBe(after.id);
  });

  it("background operations (the warm pool's own) run after every other runnable one, unless another of their project's waits behind them", async () => {
    const refill = (await enqueueOperation(db, "p1", "create", undefined, undefined, { background: true }))
      .operation;
    const drain = (await enqueueOperation(db, "p2", "delete", undefined, undefined, { background: true }))
      .operation;
    const user = (await enqueueOperation(db, "p3", "create")).operation;
    expect([refill.background, drain.background, user.background]).toEqual([true, true, false]);
    // Queued last, taken first; then the background ones in their order.
    expect((await claimOperation(db, "w1", 60_000, V1))?.id).toBe(user.id);
    expect((await claimOperation(db, "w1", 60_000, V1))?.id).toBe(refill.id);
    expect((await claimOperation(db, "w1", 60_000, V1))?.id).toBe(drain.id);
    for (const op of [user, refill, drain]) await finishOperation(db, op.id, "w1", { state: "succeeded" });

    // A background create that a project's own stop waits behind is no longer background: it goes in its
    // order, before a user's create queued after it.
    const held = (await enqueueOperation(db, "p1", "update", undefined, undefined, { background: true }))
      .operation;
    const behind = (await enqueueOperation(db, "p1", "stop")).operation;
    const later = (await enqueueOperation(db, "p3", "stop")).operation;
    expect((await claimOperation(db, "w1", 60_000, V1))?.id).toBe(held.id);
    expect((await claimOperation(db, "w1", 60_000, V1))?.id).toBe(later.id); // p1's stop waits for its update
    await finishOperation(db, held.id, "w1", { state: "succeeded" });
    expect((await claimOperation(db, "w1", 60_000, V1))?.id).toBe(behind.id);
  });

  it("a background operation waits its settle after it was queued (a burst's first commands go first); a user's does not, nor one a user's waits behind", async () => {
    const SETTLE = 600;
    const refill = (await enqueueOperation(db, "p1", "create", undefined, undefined, { background: true }))
      .operation;
    const update = (await enqueueOperation(db, "p2", "update", undefined, undefined, { background: true }))
      .operation;
    const user = (await enqueueOperation(db, "p3", "create")).operation;
    expect((await claimOperation(db, "w1", 60_000, V1, false, SETTLE))?.id).toBe(user.id);
    expect(await claimOperation(db, "w1", 60_000, V1, false, SETTLE)).toBeUndefined(); // both still settling
    // A user's stop of p2 queued behind its update: the update is no longer background, so it goes now.
    const stop = (await enqueueOperation(db, "p2", "stop")).operation;
    expect((await claimOperation(db, "w1", 60_000, V1, false, SETTLE))?.id).toBe(update.id);
    expect(await claimOperation(db, "w1", 60_000, V1, false, SETTLE)).toBeUndefined();
    // Once the settle has passed since the refill was queued, it is taken like any background operation.
    const queued = (await getOperation(db, refill.id))!.created_at.getTime();
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, queued + SETTLE + 50 - Date.now())));
    expect((await claimOperation(db, "w1", 60_000, V1, false, SETTLE))?.id).toBe(refill.id);
    // Without a settle (the store's default) nothing waits.
    await finishOperation(db, update.id, "w1", { state: "succeeded" });
    const next = (await enqueueOperation(db, "p3", "delete", undefined, undefined, { background: true }))
      .operation;
    await finishOperation(db, user.id, "w1", { state: "succeeded" });
    expect((await claimOperation(db, "w1", 60_000, V1))?.id).toBe(stop.id);
    expect((await claimOperation(db, "w1", 60_000, V1))?.id).toBe(next.id);
  });

  it("a burst's background operations wait until none has been queued for a settle, and at most SETTLE_AT_MOST settles", async () => {
    // Ages are set in the table, so nothing here waits: a settle of a minute.
    const SETTLE = 60_000;
    const age = (id: string, ms: number) =>
      db.query("update operations set created_at = now() - $2 * interval '1 millisecond' where id = $1", [
        id,
        ms,
      ]);
    const background = async (project: string) =>
      (await enqueueOperation(db, project, "update", undefined, undefined, { background: true })).operation;
    const first = await background("p1");
    const next = await background("p2");
    await age(first.id, SETTLE + 1_000); // its own settle is over,
    await age(next.id, SETTLE - 1_000); // but the burst went on: another was queued within the settle
    expect(await claimOperation(db, "w1", 60_000, V1, false, SETTLE)).toBeUndefined();
    await age(next.id, SETTLE + 500); // the burst over: the oldest first
    expect((await claimOperation(db, "w1", 60_000, V1, false, SETTLE))?.id).toBe(first.id);
    expect((await claimOperation(db, "w1", 60_000, V1, false, SETTLE))?.id).toBe(next.id);
    await finishOperation(db, first.id, "w1", { state: "succeeded" });
    await finishOperation(db, next.id, "w1", { state: "succeeded" });
    // Claims that never stop coming: one queued a moment ago holds an older one SETTLE_AT_MOST settles at most.
    const old = await background("p1");
    await background("p3");
    await age(old.id, SETTLE * SETTLE_AT_MOST - 1_000);
    expect(await claimOperation(db, "w1", 60_000, V1, false, SETTLE)).toBeUndefined();
    await age(old.id, SETTLE * SETTLE_AT_MOST + 1_000);
    expect((await claimOperation(db, "w1", 60_000, V1, false, SETTLE))?.id).toBe(old.id);
    expect(await claimOperation(db, "w1", 60_000, V1, false, SETTLE)).toBeUndefined(); // p3's is in its own settle
  });

  it("a lease not renewed in time hands the operation to another worker; the old one can no longer finish it", async () => {
    const op = (await enqueueOperation(db, "p1", "create")).operation;
    // A lease of 1.5 s: the next query must come within it, which a 150 ms lease did not always get beside
    // the suite's other files (session 59's run).
    expect(await claimOperation(db, "dead", 1_500, V1)).toMatchObject({
      id: op.id,
      attempt: 1,
      lease_owner: "dead",
    });
    expect(await claimOperation(db, "alive", 60_000, V1)).toBeUndefined(); // lease still valid
    await new Promise((resolve) => setTimeout(resolve, 1_700));
    expect(await claimOperation(db, "alive", 60_000, V1)).toMatchObject({
      id: op.id,
      attempt: 2,
      lease_owner: "alive",
    });
    expect(await renewLease(db, op.id, "dead", 60_000)).toBe(false);
    expect(await finishOperation(db, op.id, "dead", { state: "failed", error: "late" })).toBe(false);
    expect(await renewLease(db, op.id, "alive", 60_000)).toBe(true);
    expect(await finishOperation(db, op.id, "alive", { state: "succeeded" })).toBe(true);
  });

  it("a finish that took wakes this process's waiters on its project only; a late one wakes no one", async () => {
    const woken: string[] = [];
    const offs = ["p1", "p2"].map((project) => onOperationFinished(project, () => woken.push(project)));
    const op = (await enqueueOperation(db, "p1", "create")).operation;
    await claimOperation(db, "w", 60_000, V1);
    expect(await finishOperation(db, op.id, "other", { state: "succeeded" })).toBe(false);
    expect(woken).toEqual([]);
    expect(await finishOperation(db, op.id, "w", { state: "succeeded" })).toBe(true);
    expect(woken).toEqual(["p1"]);
    expect(await finishOperation(db, op.id, "w", { state: "failed" })).toBe(false); // finished already
    for (const off of offs) off();
    const again = (await enqueueOperation(db, "p1", "stop")).operation;
    await claimOperation(db, "w", 60_000, V1);
    await finishOperation(db, again.id, "w", { state: "succeeded" });
    expect(woken).toEqual(["p1"]); // removed: not called again
  });

  it("an idempotency key returns the first operation; reused for another request it is refused", async () => {
    const a = await enqueueOperation(db, "p1", "create", "key-1");
    const b = await enqueueOperation(db, "p1", "create", "key-1");
    expect(a.created).toBe(true);
    expect(b).toMatchObject({ created: false, operation: { id: a.operation.id } });
    await expect(enqueueOperation(db, "p2", "create", "key-1")).rejects.toThrow(
      "idempotency key key-1 was already used for a create of p1",
    );
    expect((await db.query("select count(*)::int as n from operations")).rows[0]).toEqual({ n: 1 });
  });

  it("cancelling a pending operation ends it before it runs; a running one is flagged for its worker", async () => {
    const running = (await enqueueOperation(db, "p1", "create")).operation;
    const pending = (await enqueueOperation(db, "p1", "delete")).operation;
    await claimOperation(db, "w", 60_000, V1);
    expect(await cancelOperation(db, pending.id)).toBe("cancelled");
    expect(await cancelOperation(db, running.id)).toBe("running");
    expect(await getOperation(db, running.id)).toMatchObject({ state: "running", cancel_requested: true });
    await finishOperation(db, running.id, "w", { state: "cancelled", error: "cancelled" });
    expect(await claimOperation(db, "w", 60_000, V1)).toBeUndefined(); // the cancelled delete never runs
    expect(await cancelOperation(db, "no-such-operation")).toBeUndefined();
  });

  it("refuses operations of unknown kinds and of unknown projects", async () => {
    await expect(
      db.query("insert into operations (id, project_id, kind) values ('x', 'p1', 'explode')"),
    ).rejects.toThrow(/check/i);
    await expect(enqueueOperation(db, "nobody", "create")).rejects.toThrow(/foreign key/i);
  });
});
