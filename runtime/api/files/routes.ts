// Files in a sandbox through the API: list or stat (GET /projects/{id}/files), read and write one
// file's bytes (/files/content), many files as a tar stream (/files/archive), delete. Everything runs in the
// sandbox as the agent (runtime/sandbox/files.ts says how paths are confined and why).
import { randomUUID } from "node:crypto";
import { PassThrough, type Readable } from "node:stream";
import type { FastifyReply, FastifyRequest } from "fastify";
import { HttpError } from "../../errors.js";
import { SandboxNotRunningError } from "../../sandbox/exec.js";
import {
  cursorArgument,
  FILES_SCRIPT,
  listingCursor,
  parseEntries,
  pathProblem,
  sandboxPath,
} from "../../sandbox/files.js";
import type { SandboxProcess } from "../../sandbox/process.js";
import type { SandboxRunner, SandboxRunners } from "../../sandbox/runner.js";
import { sandboxNotRunning } from "../projects/view.js";
import type { ProjectRow } from "../../store/project-view.js";
import { type Routes } from "../route.js";
import { awake } from "../wake.js";
import type { Database } from "../../store/db.js";
import {
  ARCHIVE_CONTENT_TYPE,
  DEFAULT_LIMITS,
  deleteFilesRoute,
  downloadArchiveRoute,
  FILE_CONTENT_TYPE,
  type FileLimits,
  listFilesRoute,
  readFileRoute,
  uploadArchiveRoute,
  writeFileRoute,
} from "./schemas.js";
import { DRAIN_BYTES, FAILURES, ListingBuffer, StatusLine, type FilesRun } from "./streams.js";

export interface FileRoutesOptions {
  /** Each project's sandbox, by its backend (runtime/sandbox/runner.ts). */
  readonly sandboxes: SandboxRunners;
  /** The store, to wake a sandbox the platform put to sleep (runtime/api/wake.ts); without it, none is. */
  readonly db?: Database;
  readonly limits?: FileLimits;
}

