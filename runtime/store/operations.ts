// The operations queue: each change asked of a project (create, stop, snapshot, ...), claimed by one reconciler
// under a lease, with its events. Its table and queries only, below everything that enqueues or runs them.
import { randomUUID } from "node:crypto";
import { EventEmitter } from "node:events";
import type { Queryable } from "./db.js";
import type { TenantState } from "./tenants.js";

export const OPERATION_KINDS = [
  "create",
  "start",
  "stop",
  "update",
  "snapshot",
  "restore",
  "delete",
  "check-drift",
] as const;
export type OperationKind = (typeof OPERATION_KINDS)[number];
export type OperationState = "pending" | "running" | "succeeded" | "failed" | "cancelled";

export interface Operation {
  readonly id: string;
  readonly project_id: string;
  readonly kind: OperationKind;
  readonly state: OperationState;
  readonly idempotency_key: string | null;
  readonly attempt: number;
  readonly lease_owner: string | null;
  readonly lease_expires_at: Date | null;
  readonly cancel_requested: boolean;
  readonly error: string | null;
  readonly result: unknown;
  readonly created_at: Date;
  readonly started_at: Date | null;
  readonly finished_at: Date | null;
  /** Set by a rollout: only a worker running this tenant program version may take the operation. */
  readonly program_version: string | null;
  /**
   * Work nobody waits on (the warm pool's own: a member's create, a drained member's delete, a claim's update
   * that makes no route): taken only when no other operation is runnable, unless a non-background operation
   * of the same project waits behind it.
   */
  readonly background: boolean;
}

/**
 * Records an operation. With an idempotency key, a repeated request returns the operation the first one
 * made instead of adding another.
 */
export async function enqueueOperation(
  db: Queryable,
  projectId: string,
  kind: OperationKind,
  idempotencyKey?: string,
  programVersion?: string,
  options: { readonly background?: boolean } = {},
): Promise<{ operation: Operation; created: boolean }> {
  const id = randomUUID();
  const { rows } = await db.query<Operation>(
    `insert into operations (id, project_id, kind, idempotency_key, program_version, background)
     values ($1, $2, $3, $4, $5, $6)
     on conflict (idempotency_key) do nothing returning *`,
    [id, projectId, kind, idempotencyKey ?? null, programVersion ?? null, options.background ?? false],
  );
  if (rows[0]) return { operation: rows[0], created: true };
  const operation = (await operationByIdempotencyKey(db, idempotencyKey!))!;
  if (operation.project_id !== projectId || operation.kind !== kind) {
    throw new Error(
      `idempotency key ${idempotencyKey} was already used for a ${operation.kind} of ${operation.project_id}`,
    );
  }
  return { operation, created: false };
}

/** The operation a request with this idempotency key made, if one did. */
export async function operationByIdempotencyKey(
  db: Queryable,
  idempotencyKey: string,
): Promise<Operation | undefined> {
  return (await db.query<Operation>("select * from operations where idempotency_key = $1", [idempotencyKey]))
    .rows[0];
}

/** How many settles a background operation waits at most while others keep being queued. */
export const SETTLE_AT_MOST = 10;

/**
 * Takes the next runnable operation: pending, or running under an expired lease (its worker died). Only
 * the oldest open operation of a project can run, so each stack sees one operation at a time, in order.
 * `for update skip locked` lets several reconcilers poll the same table without taking the same row.
 * An operation a rollout queued for a program version is only taken by a worker running that version;
 * until it has run, the project's later operations wait behind it like behind any other.
 * Background operations (the warm pool's own) come after every other runnable one, so a burst of creates
 * beyond the pool runs its users' stacks before the refills nobody waits on; one that a project's other
 * operation waits behind is not background for that. A background operation is also not taken until
 * `settleMs` have passed with no background operation queued: a burst of claims queues an update and a
 * refill for each, and those engines would take the CPU from the burst's own later claims and first
 * commands (tests/bench/interactive.ts). So the burst's operations wait for the burst to end, but none
 * waits more than {@link SETTLE_AT_MOST} settles after it was queued (claims that never stop coming).
 */
