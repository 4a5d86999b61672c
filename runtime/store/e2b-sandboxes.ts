// The `e2b_sandboxes` table: the projects made through the E2B-compatible API (api/e2b/), with what the SDK
// asked for (template, metadata, environment) and when each one's timeout ends.
import type { Queryable } from "./db.js";

/** An E2B sandbox whose project is not deleted, with its owner and its tenant's state. */
export interface E2bSandboxRow {
  readonly project_id: string;
  readonly owner_id: string;
  readonly template: string;
  readonly metadata: Record<string, string>;
  readonly env_vars: Record<string, string>;
  readonly timeout_at: Date;
  readonly on_timeout: "kill" | "pause";
  /** Paused, it is woken by its envd's traffic (E2B's `autoResume`). */
  readonly auto_resume: boolean;
  readonly created_at: Date;
  readonly state: string;
}

const SANDBOX_QUERY = `
  select e.project_id, p.user_id as owner_id, e.template, e.metadata, e.env_vars, e.timeout_at, e.on_timeout,
         e.auto_resume, e.created_at, t.state
    from e2b_sandboxes e join projects p on p.id = e.project_id join tenants t on t.project_id = e.project_id`;

/** The live E2B sandbox with this id (any owner's: the caller checks whose it is); undefined for none. */
export async function liveE2bSandbox(db: Queryable, id: string): Promise<E2bSandboxRow | undefined> {
  const { rows } = await db.query<E2bSandboxRow>(
    `${SANDBOX_QUERY} where e.project_id = $1 and t.state <> 'deleted'`,
    [id],
  );
  return rows[0];
}

/** What a create records beside its project, in the same transaction. */
export interface NewE2bSandbox {
  readonly projectId: string;
  readonly template: string;
  readonly metadata: Record<string, string>;
  readonly envVars: Record<string, string>;
  readonly timeoutSeconds: number;
  readonly onTimeout: "kill" | "pause";
  readonly autoResume: boolean;
}

export async function recordE2bSandbox(tx: Queryable, sandbox: NewE2bSandbox): Promise<void> {
  await tx.query(
    `insert into e2b_sandboxes (project_id, template, metadata, env_vars, timeout_at, on_timeout, auto_resume)
     values ($1, $2, $3, $4, now() + make_interval(secs => $5), $6, $7)`,
    [
      sandbox.projectId,
      sandbox.template,
      JSON.stringify(sandbox.metadata),
      JSON.stringify(sandbox.envVars),
      sandbox.timeoutSeconds,
      sandbox.onTimeout,
      sandbox.autoResume,
    ],
  );
}

/** An E2B sandbox as the control plane answers it: its row and what its tenant's spec says of its size. */
export interface E2bSandboxView extends E2bSandboxRow {
  /** The desired state: false once stopped (an auto-pause) and until started again. */
  readonly running: boolean;
  readonly cpus: number | null;
  readonly memory_mib: number | null;
  readonly home_bytes: number | null;
}

// What the SDK sees: not deleted, and no delete asked for (a kill takes effect for the SDK at once, while
// the reconciler takes the stack down behind it).
const VIEW_QUERY = `
  select e.project_id, p.user_id as owner_id, e.template, e.metadata, e.env_vars, e.timeout_at, e.on_timeout,
         e.auto_resume, e.created_at, t.state, coalesce((t.spec->>'running')::boolean, true) as running,
         (t.spec->'limits'->>'cpus')::float8 as cpus, (t.spec->'limits'->>'memoryMiB')::int as memory_mib,
         (t.spec->>'homeBytes')::float8 as home_bytes
    from e2b_sandboxes e join projects p on p.id = e.project_id join tenants t on t.project_id = e.project_id
   where t.state not in ('deleted', 'deleting')
     and not exists (select 1 from operations o where o.project_id = e.project_id and o.kind = 'delete')`;

/** The owner's E2B sandbox with this id; undefined for none, one being killed, or another user's. */
export async function ownE2bSandbox(
  db: Queryable,
  ownerId: string,
  id: string,
): Promise<E2bSandboxView | undefined> {
  const { rows } = await db.query<E2bSandboxView>(`${VIEW_QUERY} and e.project_id = $1 and p.user_id = $2`, [
    id,
    ownerId,
  ]);
  return rows[0];
}

/** A listing's order: creation to the millisecond (what a cursor's JavaScript date holds), then id. */
const CREATED_MS = "date_trunc('milliseconds', e.created_at)";

/** Where a page of a listing starts: after the sandbox made at `createdAt` with this id. */
export interface E2bListCursor {
  readonly createdAt: string;
  readonly id: string;
}

export interface E2bListFilter {
  /** Every pair must be in the sandbox's metadata. */
  readonly metadata: Record<string, string>;
  /** Running (desired running), paused (stopped), or both. */
  readonly states: readonly ("running" | "paused")[];
  readonly after?: E2bListCursor;
  readonly limit: number;
}

/** One page of the owner's E2B sandboxes, oldest first; one row more than `limit` says another page follows. */
export async function listE2bSandboxes(
  db: Queryable,
  ownerId: string,
  filter: E2bListFilter,
): Promise<E2bSandboxView[]> {
  const running = filter.states.map((state) => state === "running");
  const { rows } = await db.query<E2bSandboxView>(
    `${VIEW_QUERY} and p.user_id = $1 and e.metadata @> $2::jsonb
       and coalesce((t.spec->>'running')::boolean, true) = any($3::boolean[])
       and ($4::timestamptz is null or (${CREATED_MS}, e.project_id) > ($4::timestamptz, $5::text))
     order by ${CREATED_MS}, e.project_id limit $6`,
    [
      ownerId,
      JSON.stringify(filter.metadata),
      running,
      filter.after?.createdAt ?? null,
      filter.after?.id ?? "",
      filter.limit + 1,
    ],
  );
  return rows;
}

/**
 * Moves the sandbox's timeout to `seconds` from now (`extendOnly`: only when that is later than it is), and
 * answers the sandbox as it is then; undefined when it is not the owner's live sandbox.
 */
export async function setE2bTimeout(
  db: Queryable,
  ownerId: string,
  id: string,
  seconds: number,
  extendOnly = false,
): Promise<E2bSandboxView | undefined> {
  await db.query(
    `update e2b_sandboxes e set timeout_at = ${
      extendOnly
        ? "greatest(e.timeout_at, now() + make_interval(secs => $3))"
        : "now() + make_interval(secs => $3)"
    } from projects p where p.id = e.project_id and e.project_id = $1 and p.user_id = $2`,
    [id, ownerId, seconds],
  );
  return ownE2bSandbox(db, ownerId, id);
}

/** The live E2B sandboxes past their timeout that are still to be killed, or to be stopped (auto-pause). */
export async function expiredE2bSandboxes(db: Queryable): Promise<E2bSandboxView[]> {
  const { rows } = await db.query<E2bSandboxView>(
    `${VIEW_QUERY} and e.timeout_at <= now()
       and (e.on_timeout = 'kill' or coalesce((t.spec->>'running')::boolean, true))
     order by e.timeout_at`,
  );
  return rows;
}
