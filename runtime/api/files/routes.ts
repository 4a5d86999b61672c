// Files in a sandbox through the API: list or stat (GET /projects/{id}/files), read and write one
// file's bytes (/files/content), many files as a tar stream (/files/archive), delete. Everything runs in the
// sandbox as the agent (runtime/sandbox/files.ts says how paths are confined and why).
import { randomUUID } from "node:crypto";
import { PassThrough, type Readable } from "node:stream";
import type { FastifyReply, FastifyRequest } from "fastify";
import { z } from "zod";
import { RuntimeConfig } from "../../../stacks/config.js";
import type { Database } from "../../db.js";
import { HttpError } from "../../errors.js";
import { SandboxNotRunningError } from "../../sandbox/exec.js";
import {
  cursorArgument,
  FILES_SCRIPT,
  listingCursor,
  MAX_ENTRY_BYTES,
  parseEntries,
  pathProblem,
  sandboxPath,
} from "../../sandbox/files.js";
import type { SandboxProcess } from "../../sandbox/process.js";
import type { SandboxRunner, SandboxRunners } from "../../sandbox/runner.js";
import { sandboxNotRunning } from "../projects/view.js";
import { EmptyBody, ProjectParams } from "../projects/schemas.js";
import type { ProjectRow } from "../projects/row.js";
import { chars } from "../validation.js";
import { route, type Routes } from "../route.js";
import { binary, fileAnswers } from "../answers.js";

export type FileLimits = RuntimeConfig["files"];
const DEFAULT_LIMITS: FileLimits = RuntimeConfig.parse({}).files;

/** The raw bodies these routes take; JSON goes through the server's own parser (and is refused here). */
export const FILE_CONTENT_TYPE = "application/octet-stream";
export const ARCHIVE_CONTENT_TYPE = "application/x-tar";

/**
 * A path the files API takes: any characters but control characters (C0, DEL, C1: a name with a newline
 * would break the script's status line and a listing's readers), within the kernel's byte limits stated in
 * characters, as the document can state them. A character is up to 4 bytes in UTF-8, so a name is at most
 * 255 characters of printable ASCII or 63 of anything else (NAME_MAX, 255 bytes), and a path 4096 of
 * printable ASCII or 1024 of anything else (PATH_MAX). Every such path round-trips: written, listed under
 * the same name, read and deleted.
 */
const FilePath = chars(1, 4096)
  .regex(/^[^\u0000-\u001f\u007f-\u009f]*$/, {
    message: "must not contain control characters (U+0000-U+001F, U+007F-U+009F)",
  })
  .regex(/^(?:[ -~]*|[^\u0000]{0,1024})$/, {
    message: "must be at most 1024 characters when it has any but printable ASCII (4096 bytes)",
  })
  .regex(/^(?:(?:[ -.0-~]{0,255}|[^/]{0,63})(?:\/|$))*$/, {
    message:
      "must not have a name longer than 255 characters of printable ASCII, or 63 of any other (255 bytes)",
  })
  .regex(/^(?!(?:[^/]*\/)*\.\.(?:\/|$))/, { message: "must not have a '..' component" })
  .meta({
    description:
      "absolute, or relative to /workspace (when the image has one) or /home/agent; resolved in the sandbox by the agent and confined to those two",
  });

export const FileQuery = z.object({ path: FilePath }).strict();
export const ListQuery = z.object({ path: FilePath.optional() }).strict();
export const ListingQuery = ListQuery.extend({
  cursor: z
    .string()
    .regex(/^[A-Za-z0-9_-]{1,400}$/, { message: "must be a next_cursor of an earlier answer" })
    .optional()
    .meta({ description: "where to go on: the `next_cursor` of the answer before (none: from the start)" }),
  limit: z.coerce
    .number()
    .int({ message: "must be a whole number of entries" })
    .min(1, { message: "must be at least 1 entry" })
    .max(100_000)
    .optional()
    .meta({
      description:
        "entries at most in this answer (default and most: agent-sandbox:runtime.files.maxListEntries, 1000)",
    }),
}).strict();
export const WriteQuery = z
  .object({
    path: FilePath,
    mode: z
      .string()
      .regex(/^[0-7]{3,4}$/, { message: "must be octal permission bits such as 644 or 0755" })
      .default("644")
      .meta({ examples: ["644", "0755", "600"] }),
  })
  .strict();
export const DeleteQuery = z
  .object({ path: FilePath, recursive: z.enum(["true", "false"]).default("false") })
  .strict();

const Entry = z
  .object({
    name: z.string(),
    type: z.enum(["file", "directory", "symlink", "other"]),
    size: z.number().int(),
    mode: z.string(),
    modified_at: z.iso.datetime(),
    link_target: z.string().nullable(),
  })
  .strict();
