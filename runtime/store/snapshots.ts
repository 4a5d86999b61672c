// The `snapshots` table: each project's snapshots (a pushed image, or a microVM's disk file), newest first.
import type { Queryable } from "./db.js";

export interface SnapshotRecord {
  readonly project_id: string;
  readonly tag: string;
  readonly image: string;
  readonly digest: string;
  readonly created_at: Date;
}

export async function listSnapshots(db: Queryable, projectId: string): Promise<SnapshotRecord[]> {
  return (
    await db.query<SnapshotRecord>(
      "select * from snapshots where project_id = $1 order by created_at desc, tag desc",
      [projectId],
    )
  ).rows;
}

export async function recordSnapshot(
  db: Queryable,
  snapshot: { projectId: string; tag: string; image: string; digest: string },
): Promise<SnapshotRecord> {
  const { rows } = await db.query<SnapshotRecord>(
    "insert into snapshots (project_id, tag, image, digest) values ($1, $2, $3, $4) returning *",
    [snapshot.projectId, snapshot.tag, snapshot.image, snapshot.digest],
  );
  return rows[0]!;
}

export async function deleteSnapshotRecord(db: Queryable, projectId: string, tag: string): Promise<void> {
  await db.query("delete from snapshots where project_id = $1 and tag = $2", [projectId, tag]);
}
