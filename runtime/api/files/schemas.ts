// The files routes' input and answers: paths, queries, limits and the bodies the document describes, and
// the routes as declared (handled in ./routes.ts).
import { z } from "zod";
import { RuntimeConfig } from "../../../stacks/config.js";
import { binary, fileAnswers } from "../answers.js";
import { EmptyBody, ProjectParams } from "../projects/schemas.js";
import { route } from "../route.js";
import { chars } from "../validation.js";

export type FileLimits = RuntimeConfig["files"];
export const DEFAULT_LIMITS: FileLimits = RuntimeConfig.parse({}).files;

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
