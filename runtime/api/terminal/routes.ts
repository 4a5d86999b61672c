import { createReadStream } from "node:fs";
import { stat } from "node:fs/promises";
import { z } from "zod";
import { HttpError } from "../../errors.js";
import { terminalAuditPage } from "../../store/audit.js";
import type { Database } from "../../store/db.js";
import { sessionRecordingPath, terminalSessions } from "../../store/terminal.js";
import { ProjectParams } from "../projects/schemas.js";
import { notFound } from "../answers.js";
import { AuditPageBody, SessionListBody } from "../responses.js";
import { route, type Routes } from "../route.js";

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

/** The project owner's view of what was typed in its terminals and of the recordings. */
export const auditRoute = route({
  method: "get",
  path: "/projects/{id}/audit",
  summary: "Every input frame typed in the project's terminals, with user and time (append-only)",
  params: ProjectParams,
  query: AuditQuery,
  access: "owner",
  responses: { 200: { description: "entries and next_after", body: AuditPageBody }, 404: notFound },
});

export const listSessionsRoute = route({
  method: "get",
  path: "/projects/{id}/sessions",
  summary: "The project's terminal sessions, newest first",
  params: ProjectParams,
  access: "owner",
  responses: { 200: { description: "sessions", body: SessionListBody }, 404: notFound },
});

export const sessionRoute = route({
  method: "get",
  path: "/projects/{id}/sessions/{sessionId}",
  summary: "A session's asciinema v2 recording",
  params: SessionParams,
  access: "owner",
  responses: {
    200: { description: "the recording", body: z.string(), contentType: "application/x-asciicast" },
    404: "no such project or session, or its recording is gone",
  },
});

/** The routes above, in the document's order. */
export const terminalRoutes = [auditRoute, listSessionsRoute, sessionRoute] as const;

export function registerTerminalRoutes(routes: Routes, options: { db: Database }): void {
  const { db } = options;

  routes.handle(auditRoute, async ({ params: { id }, query }) => {
    const rows = await terminalAuditPage(db, id, {
      after: query.after,
      limit: query.limit,
      session: query.session ?? null,
    });
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

  routes.handle(listSessionsRoute, async ({ params: { id } }) => {
    return { sessions: await terminalSessions(db, id) };
  });

  routes.handle(sessionRoute, async ({ reply, params: { id, sessionId } }) => {
    const castPath = await sessionRecordingPath(db, id, sessionId);
    if (castPath === undefined) throw new HttpError(404, "not_found", "session not found");
    const size = await stat(castPath).then(
      (s) => s.size,
      () => undefined,
    );
    if (size === undefined) throw new HttpError(404, "not_found", "the session's recording is gone");
    return reply
      .type("application/x-asciicast")
      .header("content-disposition", `attachment; filename="${sessionId}.cast"`)
      .header("content-length", String(size))
      .send(createReadStream(castPath));
  });
}