export async function claimOperation(
  db: Queryable,
  worker: string,
  leaseMs: number,
  programVersion: string,
  /** Take only operations queued for `programVersion` (a rollout's worker), none of anyone else's. */
  exclusive = false,
  /** A background operation waits this long after it was queued (below); 0: none. */
  settleMs = 0,
): Promise<Operation | undefined> {
  // Most polls find nothing open: this look through the open operations' index costs ~0.3 ms of CPU on
  // PGlite, the claim's query below 1.2-1.8 ms (every poll of every reconciler, twice a second in the runtime).
  const open = await db.query("select 1 from operations where state in ('pending', 'running') limit 1");
  if (open.rows.length === 0) return undefined;
  const { rows } = await db.query<Operation>(
    `with candidate as (
       select o.id from operations o
       -- A user's operation of the project waits behind this one: then it is not background.
       cross join lateral (
         select exists (
           select 1 from operations later
           where later.project_id = o.project_id and later.state = 'pending' and not later.background) as awaited
       ) w
       where (o.state = 'pending' or (o.state = 'running' and o.lease_expires_at < now()))
         and ((o.program_version is null and not $4) or o.program_version = $3)
         and not exists (
           select 1 from operations earlier
           where earlier.project_id = o.project_id
             and earlier.state in ('pending', 'running')
             and earlier.seq < o.seq)
         -- (A pending one is among those "newer" looks at: none within the settle means its own is over.)
         and (not o.background or w.awaited
           or o.created_at <= now() - $5 * interval '1 millisecond' * $6
           or not exists (
             select 1 from operations newer
             where newer.state = 'pending' and newer.background
               and newer.created_at > now() - $5 * interval '1 millisecond'))
       order by o.background and not w.awaited, o.seq
       limit 1
       for update of o skip locked)
     update operations o
        set state = 'running', lease_owner = $1, lease_expires_at = now() + $2 * interval '1 millisecond',
            attempt = o.attempt + 1, started_at = coalesce(o.started_at, now())
       from candidate where o.id = candidate.id
     returning o.*`,
    [worker, leaseMs, programVersion, exclusive, settleMs, SETTLE_AT_MOST],
  );
  return rows[0];
}

/** Extends the lease while the worker is alive; false when the operation is no longer this worker's. */
export async function renewLease(
  db: Queryable,
  id: string,
  worker: string,
  leaseMs: number,
): Promise<boolean> {
  const { rows } = await db.query(
    `update operations set lease_expires_at = now() + $3 * interval '1 millisecond'
     where id = $1 and lease_owner = $2 and state = 'running' returning id`,
    [id, worker, leaseMs],
  );
  return rows.length > 0;
}

/**
 * What happened to the queue in this process, as hints (never the state itself): an operation of a project
 * finished (its id is the event), or operations were queued (`QUEUED`). A reconciler or a request in another
 * process hears none of it; their polls find the same work, later.
 */
const here = new EventEmitter().setMaxListeners(0);
const QUEUED = Symbol("queued");
const FINISHED = Symbol("finished");

/**
 * Operations were queued in this process and committed: this process's reconciler claims now rather than at
 * its next poll. Called after the transaction that enqueued them, never inside it (a claim would not see them).
 */
export function operationsQueued(): void {
  here.emit(QUEUED);
}

/** Calls `listener` when {@link operationsQueued} says work was queued here; returns its removal. */
export function onOperationsQueued(listener: () => void): () => void {
  here.on(QUEUED, listener);
  return () => here.off(QUEUED, listener);
}

/**
 * Calls `listener` when an operation of `projectId` finishes in this process (a request waiting on it reads
 * the queue again at once); returns its removal.
 */
export function onOperationFinished(projectId: string, listener: () => void): () => void {
  here.on(projectId, listener);
  return () => here.off(projectId, listener);
}

