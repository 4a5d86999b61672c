// The audit: who ran what where, and how it went. Commands run through the exec API (`sandbox_execs`), the
// credential gateway's requests (`gateway_requests`) and what was typed in a terminal (`terminal_audit`).
// Never the stdin, the output, or the values of the environment the caller set (their names only: a value
// may be a credential); never a gateway's key.
import type { Queryable } from "./db.js";

export interface ExecStart {
  readonly id: string;
  readonly projectId: string;
  readonly userId: string;
  readonly command: readonly string[];
  readonly shell: boolean;
  readonly cwd: string | undefined;
  readonly envNames: readonly string[];
  readonly background: boolean;
  readonly stdinBytes: number;
}

export interface ExecEnd {
  readonly exitCode: number | null;
  readonly durationMs: number;
  readonly stdoutBytes: number;
  readonly stderrBytes: number;
  readonly timedOut: boolean;
  /** Why the runtime killed it: `timeout`, `client-disconnected`, `killed` (DELETE), `error`. */
  readonly killedBy: string | null;
}

export interface ExecAuditEntry {
  readonly id: string;
  readonly user_id: string;
  readonly command: string[];
  readonly shell: boolean;
  readonly cwd: string | null;
  readonly env_names: string[];
  readonly background: boolean;
  readonly started_at: string;
  readonly finished_at: string | null;
  readonly exit_code: number | null;
  readonly duration_ms: number | null;
  readonly stdin_bytes: number;
  readonly stdout_bytes: number;
  readonly stderr_bytes: number;
  readonly timed_out: boolean;
  readonly killed_by: string | null;
}

/** Recorded before the command starts: a runtime that dies meanwhile leaves a row without an end. */
export async function recordExecStart(db: Queryable, exec: ExecStart): Promise<void> {
  await db.query(
    `insert into sandbox_execs (id, project_id, user_id, command, shell, cwd, env_names, background, stdin_bytes)
     values ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
    [
      exec.id,
      exec.projectId,
      exec.userId,
      JSON.stringify(exec.command),
      exec.shell,
      exec.cwd ?? null,
      JSON.stringify(exec.envNames),
      exec.background,
      exec.stdinBytes,
    ],
  );
}

export async function recordExecEnd(db: Queryable, id: string, end: ExecEnd): Promise<void> {
  await db.query(
    `update sandbox_execs set finished_at = now(), exit_code = $2, duration_ms = $3, stdout_bytes = $4,
            stderr_bytes = $5, timed_out = $6, killed_by = $7
      where id = $1`,
    [id, end.exitCode, end.durationMs, end.stdoutBytes, end.stderrBytes, end.timedOut, end.killedBy],
  );
}

/** A project's execs, newest first. */
export async function listExecs(db: Queryable, projectId: string, limit: number): Promise<ExecAuditEntry[]> {
  const { rows } = await db.query<
    Omit<ExecAuditEntry, "started_at" | "finished_at" | "stdin_bytes" | "stdout_bytes" | "stderr_bytes"> & {
      started_at: Date;
      finished_at: Date | null;
      stdin_bytes: string | number;
      stdout_bytes: string | number;
      stderr_bytes: string | number;
    }
  >(
    `select id, user_id, command, shell, cwd, env_names, background, started_at, finished_at, exit_code,
            duration_ms, stdin_bytes, stdout_bytes, stderr_bytes, timed_out, killed_by
       from sandbox_execs where project_id = $1 order by started_at desc, id limit $2`,
    [projectId, limit],
  );
  return rows.map((row) => ({
    ...row,
    started_at: new Date(row.started_at).toISOString(),
    finished_at: row.finished_at ? new Date(row.finished_at).toISOString() : null,
    stdin_bytes: Number(row.stdin_bytes),
    stdout_bytes: Number(row.stdout_bytes),
    stderr_bytes: Number(row.stderr_bytes),
  }));
}

/** One request the credential gateway forwarded (or refused) for a project: never the key. */
export interface GatewayRequest {
  readonly at: string;
  readonly provider: string;
  readonly host: string;
  readonly method: string;
  /** The path, without its query string (a Gemini client may put a key there). */
  readonly path: string;
  /** The upstream's status, the gateway's own refusal's, or null when the upstream never answered. */
  readonly status: number | null;
  readonly request_bytes: number;
  readonly response_bytes: number;
  readonly duration_ms: number;
  readonly error: string | null;
}

export async function recordGatewayRequest(
  db: Queryable,
  projectId: string,
  request: GatewayRequest,
): Promise<void> {
  await db.query(
    `insert into gateway_requests
       (project_id, at, provider, host, method, path, status, request_bytes, response_bytes, duration_ms, error)
     values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
    [
      projectId,
      request.at,
      request.provider,
      request.host,
      request.method,
      request.path,
      request.status,
      request.request_bytes,
      request.response_bytes,
      request.duration_ms,
      request.error,
    ],
  );
}

