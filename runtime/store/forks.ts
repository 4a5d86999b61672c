// Forks: which project a project's home was copied from and when (`projects.forked_from`, `forked_at`), and
// the tree of a project's forks as its owner sees it.
import type { Queryable } from "./db.js";
import type { TenantState } from "./tenants.js";

/** Records that `projectId` (just recorded, in the same transaction) is a fork of `sourceId` taken `at`. */
export async function recordFork(
  tx: Queryable,
  projectId: string,
  sourceId: string,
  at: Date,
): Promise<void> {
  await tx.query("update projects set forked_from = $2, forked_at = $3 where id = $1", [
    projectId,
    sourceId,
    at,
  ]);
}

/** One fork in a project's tree: its parent (the project, or a fork of it) and the point it was taken at. */
export interface ForkRow {
  readonly id: string;
  readonly name: string;
  readonly forked_from: string;
  readonly forked_at: Date;
  readonly created_at: Date;
  readonly state: TenantState;
  readonly running: boolean;
  /** 1 for the project's own forks, 2 for their forks, and so on. */
  readonly depth: number;
}

/**
 * The forks of `projectId` and theirs, down the tree, that are `userId`'s: live ones, oldest first by depth.
 * A deleted fork's own forks are still listed (under its id).
 */
export async function listForks(db: Queryable, userId: string, projectId: string): Promise<ForkRow[]> {
  const { rows } = await db.query<ForkRow>(
    `with recursive tree as (
         select p.id, 1 as depth from projects p where p.forked_from = $2 and p.user_id = $1
       union all
         select p.id, tree.depth + 1 from projects p join tree on p.forked_from = tree.id
          where p.user_id = $1 and tree.depth < 100)
     select p.id, p.name, p.forked_from, p.forked_at, p.created_at, t.state,
            (t.spec->>'running')::boolean as running, tree.depth
       from tree join projects p on p.id = tree.id join tenants t on t.project_id = p.id
      where t.state <> 'deleted'
      order by tree.depth, p.forked_at, p.created_at, p.id`,
    [userId, projectId],
  );
  return rows;
}

/** Where a project came from: the project it is a fork of and when, or undefined when it is no fork. */
export async function forkOrigin(
  db: Queryable,
  projectId: string,
): Promise<{ forked_from: string; forked_at: Date } | undefined> {
  const { rows } = await db.query<{ forked_from: string | null; forked_at: Date | null }>(
    "select forked_from, forked_at from projects where id = $1",
    [projectId],
  );
  const row = rows[0];
  return row?.forked_from && row.forked_at
    ? { forked_from: row.forked_from, forked_at: row.forked_at }
    : undefined;
}