/**
 * Resolves once an operation of `projectId` finishes in this process, or after `ms`: a waiter reads the
 * queue again at once, and polls at `ms` for a reconciler in another process.
 */
export function operationFinishedOrAfter(projectId: string, ms: number): Promise<void> {
  return new Promise<void>((resolve) => {
    const done = () => {
      clearTimeout(timer);
      off();
      resolve();
    };
    const timer = setTimeout(done, Math.max(0, ms));
    const off = onOperationFinished(projectId, done);
  });
}

/** Calls `listener` with the project of every operation that finishes in this process; returns its removal. */
export function onAnyOperationFinished(listener: (projectId: string) => void): () => void {
  here.on(FINISHED, listener);
  return () => here.off(FINISHED, listener);
}

export async function finishOperation(
  db: Queryable,
  id: string,
  worker: string,
  outcome: { state: "succeeded" | "failed" | "cancelled"; error?: string; result?: unknown },
): Promise<boolean> {
  const { rows } = await db.query<{ project_id: string }>(
    `update operations set state = $3, error = $4, result = $5, finished_at = now(), lease_expires_at = null
     where id = $1 and lease_owner = $2 and state = 'running' returning project_id`,
    [
      id,
      worker,
      outcome.state,
      outcome.error ?? null,
      outcome.result === undefined ? null : JSON.stringify(outcome.result),
    ],
  );
  if (rows[0]) {
    here.emit(rows[0].project_id);
    here.emit(FINISHED, rows[0].project_id);
  }
  return rows.length > 0;
}

/** Puts a running operation of `worker` back in the queue (its next claim is a new attempt). */
export async function requeueOperation(db: Queryable, id: string, worker: string): Promise<boolean> {
  const { rows } = await db.query(
    `update operations set state = 'pending', lease_owner = null, lease_expires_at = null
     where id = $1 and lease_owner = $2 and state = 'running' returning id`,
    [id, worker],
  );
  return rows.length > 0;
}

/** Cancels a pending operation at once; a running one is asked to stop (its worker aborts the engine). */
export async function cancelOperation(db: Queryable, id: string): Promise<OperationState | undefined> {
  const { rows } = await db.query<{ state: OperationState }>(
    `update operations set
       state = case when state = 'pending' then 'cancelled' else state end,
       finished_at = case when state = 'pending' then now() else finished_at end,
       cancel_requested = state in ('pending', 'running')
     where id = $1 returning state`,
    [id],
  );
  return rows[0]?.state;
}

export async function cancelRequested(db: Queryable, id: string): Promise<boolean> {
  const { rows } = await db.query<{ cancel_requested: boolean }>(
    "select cancel_requested from operations where id = $1",
    [id],
  );
  return rows[0]?.cancel_requested ?? false;
}

/** Idempotency-key prefixes of the stops the platform makes on its own: a request may undo them (wake.ts). */
export const IDLE_SHUTDOWN = "idle-shutdown-";
export const E2B_TIMEOUT = "e2b-timeout-";
export const E2B_PAUSE = "e2b-pause-";
export const PLATFORM_STOPS = [IDLE_SHUTDOWN, E2B_TIMEOUT, E2B_PAUSE] as const;
/** The kinds of operation that set whether a project runs. */
const RUN_CHANGES = "('create', 'start', 'stop', 'snapshot', 'restore')";

/**
 * SQL: true when project `project`'s newest run-changing operation is a finished stop of the platform's
 * (the project is asleep: runtime/tenants/wake.ts).
 */
export const asleepSql = (project: string) => `exists (
  select 1 from (select kind, state, idempotency_key from operations r
                  where r.project_id = ${project} and r.kind in ${RUN_CHANGES} order by r.seq desc limit 1) r
   where r.state = 'succeeded' and r.kind in ('stop', 'snapshot')
     and (${PLATFORM_STOPS.map((prefix) => `r.idempotency_key like '${prefix}%'`).join(" or ")}))`;

/**
 * The project's newest operation that set whether it runs (create, start, stop, snapshot, restore), or
 * undefined. A snapshot may or may not have stopped it: its idempotency key tells whose it was.
 */
