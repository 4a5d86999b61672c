// Commands in a sandbox through the API: POST /projects/{id}/exec (buffered JSON, or a
// background process), POST /projects/{id}/exec/stream (NDJSON), the background processes
// (/projects/{id}/processes...) and the audit (GET /projects/{id}/execs).
import { randomUUID } from "node:crypto";
import { PassThrough } from "node:stream";
import { StringDecoder } from "node:string_decoder";
import type { FastifyReply, FastifyRequest } from "fastify";
import { z } from "zod";
import { PROJECT } from "../../../stacks/config.js";
import type { Database } from "../../store/db.js";
import { HttpError } from "../../errors.js";
import { listExecs } from "../../store/audit.js";
import { SandboxNotRunningError } from "../../sandbox/exec.js";
import { parseListening } from "../../sandbox/ports.js";
import type { SandboxRunners } from "../../sandbox/runner.js";
import { EXEC_MARKER, type OutputStream } from "../../sandbox/process.js";
import type { ProjectRow } from "../../store/project-view.js";
import { sandboxNotRunning } from "../projects/view.js";
import { type Routes } from "../route.js";
import { awake } from "../wake.js";

import {
  DEFAULT_LIMITS,
  DEFAULT_TIMEOUT_S,
  execBody,
  ExecResultBody,
  ExecStreamEvent,
  ProcessOutputBody,
  SignalResultBody,
  type ExecLimits,
  type ExecRequest,
  execRoute,
  execStreamRoute,
  signalProcessRoute,
  getProcessRoute,
  deleteProcessRoute,
  listProcessesRoute,
  portsRoute,
  execAuditRoute,
} from "./schemas.js";
import { Execution, OutputLog, ProjectBackground } from "./execution.js";
export interface ExecRoutesOptions {
  readonly db: Database;
  /** Each project's sandbox, by its backend (runtime/sandbox/runner.ts). */
  readonly sandboxes: SandboxRunners;
  readonly limits?: ExecLimits;
}

/** Who runs what in which project: an exec route's input once its caller is known to own the project. */
interface ExecAsked {
  readonly userId: string;
  readonly id: string;
  readonly body: ExecRequest;
  readonly project: ProjectRow;
}

/** Background processes kept per project once finished (the oldest finished go first). */
const FINISHED_KEPT = 50;

export function registerExecRoutes(routes: Routes, options: ExecRoutesOptions): void {
  const { db, sandboxes } = options;
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
    { userId, id, body, project }: ExecAsked,
    onOutput: (stream: OutputStream, chunk: Buffer) => void,
    admit?: () => void,
  ): Promise<Execution> {
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
      // A sandbox the platform put to sleep is woken for the command (the request held while it starts).
      return await awake(db, request, id, async () => {
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
      });
    } catch (error) {
      if (error instanceof SandboxNotRunningError) throw sandboxNotRunning(id, project, error);
      throw error;
    }
  }

  /** A client that goes away before the answer takes its command with it. */
  const killOnDisconnect = (reply: FastifyReply, execution: Execution) =>
    reply.raw.on("close", () => {
      if (execution.running && !reply.raw.writableFinished) void execution.kill("client-disconnected");
    });

  routes.handle(
    execRoute,
    async ({ request, reply, userId, params: { id }, body, project }) => {
      const asked = { userId, id, body, project };
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
    },
    { body: Body },
  );

  routes.handle(
    execStreamRoute,
    async ({ request, reply, userId, params: { id }, body, project }) => {
      const asked = { userId, id, body, project };
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
    },
    { body: StreamBody },
  );

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

  /** The owner's background process `execId` of project `id`, kept by this runtime. */
  function ownProcess({ id, execId }: { id: string; execId: string }) {
    const found = background.get(execId);
    if (!found || found.execution.projectId !== id)
      throw new HttpError(
        404,
        "not_found",
        `project ${id} has no background process ${execId} in this runtime`,
      );
    return found;
  }

  routes.handle(listProcessesRoute, async ({ params: { id } }) => {
    return {
      processes: [...background.values()]
        .filter((b) => b.execution.projectId === id)
        .map((b) => b.execution.view())
        .reverse(),
    };
  });

  routes.handle(getProcessRoute, async ({ params, query: { offset, encoding } }) => {
    const { execution, output } = ownProcess(params);
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

  routes.handle(signalProcessRoute, async ({ params, body: { signal } }) => {
    const { execution } = ownProcess(params);
    if (!execution.running)
      throw new HttpError(409, "conflict", `process ${execution.id} has exited (code ${execution.exitCode})`);
    const signalled = signal === "KILL" ? await execution.kill("killed") : await execution.signal(signal);
    return { ...execution.view(), signalled } satisfies z.infer<typeof SignalResultBody>;
  });

  // A deleted process is gone: its end is the answer here, and afterwards it is a 404 like any unknown one.
  routes.handle(deleteProcessRoute, async ({ params }) => {
    const { execution, output } = ownProcess(params);
    await execution.kill("killed");
    await execution.finished;
    if (background.delete(execution.id)) forgetOutput(execution.projectId, output);
    return execution.view();
  });

  routes.handle(portsRoute, async ({ params: { id }, project }) => {
    try {
      const sandbox = await sandboxes(id);
      const { exitCode, stdout, stderr } = await sandbox.run(["ss", "-H", "-l", "-n", "-t", "-u"], {
        timeoutMs: 10_000,
      });
      if (exitCode !== 0) throw new Error(`ss exited ${exitCode}: ${stderr.slice(0, 200)}`);
      return { ports: parseListening(stdout) };
    } catch (error) {
      if (error instanceof SandboxNotRunningError) throw sandboxNotRunning(id, project, error);
      throw error;
    }
  });

  routes.handle(execAuditRoute, async ({ params: { id }, query: { limit } }) => {
    return { execs: await listExecs(db, id, limit) };
  });
}