export const FileListBody = z
  .object({
    /** The resolved path. */
    path: z.string(),
    type: z.enum(["file", "directory"]),
    /** A directory's entries by name (as bytes), or the file itself. */
    entries: z.array(Entry),
    /** The directory has more entries: ask again with this `cursor` for the next ones. */
    next_cursor: z.string().nullable(),
  })
  .strict();
export const FileWrittenBody = z
  .object({ path: z.string(), size: z.number().int(), mode: z.string() })
  .strict();
export const FileDeletedBody = z.object({ path: z.string() }).strict();
export const ArchiveWrittenBody = z.object({ path: z.string(), entries: z.number().int() }).strict();

export const writeFileRoute = route({
  method: "put",
  path: "/projects/{id}/files/content",
  summary:
    "Write a file atomically (a temporary file renamed over it) as the agent, with `mode`; parent directories are made; the body is its bytes",
  params: ProjectParams,
  query: WriteQuery,
  rawBody: FILE_CONTENT_TYPE,
  access: "owner",
  responses: {
    200: { description: "written: the resolved path, size and mode", body: FileWrittenBody },
    ...fileAnswers,
  },
});

export const readFileRoute = route({
  method: "get",
  path: "/projects/{id}/files/content",
  summary: "A file's bytes (at most agent-sandbox:runtime.files.maxBytes), read as the agent",
  params: ProjectParams,
  query: FileQuery,
  access: "owner",
  responses: {
    200: { description: "the file's bytes", body: binary, contentType: FILE_CONTENT_TYPE },
    413: "the file is larger than agent-sandbox:runtime.files.maxBytes",
    ...fileAnswers,
  },
});

export const listFilesRoute = route({
  method: "get",
  path: "/projects/{id}/files",
  summary:
    "List a directory (default: the workspace root), or stat a file: names, types, sizes, modes, modification times, symlink targets; at most agent-sandbox:runtime.files.maxListEntries entries an answer, `next_cursor` goes on",
  params: ProjectParams,
  query: ListingQuery,
  access: "owner",
  responses: { 200: { description: "the entries", body: FileListBody }, ...fileAnswers },
});

export const deleteFilesRoute = route({
  method: "delete",
  path: "/projects/{id}/files",
  summary: "Delete a file, a symlink (not its target), or with recursive=true a directory",
  params: ProjectParams,
  query: DeleteQuery,
  body: EmptyBody,
  bodyOptional: true,
  access: "owner",
  responses: { 200: { description: "deleted", body: FileDeletedBody }, ...fileAnswers },
});

export const uploadArchiveRoute = route({
  method: "put",
  path: "/projects/{id}/files/archive",
  summary:
    "Unpack a tar stream into a directory (default: the workspace root; made when missing) as the agent: modes as archived, owned by the agent",
  params: ProjectParams,
  query: ListQuery,
  rawBody: ARCHIVE_CONTENT_TYPE,
  access: "owner",
  responses: {
    200: { description: "unpacked: how many entries", body: ArchiveWrittenBody },
    ...fileAnswers,
  },
});

export const downloadArchiveRoute = route({
  method: "get",
  path: "/projects/{id}/files/archive",
  summary: "A directory (default: the workspace root) or a file as a tar stream",
  params: ProjectParams,
  query: ListQuery,
  access: "owner",
  responses: {
    200: { description: "a tar stream", body: binary, contentType: ARCHIVE_CONTENT_TYPE },
    ...fileAnswers,
  },
});

/** The routes above, in the document's order. */
export const fileRoutes = [
  writeFileRoute,
  readFileRoute,
  listFilesRoute,
  deleteFilesRoute,
  uploadArchiveRoute,
  downloadArchiveRoute,
] as const;

export interface FileRoutesOptions {
  readonly db: Database;
  /** Each project's sandbox, by its backend (runtime/sandbox/runner.ts). */
  readonly sandboxes: SandboxRunners;
  readonly limits?: FileLimits;
}

/**
 * The script's answers: its status line's code, as the API's. A path the document allows is never a 400
 * for what it finds in the sandbox: leading out of the home and workspace is a 403 (the agent may not act
 * there), a directory where a file is asked for, a path that names the root itself or a write the sandbox's
 * file system refuses is a 409 (the sandbox's state, not the request, is in the way).
 */