/** The project's newest requests first. */
export async function gatewayRequests(
  db: Queryable,
  projectId: string,
  limit = 100,
): Promise<GatewayRequest[]> {
  const { rows } = await db.query<GatewayRequest & { at: Date | string; request_bytes: string | number }>(
    `select at, provider, host, method, path, status, request_bytes, response_bytes, duration_ms, error
       from gateway_requests where project_id = $1 order by id desc limit $2`,
    [projectId, limit],
  );
  return rows.map((row) => ({
    ...row,
    at: new Date(row.at).toISOString(),
    request_bytes: Number(row.request_bytes),
    response_bytes: Number(row.response_bytes),
  }));
}

/**
 * What was typed into a terminal session (or a resize, or where its byte cap cut it short), at its time; in an
 * agent turn's session, the prompt and each command the agent ran.
 */
export type TerminalAuditKind = "input" | "resize" | "truncated" | "agent_prompt" | "agent_command";

/** An entry of {@link TerminalAuditKind}. */
export interface TerminalAuditEntry {
  readonly at: Date;
  readonly kind: TerminalAuditKind;
  readonly data: Buffer;
}

/** A batch of one session's audit entries, in one statement. */
export async function recordTerminalAudit(
  db: Queryable,
  ids: { readonly session: string; readonly project: string; readonly user: string },
  entries: readonly TerminalAuditEntry[],
): Promise<void> {
  const values: unknown[] = [];
  const rows = entries.map((entry, i) => {
    values.push(entry.at, entry.kind, entry.data);
    return `($1, $2, $3, $${4 + i * 3}, $${5 + i * 3}, $${6 + i * 3})`;
  });
  await db.query(
    `insert into terminal_audit (session_id, project_id, user_id, at, kind, data) values ${rows.join(", ")}`,
    [ids.session, ids.project, ids.user, ...values],
  );
}

/** A terminal audit entry as its project's owner reads it back. */
export interface TerminalAuditRow {
  /** The entry's bigint id, as text. */
  readonly id: string;
  readonly session_id: string;
  readonly user_id: string;
  readonly at: Date;
  readonly kind: TerminalAuditKind;
  readonly data: Buffer | Uint8Array;
}

/**
 * Up to `limit` of the project's terminal audit entries after the one with id `after`, in order; only
 * `session`'s when one is given.
 */
export async function terminalAuditPage(
  db: Queryable,
  projectId: string,
  page: { after: number; limit: number; session: string | null },
): Promise<TerminalAuditRow[]> {
  // Ordered by the bigint column: `order by id` would sort by the text selected (so "10" < "9"), and
  // `next_after` pagination would repeat and skip rows.
  const { rows } = await db.query<TerminalAuditRow>(
    `select id::text, session_id, user_id, at, kind, data from terminal_audit
      where project_id = $1 and id > $2 and ($4::uuid is null or session_id = $4)
      order by terminal_audit.id limit $3`,
    [projectId, page.after, page.limit, page.session],
  );
  return rows;
}
