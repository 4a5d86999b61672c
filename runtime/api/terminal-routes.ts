import { createReadStream } from "node:fs";
import { stat } from "node:fs/promises";
import type { FastifyInstance } from "fastify";
import { z } from "zod";
import type { Database } from "../db.js";
import { HttpError } from "../errors.js";
import type { Auth } from "./auth.js";
import { ownProject, ProjectParams } from "./project-routes.js";
import { parseInput } from "./validation.js";

export const SessionParams = ProjectParams.extend({
  sessionId: z.uuid({ message: "must be a session id (UUID)" }),
}).strict();

export const AuditQuery = z
  .object({
    /** Entries after this id (the previous page's `next_after`). */
    after: z.coerce.number().int().min(0).default(0),
    limit: z.coerce.number().int().min(1).max(1000).default(200),
    session: z.uuid({ message: "must be a session id (UUID)" }).optional(),
  })
  .strict();

interface AuditRow {
  id: string;
  session_id: string;
  user_id: string;
  at: Date;
  kind: "input" | "resize" | "truncated";
  data: Buffer | Uint8Array;
}

/** The project owner's view of what was typed in its terminals and of the recordings. */
export function registerTerminalRoutes(app: FastifyInstance, options: { db: Database; auth: Auth }): void {
  const { db, auth } = options;

  app.get("/projects/:id/audit", async (request) => {
    const userId = await auth.authenticate(request.headers.authorization);
    const { id } = parseInput(ProjectParams, request.params, "params");
    const query = parseInput(AuditQuery, request.query, "query");
    await ownProject(db, userId, id);
    // Ordered by the bigint column: `order by id` would sort by the text selected (so "10" < "9"), and
    // `next_after` pagination would repeat and skip rows.
    const { rows } = await db.query<AuditRow>(
      `select id::text, session_id, user_id, at, kind, data from terminal_audit
        where project_id = $1 and id > $2 and ($4::uuid is null or session_id = $4)
        order by terminal_audit.id limit $3`,
      [id, query.after, query.limit, query.session ?? null],
    );
    return {
      entries: rows.map((row) => {
        const data = Buffer.from(row.data);
        return {
          id: Number(row.id),
          session_id: row.session_id,
          user_id: row.user_id,
          at: row.at,
          kind: row.kind,
          // Typed text as UTF-8 for reading; the exact bytes for anything that is not.
          text: data.toString("utf8"),
          data_base64: data.toString("base64"),
        };
      }),
      next_after: rows.length > 0 ? Number(rows.at(-1)!.id) : query.after,
    };
  });

  app.get("/projects/:id/sessions", async (request) => {
    const userId = await auth.authenticate(request.headers.authorization);
    const { id } = parseInput(ProjectParams, request.params, "params");
    await ownProject(db, userId, id);
    const { rows } = await db.query(
      `select id as session_id, user_id, started_at, ended_at, end_code, end_reason,
              input_bytes::int as input_bytes, output_bytes::int as output_bytes
         from terminal_sessions where project_id = $1 order by started_at desc limit 500`,
      [id],
    );
    return { sessions: rows };
  });

  app.get("/projects/:id/sessions/:sessionId", async (request, reply) => {
    const userId = await auth.authenticate(request.headers.authorization);
    const { id, sessionId } = parseInput(SessionParams, request.params, "params");
    await ownProject(db, userId, id);
    const { rows } = await db.query<{ cast_path: string }>(
      "select cast_path from terminal_sessions where id = $1 and project_id = $2",
      [sessionId, id],
    );
    if (!rows[0]) throw new HttpError(404, "not_found", "session not found");
    const size = await stat(rows[0].cast_path).then(
      (s) => s.size,
      () => undefined,
    );
    if (size === undefined) throw new HttpError(404, "not_found", "the session's recording is gone");
    return reply
      .type("application/x-asciicast")
      .header("content-disposition", `attachment; filename="${sessionId}.cast"`)
      .header("content-length", String(size))
      .send(createReadStream(rows[0].cast_path));
  });
}
