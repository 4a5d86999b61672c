// The exec routes' declarations: their input (the command body, background processes, signals), their answers
// and their OpenAPI entries.
import { z } from "zod";
import { RuntimeConfig } from "../../../stacks/config.js";
import { SIGNALS } from "../../sandbox/process.js";
import { chars } from "../validation.js";
import { notFound, notRunning, noProcess, wakeFailed, wakeTimeout } from "../answers.js";
import { EmptyBody, ProjectParams } from "../projects/schemas.js";
import { route } from "../route.js";

export type ExecLimits = RuntimeConfig["exec"];
export const DEFAULT_LIMITS: ExecLimits = RuntimeConfig.parse({}).exec;

/**
 * The exec routes' body limit (the API's is 64 KiB): room for a long argv or a script, and some stdin.
 * The schema's own bounds keep every body it allows under it.
 */
export const EXEC_BODY_LIMIT = 8 * 1024 * 1024;

/** A foreground command's deadline when the caller gives none. */
export const DEFAULT_TIMEOUT_S = 300;

// Patterns rather than refinements, so that the OpenAPI document says what is accepted.
const NO_NUL = /^[^\u0000]*$/;
/** Up to `max` characters (as the document counts them: code points), no NUL. */
const noNul = (max: number, min = 0) =>
  chars(min, max).regex(NO_NUL, { message: "must not contain NUL characters" });

const Encoding = z.enum(["utf8", "base64"]).meta({
  description:
    "how output bytes are given: utf8 (invalid sequences become U+FFFD; a character split between chunks may too) or base64 (exact)",
});

/** The exec body; `maxTimeoutSeconds` is `runtime.exec.maxTimeoutSeconds`. */
export function execBody(maxTimeoutSeconds: number) {
  return z
    .object({
      command: z
        .union([
          z
            .array(noNul(4096))
            .min(1, { message: "must name a program (an empty argv runs nothing)" })
            .max(1024),
          noNul(65_536, 1),
        ])
        .meta({
          description:
            "an argv (no shell), or a string run by `bash -c`; with `shell: true` an argv is joined with spaces and run by `bash -c`",
        }),
      shell: z.boolean().optional(),
      cwd: noNul(4096).optional().meta({
        description: "working directory (default /workspace when the image has one, else /home/agent)",
      }),
      env: z
        .record(
          z
            .string()
            .regex(/^[A-Za-z_][A-Za-z0-9_]*$/, {
              message: "must be an environment variable's name (letters, digits, '_', not a digit first)",
            })
            .max(256),
          noNul(65_536),
        )
        .optional(),
      timeout_s: z
        .number()
        .int({ message: "must be a whole number of seconds" })
        .min(1, { message: "must be at least 1 second" })
        .max(maxTimeoutSeconds, {
          message: `must be at most ${maxTimeoutSeconds} seconds (agent-sandbox:runtime.exec.maxTimeoutSeconds)`,
        })
        .optional()
        .meta({
          description: `seconds until the whole process tree is killed (default ${DEFAULT_TIMEOUT_S}, or the maximum for a background process)`,
        }),
      stdin: chars(0, 1024 * 1024)
        .optional()
        .meta({ description: "written to the command's stdin (UTF-8), then closed" }),
      output_encoding: Encoding.optional(),
      background: z
        .boolean()
        .optional()
        .meta({ description: "start and answer 202 at once; read its output from /processes/{execId}" }),
    })
    .strict();
}
export const ExecBody = execBody(DEFAULT_LIMITS.maxTimeoutSeconds);
export const ExecStreamBody = ExecBody.omit({ background: true });
export type ExecRequest = z.infer<typeof ExecBody>;

export const ProcessParams = z
  .object({
    id: z.uuid({ message: "must be a project id (UUID)" }),
    execId: z.uuid({ message: "must be an exec id (UUID)" }),
  })
  .strict();
export const ProcessOutputQuery = z
  .object({
    offset: z.coerce.number().int().min(0).default(0),
    encoding: Encoding.default("utf8"),
  })
  .strict();