export async function newestRunChange(db: Queryable, projectId: string): Promise<Operation | undefined> {
  const { rows } = await db.query<Operation>(
    `select * from operations where project_id = $1 and kind in ${RUN_CHANGES} order by seq desc limit 1`,
    [projectId],
  );
  return rows[0];
}

export async function getOperation(db: Queryable, id: string): Promise<Operation | undefined> {
  return (await db.query<Operation>("select * from operations where id = $1", [id])).rows[0];
}

/** The engine's events, kept as the operation's progress. */
export async function appendEvent(db: Queryable, id: string, seq: number, event: unknown): Promise<void> {
  await db.query("insert into operation_events (operation_id, seq, event) values ($1, $2, $3)", [
    id,
    seq,
    JSON.stringify(event),
  ]);
}

export async function operationEvents(
  db: Queryable,
  id: string,
): Promise<{ seq: number; event: Record<string, unknown> }[]> {
  return (
    await db.query<{ seq: number; event: Record<string, unknown> }>(
      "select seq, event from operation_events where operation_id = $1 order by seq",
      [id],
    )
  ).rows;
}

/** The last event's sequence number of an operation (0 before its first): a new attempt goes on from it. */
export async function lastEventSeq(db: Queryable, id: string): Promise<number> {
  return (
    await db.query<{ n: number }>(
      "select coalesce(max(seq), 0)::int as n from operation_events where operation_id = $1",
      [id],
    )
  ).rows[0]!.n;
}

/** The projects with an operation pending or running. */
export async function projectsWithOpenOperations(db: Queryable): Promise<Set<string>> {
  const { rows } = await db.query<{ project_id: string }>(
    "select distinct project_id from operations where state in ('pending', 'running')",
  );
  return new Set(rows.map((row) => row.project_id));
}

/** How many operations there are of each kind in each state (combinations with none are absent). */
export async function operationCounts(db: Queryable): Promise<{ kind: string; state: string; n: number }[]> {
  return (
    await db.query<{ kind: string; state: string; n: number }>(
      "select kind, state, count(*)::int as n from operations group by kind, state",
    )
  ).rows;
}

/** The queue: how many operations wait for a reconciler, and the oldest one's age in seconds (null: none). */
export async function pendingQueue(db: Queryable): Promise<{ depth: number; oldest: number | null }> {
  return (
    await db.query<{ depth: number; oldest: number | null }>(
      `select count(*)::int as depth,
              extract(epoch from now() - min(created_at))::float8 as oldest
         from operations where state = 'pending'`,
    )
  ).rows[0]!;
}

/** An open operation as the operators' queue shows it. */
export interface OpenOperation {
  readonly id: string;
  readonly project_id: string;
  readonly kind: string;
  readonly state: string;
  readonly attempt: number;
  readonly lease_owner: string | null;
  readonly cancel_requested: boolean;
  readonly created_at: Date;
  readonly started_at: Date | null;
}

/** Every pending or running operation, in the queue's order. */
export async function openOperations(db: Queryable): Promise<OpenOperation[]> {
  const { rows } = await db.query<OpenOperation>(
    `select id, project_id, kind, state, attempt, lease_owner, cancel_requested, created_at, started_at
       from operations where state in ('pending', 'running') order by seq`,
  );
  return rows;
}

/**
 * Where a project's create stands: its tenant's state and its newest create operation's state (null: none);
 * undefined when the project has no tenant.
 */
export async function createProgress(
  db: Queryable,
  projectId: string,
): Promise<{ state: TenantState; op_state: OperationState | null } | undefined> {
  const { rows } = await db.query<{ state: TenantState; op_state: OperationState | null }>(
    `select t.state, (select o.state from operations o where o.project_id = t.project_id and o.kind = 'create'
                        order by o.seq desc limit 1) as op_state
       from tenants t where t.project_id = $1`,
    [projectId],
  );
  return rows[0];
}
