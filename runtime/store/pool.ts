// The `pool_members` table: the warm pool's tenants, each with the class it was made for, when its first
// command ran (ready), and, once handed out, to whom and when.
import type { TenantSpec } from "../../components/tenant/spec.js";
import type { Queryable } from "./db.js";

/** An unclaimed member with its tenant's state, as a refill judges it. */
export interface UnclaimedMember {
  readonly project_id: string;
  readonly class: string;
  readonly state: string;
  readonly last_error: string | null;
}

export async function addPoolMember(tx: Queryable, projectId: string, memberClass: string): Promise<void> {
  await tx.query("insert into pool_members (project_id, class) values ($1, $2)", [projectId, memberClass]);
}

/**
 * Locks the oldest ready member of `memberClass` until the transaction ends: unclaimed, its stack up (running,
 * still `owner`'s, no operation pending or running) and its first command run (`ready_at`). `skip locked`
 * lets concurrent claims each take another.
 */
export async function lockReadyMember(
  tx: Queryable,
  memberClass: string,
  owner: string,
): Promise<{ project_id: string; spec: TenantSpec } | undefined> {
  const { rows } = await tx.query<{ project_id: string; spec: TenantSpec }>(
    `select m.project_id, t.spec from pool_members m join tenants t on t.project_id = m.project_id
      where m.claimed_at is null and m.class = $1 and t.state = 'running' and t.owner_id = $2
        and m.ready_at is not null
        and not exists (select 1 from operations o where o.project_id = m.project_id
                         and o.state in ('pending', 'running'))
      order by m.created_at, m.project_id limit 1
      for update of m skip locked`,
    [memberClass, owner],
  );
  return rows[0];
}

/**
 * Unclaimed members of `memberClass` whose stack is up (running, still `owner`'s, no operation pending or
 * running) and whose first command has not been run yet: what the pool checks before it hands one out.
 */
export async function uncheckedMembers(tx: Queryable, memberClass: string, owner: string): Promise<string[]> {
  const { rows } = await tx.query<{ project_id: string }>(
    `select m.project_id from pool_members m join tenants t on t.project_id = m.project_id
      where m.claimed_at is null and m.class = $1 and t.state = 'running' and t.owner_id = $2
        and m.ready_at is null
        and not exists (select 1 from operations o where o.project_id = m.project_id
                         and o.state in ('pending', 'running'))
      order by m.created_at, m.project_id`,
    [memberClass, owner],
  );
  return rows.map((row) => row.project_id);
}

/** Locks the member until the transaction ends if it is still unclaimed and unchecked; whether it was. */
export async function lockUncheckedMember(tx: Queryable, projectId: string): Promise<boolean> {
  const { rows } = await tx.query(
    "select 1 from pool_members where project_id = $1 and claimed_at is null and ready_at is null for update",
    [projectId],
  );
  return rows.length > 0;
}

/** The member's first command ran: it may be handed out (nothing when it was claimed or drained meanwhile). */
export async function markMemberReady(tx: Queryable, projectId: string): Promise<boolean> {
  const { rows } = await tx.query(
    "update pool_members set ready_at = now() where project_id = $1 and claimed_at is null returning 1",
    [projectId],
  );
  return rows.length > 0;
}

export async function markMemberClaimed(tx: Queryable, projectId: string, ownerId: string): Promise<void> {
  await tx.query("update pool_members set claimed_at = now(), claimed_by = $2 where project_id = $1", [
    projectId,
    ownerId,
  ]);
}

/**
 * The unclaimed members, newest first, as this transaction sees them: read without a lock, since a lock on
 * each (what a refill once took) hid every ready member from the claims running meanwhile, which then made
 * cold creates (on Postgres, where the two overlap). One a claim holds still shows here until it commits.
 */
export async function unclaimedMembers(tx: Queryable): Promise<UnclaimedMember[]> {
  return (
    await tx.query<UnclaimedMember>(
      `select m.project_id, m.class, t.state, t.last_error from pool_members m
         join tenants t on t.project_id = m.project_id
        where m.claimed_at is null order by m.created_at desc, m.project_id`,
    )
  ).rows;
}

/**
 * Locks those of `projectIds` that are still unclaimed and that no other transaction holds (a claim under
 * way), until the transaction ends; answers the ones it locked.
 */
export async function lockUnclaimed(tx: Queryable, projectIds: readonly string[]): Promise<Set<string>> {
  if (projectIds.length === 0) return new Set();
  const { rows } = await tx.query<{ project_id: string }>(
    `select project_id from pool_members where project_id = any($1::text[]) and claimed_at is null
      for update skip locked`,
    [projectIds],
  );
  return new Set(rows.map((r) => r.project_id));
}

export async function removePoolMember(tx: Queryable, projectId: string): Promise<void> {
  await tx.query("delete from pool_members where project_id = $1", [projectId]);
}

/**
 * Unclaimed members by their tenant's state; one whose stack is up but whose first command has not run yet
 * is `checking`.
 */
export async function unclaimedMemberCounts(db: Queryable): Promise<{ state: string; n: number }[]> {
  return (
    await db.query<{ state: string; n: number }>(
      `select case when t.state = 'running' and m.ready_at is null then 'checking' else t.state end as state,
              count(*)::int as n
         from pool_members m join tenants t on t.project_id = m.project_id
        where m.claimed_at is null group by 1`,
    )
  ).rows;
}