const FAILURES: Record<string, { status: number; code: string; what: (path: string) => string }> = {
  missing: { status: 404, code: "not_found", what: (p) => `${p}: no such file or directory` },
  outside: {
    status: 403,
    code: "path_outside",
    what: (p) => `resolves to ${p}, outside /home/agent and /workspace`,
  },
  denied: { status: 403, code: "permission_denied", what: (p) => `${p}: the agent may not do that there` },
  isdir: { status: 409, code: "is_directory", what: (p) => `${p} is a directory` },
  invalid: { status: 409, code: "invalid_path", what: (p) => `${p} names no file` },
  toolarge: { status: 413, code: "too_large", what: (p) => p },
  tar: { status: 400, code: "bad_archive", what: (p) => `the archive could not be unpacked: ${p}` },
  io: { status: 409, code: "write_failed", what: (p) => `${p} could not be written` },
};

/** What is read and dropped of a body past the limit before the connection is reset instead. */
const DRAIN_BYTES = 64 * 1024 * 1024;

/** The most of the files script's stderr kept while its status line comes: more than any it prints. */
export const STATUS_LINE_BYTES = 16 * 1024;

/**
 * The files script's status: the first line of its stderr. What follows that line is dropped as it comes
 * (a tar's complaint about each file it cannot read can be many), and a first line longer than
 * STATUS_LINE_BYTES is a failure of its own: at most that much is ever kept, each byte copied at most twice.
 */
export class StatusLine {
  private parts: Buffer[] = [];
  private length = 0;
  private done = false;

  /** The bytes held now. */
  get keptBytes(): number {
    return this.length;
  }

  /** Takes a chunk of stderr: the status line once it is whole (and never again). */
  push(chunk: Buffer): string | undefined {
    if (this.done) return undefined;
    const end = chunk.indexOf(10);
    const part = end >= 0 ? chunk.subarray(0, end) : chunk;
    if (this.length + part.length > STATUS_LINE_BYTES) {
      this.finish();
      return `err exit the file operation's status line is longer than ${STATUS_LINE_BYTES} bytes`;
    }
    this.parts.push(Buffer.from(part));
    this.length += part.length;
    if (end < 0) return undefined;
    const line = Buffer.concat(this.parts, this.length).toString();
    this.finish();
    return line;
  }

  private finish(): void {
    this.done = true;
    this.parts = [];
    this.length = 0;
  }
}

/**
 * A listing's records as they come, up to `records` whole ones (and their bytes' bound): what comes
 * after them is dropped. `push` answers whether it takes more.
 */
class ListingBuffer {
  private readonly chunks: Buffer[] = [];
  private bytes = 0;
  private records = 0;
  full = false;
  /** Settles once it is full. */
  readonly filled: Promise<void>;
  private fill!: () => void;

  constructor(
    private readonly maxRecords: number,
    private readonly maxBytes = maxRecords * MAX_ENTRY_BYTES,
  ) {
    this.filled = new Promise((resolve) => (this.fill = resolve));
  }

  push(chunk: Buffer): boolean {
    if (this.full) return false;
    let take = Math.min(chunk.length, this.maxBytes - this.bytes);
    for (let at = chunk.indexOf(0); at >= 0 && at < take; at = chunk.indexOf(0, at + 1))
      if (++this.records === this.maxRecords) take = at + 1;
    this.chunks.push(Buffer.from(chunk.subarray(0, take)));
    this.bytes += take;
    this.full = this.records === this.maxRecords || this.bytes === this.maxBytes;
    if (this.full) this.fill();
    return !this.full;
  }

  get output(): Buffer {
    return Buffer.concat(this.chunks, this.bytes);
  }
}

/** One run of the files script: its status line, its stdout, its end. */
interface FilesRun {
  readonly process: SandboxProcess;
  readonly status: Promise<string>;
  readonly id: string;
  /** Where it runs (to signal it). */
  readonly sandbox: SandboxRunner;
}

export function registerFileRoutes(routes: Routes, options: FileRoutesOptions): void {
  const { sandboxes } = options;
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
    let process: SandboxProcess;
    let sandbox: SandboxRunner;
    try {
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
    const started = await run(projectId, project, args, (chunk) => out.write(chunk) || !answered);
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
        const started = await run(id, project, ["write", path, query.mode], undefined, "stream");
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
      async ({ params: { id }, project, query }) => {
        const path = sandboxPath(query.path ?? ".");
        const limit = Math.min(query.limit ?? maxListEntries, maxListEntries);
        // One entry more than answered says whether the directory goes on. The script lists no more than
        // that; a run that sends more anyway is not kept past it, and is ended once its status is in (never
        // paused: the status line may come behind the listing on the same connection).
        const listing = new ListingBuffer(limit + 1);
        const started = await run(
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
      async ({ params: { id }, project, query }) => {
        const started = await run(
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
        const started = await run(id, project, ["tar-in", path], undefined, "stream");
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
