// The terminal's tables: `terminal_sessions` (each session: who, where its recording is, how it ended) and
// `terminal_tickets` (the single-use tickets a terminal is opened with, kept until they expire).
import type { Queryable } from "./db.js";

/** A terminal's session, or a turn of the console's agent pane (runtime/api/agent/). */
export type SessionKind = "terminal" | "agent";

export async function recordTerminalSessionStart(
  db: Queryable,
  session: { id: string; projectId: string; userId: string; castPath: string; kind?: SessionKind },
): Promise<void> {
  await db.query(
    "insert into terminal_sessions (id, project_id, user_id, cast_path, kind) values ($1, $2, $3, $4, $5)",
    [session.id, session.projectId, session.userId, session.castPath, session.kind ?? "terminal"],
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

/** A terminal session as its project's owner lists it. */
export interface TerminalSessionRow {
  readonly session_id: string;
  readonly kind: SessionKind;
  readonly user_id: string;
  readonly started_at: Date;
  readonly ended_at: Date | null;
  readonly end_code: number | null;
  readonly end_reason: string | null;
  readonly input_bytes: number;
  readonly output_bytes: number;
}

/** The project's 500 newest terminal sessions, newest first. */
export async function terminalSessions(db: Queryable, projectId: string): Promise<TerminalSessionRow[]> {
  const { rows } = await db.query<TerminalSessionRow>(
    `select id as session_id, kind, user_id, started_at, ended_at, end_code, end_reason,
            input_bytes::int as input_bytes, output_bytes::int as output_bytes
       from terminal_sessions where project_id = $1 order by started_at desc limit 500`,
    [projectId],
  );
  return rows;
}

/** Where the session's recording was written; undefined when the project has no such session. */
export async function sessionRecordingPath(
  db: Queryable,
  projectId: string,
  sessionId: string,
): Promise<string | undefined> {
  const { rows } = await db.query<{ cast_path: string }>(
    "select cast_path from terminal_sessions where id = $1 and project_id = $2",
    [sessionId, projectId],
  );
  return rows[0]?.cast_path;
}
