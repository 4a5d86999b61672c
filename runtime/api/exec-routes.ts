// Commands in a sandbox through the API: POST /projects/{id}/exec (buffered JSON, or a
// background process), POST /projects/{id}/exec/stream (NDJSON), the background processes
// (/projects/{id}/processes...) and the audit (GET /projects/{id}/execs).
import { randomUUID } from "node:crypto";
import { PassThrough } from "node:stream";
import { StringDecoder } from "node:string_decoder";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { z } from "zod";
import { PROJECT, RuntimeConfig } from "../../stacks/config.js";
import type { Database } from "../db.js";
import { HttpError } from "../errors.js";
import { listExecs, recordExecEnd, recordExecStart } from "../sandbox/exec-audit.js";
import { SandboxNotRunningError } from "../sandbox/exec.js";
import { parseListening } from "../sandbox/ports.js";
import type { SandboxRunner, SandboxRunners } from "../sandbox/runner.js";
import type { TenantState } from "../tenants/service.js";
import {
  EXEC_MARKER,
  SIGNALS,
  type OutputStream,
  type SandboxProcess,
  type SignalName,
} from "../sandbox/process.js";
import type { Auth } from "./auth.js";
import { EmptyBody, ownProject, ProjectParams, projectStatus } from "./project-routes.js";
import { chars, parseInput } from "./validation.js";

export type ExecLimits = RuntimeConfig["exec"];
const DEFAULT_LIMITS: ExecLimits = RuntimeConfig.parse({}).exec;

/**
 * The exec routes' body limit (the API's is 64 KiB): room for a long argv or a script, and some stdin.
 * The schema's own bounds keep every body it allows under it.
 */
export const EXEC_BODY_LIMIT = 8 * 1024 * 1024;

/** A foreground command's deadline when the caller gives none. */
const DEFAULT_TIMEOUT_S = 300;

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
type ExecRequest = z.infer<typeof ExecBody>;

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

export interface ExecRoutesOptions {
  readonly db: Database;
  readonly auth: Auth;
  /** Each project's sandbox, by its backend (runtime/sandbox/runner.ts). */
  readonly sandboxes: SandboxRunners;
  readonly limits?: ExecLimits;
}