export const SignalBody = z.object({ signal: z.enum(SIGNALS) }).strict();
export const PortsBody = z
  .object({
    ports: z.array(
      z.object({ port: z.number().int(), address: z.string(), protocol: z.enum(["tcp", "udp"]) }).strict(),
    ),
  })
  .strict();
export const ExecAuditQuery = z
  .object({ limit: z.coerce.number().int().min(1).max(1000).default(100) })
  .strict();

export const ExecResultBody = z
  .object({
    exec_id: z.string(),
    exit_code: z.number().int(),
    stdout: z.string(),
    stderr: z.string(),
    output_encoding: Encoding,
    /** All the bytes the command wrote, kept or not. */
    stdout_bytes: z.number().int(),
    stderr_bytes: z.number().int(),
    /** Some output is missing: a stream wrote more than `output_cap_bytes`. */
    truncated: z.boolean(),
    output_cap_bytes: z.number().int(),
    timed_out: z.boolean(),
    duration_ms: z.number().int(),
  })
  .strict();
export const ProcessBody = z
  .object({
    exec_id: z.string(),
    command: z.array(z.string()),
    shell: z.boolean(),
    cwd: z.string().nullable(),
    started_at: z.iso.datetime(),
    finished_at: z.iso.datetime().nullable(),
    running: z.boolean(),
    exit_code: z.number().int().nullable(),
    timed_out: z.boolean(),
    killed_by: z.string().nullable(),
    stdout_bytes: z.number().int(),
    stderr_bytes: z.number().int(),
  })
  .strict();
export const ProcessListBody = z.object({ processes: z.array(ProcessBody) }).strict();
export const ProcessOutputBody = ProcessBody.extend({
  output: z.array(z.object({ stream: z.enum(["stdout", "stderr"]), data: z.string() }).strict()),
  encoding: Encoding,
  /** Where this answer starts (later than asked when older output was dropped) and the next read's. */
  offset: z.number().int(),
  next_offset: z.number().int(),
  /** Output no longer kept (agent-sandbox:runtime.exec.backgroundOutputBytes): offsets below it. */
  dropped_bytes: z.number().int(),
}).strict();
export const SignalResultBody = ProcessBody.extend({ signalled: z.number().int() }).strict();
export const ExecAuditBody = z
  .object({
    execs: z.array(
      z
        .object({
          id: z.string(),
          user_id: z.string(),
          command: z.array(z.string()),
          shell: z.boolean(),
          cwd: z.string().nullable(),
          env_names: z.array(z.string()),
          background: z.boolean(),
          started_at: z.iso.datetime(),
          finished_at: z.iso.datetime().nullable(),
          exit_code: z.number().int().nullable(),
          duration_ms: z.number().int().nullable(),
          stdin_bytes: z.number().int(),
          stdout_bytes: z.number().int(),
          stderr_bytes: z.number().int(),
          timed_out: z.boolean(),
          killed_by: z.string().nullable(),
        })
        .strict(),
    ),
  })
  .strict();
/** One line of POST /exec/stream's NDJSON answer. */
export const ExecStreamEvent = z.discriminatedUnion("type", [
  z.object({ type: z.literal("start"), exec_id: z.string() }).strict(),
  z.object({ type: z.enum(["stdout", "stderr"]), data: z.string() }).strict(),
  z
    .object({
      type: z.literal("exit"),
      exit_code: z.number().int(),
      timed_out: z.boolean(),
      duration_ms: z.number().int(),
      stdout_bytes: z.number().int(),
      stderr_bytes: z.number().int(),
    })
    .strict(),
  z.object({ type: z.literal("error"), message: z.string() }).strict(),
]);