export function registerFileRoutes(routes: Routes, options: FileRoutesOptions): void {
  const { sandboxes, db } = options;
  const { maxBytes, maxListEntries } = options.limits ?? DEFAULT_LIMITS;

  /** The path a query names (its problems answered before its schema's, in a message that names it). */
  const checkPath = (raw: unknown): void => {
    const asked = (raw as { path?: unknown } | undefined)?.path;
    const problem = typeof asked === "string" ? pathProblem(asked) : undefined;
    if (problem)
      throw new HttpError(
        400,
        "validation_failed",
        `invalid query: path: ${(asked as string).slice(0, 100)} ${problem}`,
        [{ field: "path", message: problem }],
      );
  };
  const pathChecked = { checkQuery: checkPath };

  async function run(
    request: FastifyRequest,
    projectId: string,
    project: ProjectRow,
    args: string[],
    stdout: ((chunk: Buffer) => boolean) | undefined,
    stdin?: "stream",
  ): Promise<FilesRun> {
    const id = randomUUID();
    const statusLine = new StatusLine();
    let settle!: (line: string) => void;
    const status = new Promise<string>((resolve) => (settle = resolve));
    let process!: SandboxProcess;
    let sandbox!: SandboxRunner;
    const start = async () => {
      sandbox = await sandboxes(projectId);
      process = await sandbox.start(
        id,
        { argv: ["/bin/sh", "-c", FILES_SCRIPT, "sbx-files", ...args], stdin },
        (stream, chunk) => {
          if (stream === "stderr") {
            const line = statusLine.push(chunk);
            if (line !== undefined) settle(line);
          } else if (stdout && !stdout(chunk)) process.pause();
        },
      );
    };
    try {
      // A sandbox the platform put to sleep is woken for the request (the request held while it starts).
      await (db ? awake(db, request, projectId, start) : start());
    } catch (error) {
      if (error instanceof SandboxNotRunningError) throw sandboxNotRunning(projectId, project, error);
      throw error;
    }
    void process.exited.then(
      (code) => settle(`err exit the file operation ended (exit code ${code}) without a status`),
      () => settle("err exit the file operation's stream failed"),
    );
    return { process, status, id, sandbox };
  }

  /** The status line as the answer: its detail when ok, else the HttpError it names. */
  function checkedStatus(line: string, asked: string): string {
    if (line.startsWith("ok")) return line.slice(3);
    const [, code = "", ...rest] = line.split(" ");
    const failure = FAILURES[code];
    const detail = rest.join(" ") || asked;
    if (!failure) throw new Error(`file operation failed: ${line}`);
    throw new HttpError(failure.status, failure.code, `path ${asked}: ${failure.what(detail)}`, {
      path: asked,
      resolved: code === "outside" ? detail : undefined,
    });
  }

  /** Streams a run's stdout as the answer once its status is ok; a client that leaves ends the run. */
  async function sendStream(
    reply: FastifyReply,
    projectId: string,
    project: ProjectRow,
    args: string[],
    asked: string,
    type: string,
  ) {
    const out = new PassThrough();
    out.on("error", () => undefined);
    // Its output is held back only once the status line is in: the engine copies stdout and stderr apart, so
    // output can come ahead of that line on the same connection, and a paused connection would never bring
    // it (the answer would wait forever). What comes ahead is buffered: the script prints its status first.
    let answered = false;
    const started = await run(
      reply.request,
      projectId,
      project,
      args,
      (chunk) => out.write(chunk) || !answered,
    );
    out.on("drain", () => started.process.resume());
    // A client that leaves (even before the status) ends the run, and its connection: nobody reads it anymore.
    reply.raw.on("close", () => {
      if (reply.raw.writableFinished) return;
      void started.sandbox.signal(started.id, "KILL").catch(() => undefined);
      started.process.detach();
    });
    const line = await started.status;
    answered = true;
    checkedStatus(line, asked);
    void started.process.exited.then(
      () => out.end(),
      () => out.destroy(),
    );
    return reply.type(type).header("cache-control", "no-store").send(out);
  }

  /**
   * Pipes the request's raw body into a run's stdin, at most maxBytes. Past it the run is stopped (TERM: the
   * script's trap removes its temporary file) and the rest of the body is read and dropped, so that the
   * client gets its 413 rather than a connection reset (up to a bound; past that, the reset). A body that
   * fails (the client left) stops the run the same way: its stdin is never closed, so nothing half-sent is
   * kept. Once the run has its status (a refusal, or it ended early) it reads no more: the answer is that
   * status, and the rest of the body is read and dropped.
   */
  async function receive(request: FastifyRequest, started: FilesRun): Promise<number> {
    const body = request.body as Readable;
    const input = started.process.input!;
    input.on("error", () => undefined);
    const stop = () => void started.sandbox.signal(started.id, "TERM").catch(() => undefined);
    let received = 0;
    let over = false;
    // Set once nothing more goes to the run: it has its status, or the body failed.
    let done = false;
    await new Promise<void>((resolve, reject) => {
      const fail = (error: Error) => {
        if (!over && !done) stop();
        done = true;
        reject(error);
      };
      body.on("data", (chunk: Buffer) => {
        received += chunk.length;
        if (over) {
          if (received > maxBytes + DRAIN_BYTES) body.destroy(tooLarge());
          return;
        }
        if (received > maxBytes) {
          if (!done) stop();
          over = true;
          return;
        }
        if (done) return;
        if (!input.write(chunk)) {
          body.pause();
          input.once("drain", () => body.resume());
        }
      });
      body.on("end", () => {
        if (over) return reject(tooLarge());
        input.end();
        resolve();
      });
      body.on("error", fail);
      body.on("close", () => {
        if (!body.readableEnded) fail(new Error("the request's body ended before it was whole"));
      });
      // The run's status before the whole body (a path outside; its stdin gone): the drain above may never come.
      void started.status.then(() => {
        if (over) return;
        done = true;
        body.resume();
        resolve();
      });
    });
    return received;
  }

  const tooLarge = () =>
    new HttpError(
      413,
      "payload_too_large",
      `body larger than agent-sandbox:runtime.files.maxBytes (${maxBytes} bytes)`,
      { max_bytes: maxBytes },
    );

  /** The raw body, refused before anything runs when it is JSON or declares more than the limit. */
  function rawBody(request: FastifyRequest, type: string): void {
    const body = request.body as { pipe?: unknown } | undefined;
    if (!body || typeof body.pipe !== "function")
      throw new HttpError(415, "unsupported_media_type", `the body must be ${type}`);
    const declared = Number(request.headers["content-length"]);
    if (Number.isFinite(declared) && declared > maxBytes) throw tooLarge();
  }

  routes.app.register(async (scope) => {
    const scoped = routes.in(scope);
    // Raw bytes, streamed into the sandbox as they come: only for these routes (the API's JSON limit stays).
    scope.addContentTypeParser([FILE_CONTENT_TYPE, ARCHIVE_CONTENT_TYPE], (_request, payload, done) =>
      done(null, payload),
    );

    scoped.handle(
      writeFileRoute,
      async ({ request, params: { id }, project, query }) => {
        const path = sandboxPath(query.path);
        rawBody(request, FILE_CONTENT_TYPE);
        const started = await run(request, id, project, ["write", path, query.mode], undefined, "stream");
        const size = await receive(request, started);
        const written = checkedStatus(await started.status, query.path);
        return { path: written, size, mode: query.mode.replace(/^0(?=[0-7]{3}$)/, "") };
      },
      pathChecked,
    );

    scoped.handle(
      readFileRoute,
      ({ reply, params: { id }, project, query }) =>
        sendStream(
          reply,
          id,
          project,
          ["read", sandboxPath(query.path), String(maxBytes)],
          query.path,
          FILE_CONTENT_TYPE,
        ),
      pathChecked,
    );

    scoped.handle(
      listFilesRoute,
      async ({ request, params: { id }, project, query }) => {
        const path = sandboxPath(query.path ?? ".");
        const limit = Math.min(query.limit ?? maxListEntries, maxListEntries);
        // One entry more than answered says whether the directory goes on. The script lists no more than
        // that; a run that sends more anyway is not kept past it, and is ended once its status is in (never
        // paused: the status line may come behind the listing on the same connection).
        const listing = new ListingBuffer(limit + 1);
        const started = await run(
          request,
          id,
          project,
          ["stat", path, String(limit + 1), cursorArgument(query.cursor)],
          (chunk) => listing.push(chunk) || true,
        );
        const [type = "", ...resolved] = checkedStatus(await started.status, path).split(" ");
        await Promise.race([started.process.exited, listing.filled]);
        if (listing.full) {
          started.process.detach();
          void started.sandbox.signal(started.id, "KILL").catch(() => undefined);
        }
        const listed = parseEntries(listing.output);
        const page = listed.slice(0, limit);
        return {
          path: resolved.join(" "),
          type: type === "directory" ? ("directory" as const) : ("file" as const),
          entries: page.map((e) => e.entry),
          next_cursor: listed.length > limit ? listingCursor(page.at(-1)!.nameBytes) : null,
        };
      },
      pathChecked,
    );

    scoped.handle(
      deleteFilesRoute,
      async ({ request, params: { id }, project, query }) => {
        const started = await run(
          request,
          id,
          project,
          ["delete", sandboxPath(query.path), query.recursive],
          undefined,
        );
        return { path: checkedStatus(await started.status, query.path) };
      },
      pathChecked,
    );

    scoped.handle(
      uploadArchiveRoute,
      async ({ request, params: { id }, project, query }) => {
        const path = sandboxPath(query.path ?? ".");
        rawBody(request, ARCHIVE_CONTENT_TYPE);
        const started = await run(request, id, project, ["tar-in", path], undefined, "stream");
        await receive(request, started);
        const entries = Number(checkedStatus(await started.status, path));
        return { path, entries };
      },
      pathChecked,
    );

    scoped.handle(
      downloadArchiveRoute,
      ({ reply, params: { id }, project, query }) => {
        const path = sandboxPath(query.path ?? ".");
        return sendStream(reply, id, project, ["tar-out", path], path, ARCHIVE_CONTENT_TYPE);
      },
      pathChecked,
    );
  });
}