/** One run of a command: its process, its deadline, its counts and its audit row. */
class Execution {
  readonly startedAt = new Date();
  readonly bytes = { stdout: 0, stderr: 0 };
  exitCode: number | null = null;
  finishedAt: Date | null = null;
  timedOut = false;
  killedBy: string | null = null;
  process!: SandboxProcess;
  /** Settles when the process has exited and its audit row is closed. */
  finished!: Promise<void>;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    readonly id: string,
    readonly projectId: string,
    readonly argv: readonly string[],
    readonly request: ExecRequest,
    private readonly sandbox: SandboxRunner,
    private readonly db: Database,
    private readonly log: FastifyRequest["log"],
  ) {}

  get running(): boolean {
    return this.finishedAt === null;
  }

  async start(
    userId: string,
    timeoutSeconds: number,
    onOutput: (stream: OutputStream, chunk: Buffer) => void,
  ): Promise<void> {
    const { request } = this;
    const stdin = request.stdin === undefined ? undefined : Buffer.from(request.stdin);
    await recordExecStart(this.db, {
      id: this.id,
      projectId: this.projectId,
      userId,
      command: this.argv,
      shell: this.shell,
      cwd: request.cwd,
      envNames: Object.keys(request.env ?? {}),
      background: request.background ?? false,
      stdinBytes: stdin?.length ?? 0,
    });
    try {
      this.process = await this.sandbox.start(
        this.id,
        { argv: this.argv, cwd: request.cwd, env: request.env, stdin },
        (stream, chunk) => {
          this.bytes[stream] += chunk.length;
          onOutput(stream, chunk);
        },
      );
    } catch (error) {
      await this.end(null, "error");
      throw error;
    }
    this.timer = setTimeout(() => {
      this.timedOut = true;
      void this.kill("timeout");
    }, timeoutSeconds * 1000);
    this.finished = this.process.exited.then(
      (code) => this.end(code, this.killedBy),
      (error: unknown) => {
        this.log.warn({ err: error, exec: this.id }, "exec stream failed");
        return this.end(null, this.killedBy ?? "error");
      },
    );
  }

  get shell(): boolean {
    return this.request.shell ?? typeof this.request.command === "string";
  }

  /**
   * Kills the whole tree (KILL until none is left) unless it has already exited; answers how many
   * processes were killed. Its output is read on (and dropped by a reader that has gone) to its end.
   */
  async kill(reason: string): Promise<number> {
    if (!this.running) return 0;
    this.killedBy ??= reason;
    this.process.resume();
    try {
      return await this.sandbox.signal(this.id, "KILL");
    } catch (error) {
      // A sandbox stopped meanwhile took the processes with it.
      if (!(error instanceof SandboxNotRunningError))
        this.log.warn({ err: error, exec: this.id }, "killing an exec's processes failed");
      return 0;
    }
  }

  /** Sends `signal` to the whole tree (KILL: see {@link kill}); how many processes it found. */
  signal(signal: SignalName): Promise<number> {
    return this.sandbox.signal(this.id, signal);
  }

  private async end(exitCode: number | null, killedBy: string | null): Promise<void> {
    clearTimeout(this.timer);
    this.exitCode = exitCode;
    this.finishedAt = new Date();
    this.killedBy = killedBy;
    await recordExecEnd(this.db, this.id, {
      exitCode,
      durationMs: this.durationMs,
      stdoutBytes: this.bytes.stdout,
      stderrBytes: this.bytes.stderr,
      timedOut: this.timedOut,
      killedBy,
    }).catch((error: unknown) => this.log.error({ err: error, exec: this.id }, "exec audit not closed"));
  }

  get durationMs(): number {
    return (this.finishedAt ?? new Date()).getTime() - this.startedAt.getTime();
  }

  view(): z.infer<typeof ProcessBody> {
    return {
      exec_id: this.id,
      command: [...this.argv],
      shell: this.shell,
      cwd: this.request.cwd ?? null,
      started_at: this.startedAt.toISOString(),
      finished_at: this.finishedAt?.toISOString() ?? null,
      running: this.running,
      exit_code: this.exitCode,
      timed_out: this.timedOut,
      killed_by: this.killedBy,
      stdout_bytes: this.bytes.stdout,
      stderr_bytes: this.bytes.stderr,
    };
  }
}

/**
 * What one project's background processes hold: how many run (or are starting), and the output their logs
 * keep together, at most `capacity` bytes: past it, the log keeping the most drops its oldest output.
 */
export class ProjectBackground {
  running = 0;
  kept = 0;
  readonly logs = new Set<OutputLog>();

  constructor(readonly capacity: number) {}

  /** Drops output until the project's logs keep at most its capacity together. */
  trim(): void {
    while (this.kept > this.capacity) {
      let largest: OutputLog | undefined;
      for (const log of this.logs) if (!largest || log.kept > largest.kept) largest = log;
      if (!largest || largest.dropOldest() === 0) return;
    }
  }

  forget(log: OutputLog): void {
    if (!this.logs.delete(log)) return;
    this.kept -= log.kept;
  }
}

/**
 * A background process's output, the newest `capacity` bytes of both streams (less when its project's
 * other logs take their share), by offset.
 */
export class OutputLog {
  private chunks: { stream: OutputStream; start: number; data: Buffer }[] = [];
  kept = 0;
  total = 0;
  dropped = 0;

  constructor(
    private readonly capacity: number,
    private readonly project: ProjectBackground,
  ) {
    project.logs.add(this);
  }

  push(stream: OutputStream, data: Buffer): void {
    this.chunks.push({ stream, start: this.total, data });
    this.total += data.length;
    this.kept += data.length;
    this.project.kept += data.length;
    while (this.kept > this.capacity && this.dropOldest() > 0);
    this.project.trim();
  }

  /** Drops the oldest chunk kept; how many bytes that freed. */
  dropOldest(): number {
    const oldest = this.chunks.shift();
    if (!oldest) return 0;
    this.kept -= oldest.data.length;
    this.project.kept -= oldest.data.length;
    this.dropped = oldest.start + oldest.data.length;
    return oldest.data.length;
  }

  since(offset: number): { offset: number; chunks: { stream: OutputStream; data: Buffer }[] } {
    const from = Math.max(offset, this.dropped);
    const chunks = this.chunks
      .filter((c) => c.start + c.data.length > from)
      .map((c) => ({ stream: c.stream, data: c.data.subarray(Math.max(0, from - c.start)) }));
    return { offset: Math.min(from, this.total), chunks };
  }
}

