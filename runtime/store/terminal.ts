// The terminal's tables: `terminal_sessions` (each session: who, where its recording is, how it ended) and
// `terminal_tickets` (the single-use tickets a terminal is opened with, kept until they expire).
import type { Queryable } from "./db.js";

export async function recordTerminalSessionStart(
  db: Queryable,
  session: { id: string; projectId: string; userId: string; castPath: string },
): Promise<void> {
  await db.query(
    "insert into terminal_sessions (id, project_id, user_id, cast_path) values ($1, $2, $3, $4)",
    [session.id, session.projectId, session.userId, session.castPath],
  );
}

export async function recordTerminalSessionEnd(
  db: Queryable,
  id: string,
  end: { code: number; reason: string; inputBytes: number; outputBytes: number },
): Promise<void> {
  await db.query(
    `update terminal_sessions set ended_at = now(), end_code = $2, end_reason = $3, input_bytes = $4,
       output_bytes = $5 where id = $1`,
    [id, end.code, end.reason, end.inputBytes, end.outputBytes],
  );
}

/** Deletes the records of tickets expired over a minute ago (they can no longer be presented). */
export async function sweepExpiredTickets(db: Queryable): Promise<void> {
  await db.query("delete from terminal_tickets where expires_at < now() - interval '1 minute'");
}

/** Records a ticket as used; false when it was used before. `expires` is in seconds since the epoch. */
export async function recordTicketUse(db: Queryable, id: string, expires: number): Promise<boolean> {
  const { rows } = await db.query(
    `insert into terminal_tickets (id, expires_at) values ($1, to_timestamp($2))
     on conflict (id) do nothing returning id`,
    [id, expires],
  );
  return rows.length > 0;
}