export const execRoute = route({
  method: "post",
  path: "/projects/{id}/exec",
  summary:
    "Run a command in the sandbox as the agent: the answer when it ends (output capped at agent-sandbox:runtime.exec.bufferedOutputBytes per stream, `truncated`), or with `background` at once; a timeout kills its whole process tree, and so does a client that leaves; audited",
  params: ProjectParams,
  body: ExecBody,
  bodyLimit: EXEC_BODY_LIMIT,
  access: "owner",
  responses: {
    200: { description: "it ended (its exit code; 127: no such command)", body: ExecResultBody },
    202: {
      description: "started in the background: follow /projects/{id}/processes/{execId}",
      body: ProcessBody,
    },
    404: notFound,
    409: notRunning,
    429: "the project runs as many background processes as agent-sandbox:runtime.exec.maxBackgroundProcesses allows",
    500: wakeFailed,
    504: wakeTimeout,
  },
});

export const execStreamRoute = route({
  method: "post",
  path: "/projects/{id}/exec/stream",
  summary:
    "Run a command as POST /projects/{id}/exec does, its output streamed as it comes: NDJSON lines `start`, `stdout`/`stderr` (in order), then `exit` (or `error`); a client that leaves kills the command",
  params: ProjectParams,
  body: ExecStreamBody,
  bodyLimit: EXEC_BODY_LIMIT,
  access: "owner",
  responses: {
    200: {
      description: "one JSON object per line (ExecStreamEvent: start, stdout, stderr, exit, error)",
      body: z.string(),
      contentType: "application/x-ndjson",
    },
    404: notFound,
    409: notRunning,
    500: wakeFailed,
    504: wakeTimeout,
  },
});

export const signalProcessRoute = route({
  method: "post",
  path: "/projects/{id}/processes/{execId}/signal",
  summary: "Signal a background process's process groups (KILL: its whole tree)",
  params: ProcessParams,
  body: SignalBody,
  access: "owner",
  responses: {
    200: { description: "signalled: how many processes", body: SignalResultBody },
    404: noProcess,
    409: "the process has exited, or the sandbox is not running",
  },
});

export const getProcessRoute = route({
  method: "get",
  path: "/projects/{id}/processes/{execId}",
  summary:
    "A background process: its state, and its output (both streams in order) from a byte offset; the newest agent-sandbox:runtime.exec.backgroundOutputBytes are kept, and agent-sandbox:runtime.exec.backgroundOutputBytesPerProject of all the project's together",
  params: ProcessParams,
  query: ProcessOutputQuery,
  access: "owner",
  responses: { 200: { description: "state and output", body: ProcessOutputBody }, 404: noProcess },
});

export const deleteProcessRoute = route({
  method: "delete",
  path: "/projects/{id}/processes/{execId}",
  summary:
    "Kill a background process's whole tree and forget it: answers its end once it has exited; afterwards it is a 404",
  params: ProcessParams,
  body: EmptyBody,
  bodyOptional: true,
  access: "owner",
  responses: { 200: { description: "its end", body: ProcessBody }, 404: noProcess },
});

export const listProcessesRoute = route({
  method: "get",
  path: "/projects/{id}/processes",
  summary: "The project's background processes started through this runtime, newest first",
  params: ProjectParams,
  access: "owner",
  responses: { 200: { description: "the processes", body: ProcessListBody }, 404: notFound },
});

export const portsRoute = route({
  method: "get",
  path: "/projects/{id}/ports",
  summary: "The TCP and UDP ports listening inside the sandbox (address, port, protocol)",
  params: ProjectParams,
  access: "owner",
  responses: { 200: { description: "the ports", body: PortsBody }, 404: notFound, 409: notRunning },
});

export const execAuditRoute = route({
  method: "get",
  path: "/projects/{id}/execs",
  summary:
    "The audit of commands run through the API, newest first: who, argv, cwd, environment names, exit code, duration, byte counts, timeout (never stdin, output or environment values)",
  params: ProjectParams,
  query: ExecAuditQuery,
  access: "owner",
  responses: { 200: { description: "the execs", body: ExecAuditBody }, 404: notFound },
});

/** The routes above, in the document's order. */
export const execRoutes = [
  execRoute,
  execStreamRoute,
  signalProcessRoute,
  getProcessRoute,
  deleteProcessRoute,
  listProcessesRoute,
  portsRoute,
  execAuditRoute,
] as const;