/** A 409 naming the project's status, for a sandbox the engine says is not running. */
export function notRunning(
  id: string,
  project: { state: TenantState; running: boolean },
  error?: SandboxNotRunningError,
): HttpError {
  const status = projectStatus(project.state, { running: project.running });
  if (status === "running" && error?.reason)
    return new HttpError(
      409,
      "sandbox_not_running",
      `project ${id}'s sandbox cannot be reached: ${error.reason}`,
      {
        status,
      },
    );
  return new HttpError(
    409,
    "sandbox_not_running",
    `project ${id}'s sandbox is ${status === "running" ? `not running (its ${error?.sandboxNoun ?? "sandbox"} is down)` : status}; start it first`,
    { status },
  );
}

/** Background processes kept per project once finished (the oldest finished go first). */
const FINISHED_KEPT = 50;

export function registerExecRoutes(app: FastifyInstance, options: ExecRoutesOptions): void {
  const { db, auth, sandboxes } = options;
  const limits = options.limits ?? DEFAULT_LIMITS;
  const Body = execBody(limits.maxTimeoutSeconds);
  const StreamBody = Body.omit({ background: true });
  /** This runtime's background processes: they are the runtime's to list and read while it runs. */
  const background = new Map<string, { execution: Execution; output: OutputLog }>();
  /** What each project's background processes hold (running, output kept), while it has any. */
  const projects = new Map<string, ProjectBackground>();
  const projectBackground = (id: string): ProjectBackground => {
    let project = projects.get(id);
    if (!project) projects.set(id, (project = new ProjectBackground(limits.backgroundOutputBytesPerProject)));
    return project;
  };
  const processesKey = `${PROJECT}:runtime.exec.maxBackgroundProcesses`;
  /** Counts one more running background process of `id`, or refuses it: the project has its most. */
  const admitBackground = (id: string): void => {
    const project = projectBackground(id);
    const max = limits.maxBackgroundProcesses;
    if (project.running >= max)
      throw new HttpError(
        429,
        "too_many_processes",
        `project ${id} already runs ${project.running} background processes, the most ${processesKey} allows (${max}); wait for one to end, or stop one (DELETE /projects/${id}/processes/{execId})`,
        { max_background_processes: max, config_key: processesKey },
      );
    project.running += 1;
  };

  const argvOf = (request: ExecRequest): string[] => {
    const shell = request.shell ?? typeof request.command === "string";
    const text = typeof request.command === "string" ? request.command : request.command.join(" ");
    if (shell) return ["/bin/bash", "-c", text];
    return typeof request.command === "string" ? [request.command] : [...request.command];
  };

  /** The caller's project, and its sandbox's engine refusal turned into a 409 naming its status. */
  async function launch(
    request: FastifyRequest,
    { userId, id, body }: { userId: string; id: string; body: ExecRequest },
    onOutput: (stream: OutputStream, chunk: Buffer) => void,
    admit?: () => void,
  ): Promise<Execution> {
    const project = await ownProject(db, userId, id);
    if (body.env && EXEC_MARKER in body.env)
      throw new HttpError(
        400,
        "validation_failed",
        `invalid body: env.${EXEC_MARKER}: is the runtime's own`,
        [{ field: `env.${EXEC_MARKER}`, message: "is set by the runtime to find the command's processes" }],
      );
    // The owner's own limits once the project is known to be theirs (a stranger learns nothing of them).
    admit?.();
    const timeout = body.timeout_s ?? (body.background ? limits.maxTimeoutSeconds : DEFAULT_TIMEOUT_S);
    try {
      const execution = new Execution(
        randomUUID(),
        id,
        argvOf(body),
        body,
        await sandboxes(id),
        db,
        request.log,
      );
      await execution.start(userId, timeout, onOutput);
      return execution;
    } catch (error) {
      if (error instanceof SandboxNotRunningError) throw notRunning(id, project, error);
      throw error;
    }
  }

  /** A client that goes away before the answer takes its command with it. */
  const killOnDisconnect = (reply: FastifyReply, execution: Execution) =>
    reply.raw.on("close", () => {
      if (execution.running && !reply.raw.writableFinished) void execution.kill("client-disconnected");
    });

  /** Who asks about which project, then the body: what every exec route reads first, in this order. */
  async function readExec<T extends ExecRequest>(request: FastifyRequest, schema: z.ZodType<T>) {
    const userId = await auth.authenticate(request.headers.authorization);
    const { id } = parseInput(ProjectParams, request.params, "params");
    return { userId, id, body: parseInput(schema, request.body, "body") };
  }

  app.post("/projects/:id/exec", { bodyLimit: EXEC_BODY_LIMIT }, async (request, reply) => {
    const asked = await readExec(request, Body);
    const { body } = asked;
    if (body.background) {
      const project = projectBackground(asked.id);
      const output = new OutputLog(limits.backgroundOutputBytes, project);
      let admitted = false;
      let execution: Execution;
      try {
        execution = await launch(
          request,
          asked,
          (stream, chunk) => output.push(stream, chunk),
          () => {
            admitBackground(asked.id);
            admitted = true;
          },
        );
      } catch (error) {
        if (admitted) project.running -= 1;
        forgetOutput(asked.id, output);
        throw error;
      }
      background.set(execution.id, { execution, output });
      void execution.finished.then(() => {
        project.running -= 1;
        forgetFinished(execution.projectId);
      });
      return reply.status(202).send(execution.view());
    }
    const cap = limits.bufferedOutputBytes;
    const kept = { stdout: [] as Buffer[], stderr: [] as Buffer[] };
    const keptBytes = { stdout: 0, stderr: 0 };
    const execution = await launch(request, asked, (stream, chunk) => {
      const room = cap - keptBytes[stream];
      if (room <= 0) return;
      const part = chunk.length > room ? chunk.subarray(0, room) : chunk;
      kept[stream].push(part);
      keptBytes[stream] += part.length;
    });
    killOnDisconnect(reply, execution);
    await execution.finished;
    const encoding = body.output_encoding ?? "utf8";
    return reply.send({
      exec_id: execution.id,
      exit_code: execution.exitCode ?? -1,
      stdout: Buffer.concat(kept.stdout).toString(encoding),
      stderr: Buffer.concat(kept.stderr).toString(encoding),
      output_encoding: encoding,
      stdout_bytes: execution.bytes.stdout,
      stderr_bytes: execution.bytes.stderr,
      truncated: execution.bytes.stdout > cap || execution.bytes.stderr > cap,
      output_cap_bytes: cap,
      timed_out: execution.timedOut,
      duration_ms: execution.durationMs,
    } satisfies z.infer<typeof ExecResultBody>);
  });

  app.post("/projects/:id/exec/stream", { bodyLimit: EXEC_BODY_LIMIT }, async (request, reply) => {
    const asked = await readExec(request, StreamBody);
    const { body } = asked;
    const encoding = body.output_encoding ?? "utf8";
    const out = new PassThrough();
    // Written after the client left (the exit line of a killed command): nowhere to go, nothing to report.
    out.on("error", () => undefined);
    const line = (event: z.infer<typeof ExecStreamEvent>) => out.write(`${JSON.stringify(event)}\n`);
    const decoders = { stdout: new StringDecoder("utf8"), stderr: new StringDecoder("utf8") };
    // Output may come before launch() returns.
    const started: { execution?: Execution } = {};
    // Back-pressure: a client that reads slowly slows the command (its pipe fills), nothing piles up here.
    const onOutput = (stream: OutputStream, chunk: Buffer) => {
      if (out.destroyed) return;
      const data = encoding === "base64" ? chunk.toString("base64") : decoders[stream].write(chunk);
      if (data === "" || line({ type: stream, data })) return;
      started.execution?.process.pause();
      out.once("drain", () => started.execution?.process.resume());
    };
    const execution = (started.execution = await launch(request, asked, onOutput));
    line({ type: "start", exec_id: execution.id });
    killOnDisconnect(reply, execution);
    const running = execution;
    void running.finished.then(() => {
      if (out.destroyed) return;
      if (encoding === "utf8")
        for (const stream of ["stdout", "stderr"] as const) {
          const rest = decoders[stream].end();
          if (rest) line({ type: stream, data: rest });
        }
      if (running.exitCode === null)
        line({ type: "error", message: "the command's output stream failed; its end is unknown" });
      else
        line({
          type: "exit",
          exit_code: running.exitCode,
          timed_out: running.timedOut,
          duration_ms: running.durationMs,
          stdout_bytes: running.bytes.stdout,
          stderr_bytes: running.bytes.stderr,
        });
      out.end();
    });
    return reply.type("application/x-ndjson; charset=utf-8").header("cache-control", "no-store").send(out);
  });

  /** Keeps at most FINISHED_KEPT finished background processes per project. */
  function forgetFinished(projectId: string): void {
    const finished = [...background.values()].filter(
      (b) => b.execution.projectId === projectId && !b.execution.running,
    );
    for (const old of finished.slice(0, Math.max(0, finished.length - FINISHED_KEPT))) {
      background.delete(old.execution.id);
      forgetOutput(projectId, old.output);
    }
  }

  /** A log nobody can read anymore leaves its project's count; a project with nothing left, the map. */
  function forgetOutput(projectId: string, output: OutputLog): void {
    const project = projects.get(projectId);
    if (!project) return;
    project.forget(output);
    if (project.logs.size === 0 && project.running === 0) projects.delete(projectId);
  }

  async function ownProcess(request: FastifyRequest) {
    const userId = await auth.authenticate(request.headers.authorization);
    const { id, execId } = parseInput(ProcessParams, request.params, "params");
    await ownProject(db, userId, id);
    const found = background.get(execId);
    if (!found || found.execution.projectId !== id)
      throw new HttpError(
        404,
        "not_found",
        `project ${id} has no background process ${execId} in this runtime`,
      );
    return found;
  }

  app.get("/projects/:id/processes", async (request) => {
    const userId = await auth.authenticate(request.headers.authorization);
    const { id } = parseInput(ProjectParams, request.params, "params");
    await ownProject(db, userId, id);
    return {
      processes: [...background.values()]
        .filter((b) => b.execution.projectId === id)
        .map((b) => b.execution.view())
        .reverse(),
    };
  });

  app.get("/projects/:id/processes/:execId", async (request) => {
    const { offset, encoding } = parseInput(ProcessOutputQuery, request.query, "query");
    const { execution, output } = await ownProcess(request);
    const since = output.since(offset);
    return {
      ...execution.view(),
      output: since.chunks.map((c) => ({ stream: c.stream, data: c.data.toString(encoding) })),
      encoding,
      offset: since.offset,
      next_offset: output.total,
      dropped_bytes: output.dropped,
    } satisfies z.infer<typeof ProcessOutputBody>;
  });

  app.post("/projects/:id/processes/:execId/signal", async (request) => {
    const { signal } = parseInput(SignalBody, request.body, "body");
    const { execution } = await ownProcess(request);
    if (!execution.running)
      throw new HttpError(409, "conflict", `process ${execution.id} has exited (code ${execution.exitCode})`);
    const signalled = signal === "KILL" ? await execution.kill("killed") : await execution.signal(signal);
    return { ...execution.view(), signalled } satisfies z.infer<typeof SignalResultBody>;
  });

  // A deleted process is gone: its end is the answer here, and afterwards it is a 404 like any unknown one.
  app.delete("/projects/:id/processes/:execId", async (request) => {
    parseInput(EmptyBody, request.body, "body");
    const { execution, output } = await ownProcess(request);
    await execution.kill("killed");
    await execution.finished;
    if (background.delete(execution.id)) forgetOutput(execution.projectId, output);
    return execution.view();
  });

  app.get("/projects/:id/ports", async (request) => {
    const userId = await auth.authenticate(request.headers.authorization);
    const { id } = parseInput(ProjectParams, request.params, "params");
    const project = await ownProject(db, userId, id);
    try {
      const sandbox = await sandboxes(id);
      const { exitCode, stdout, stderr } = await sandbox.run(["ss", "-H", "-l", "-n", "-t", "-u"], {
        timeoutMs: 10_000,
      });
      if (exitCode !== 0) throw new Error(`ss exited ${exitCode}: ${stderr.slice(0, 200)}`);
      return { ports: parseListening(stdout) };
    } catch (error) {
      if (error instanceof SandboxNotRunningError) throw notRunning(id, project, error);
      throw error;
    }
  });

  app.get("/projects/:id/execs", async (request) => {
    const userId = await auth.authenticate(request.headers.authorization);
    const { id } = parseInput(ProjectParams, request.params, "params");
    const { limit } = parseInput(ExecAuditQuery, request.query, "query");
    await ownProject(db, userId, id);
    return { execs: await listExecs(db, id, limit) };
  });
}
