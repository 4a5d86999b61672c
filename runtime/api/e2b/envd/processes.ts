// envd's Process service: commands an E2B SDK starts in its sandbox, run through the sandbox's runner as the
// exec API runs them (Execution: the agent user, the exec wrapper, a deadline, a sandbox_execs audit row),
// and kept in a table per sandbox so that later calls find them by pid or tag: attach (Connect), list, write
// their stdin or terminal, close stdin, signal, resize.
import { randomUUID } from "node:crypto";
import { Code, ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { Execution } from "../../exec/execution.js";
import { EXEC_MARKER, type SandboxProcess } from "../../../sandbox/process.js";
import { Channel } from "./channel.js";
import { notRunning, sandboxPath, type EnvdOptions, type EnvdSandbox } from "./gate.js";
import {
  Process,
  Signal,
  type ProcessEventSchema,
  type ProcessSelector,
  type StartRequest,
} from "./gen/process/process_pb.js";

type ProcessEventInit = MessageInitShape<typeof ProcessEventSchema>;

/** One process an SDK started: its number, its command as asked, its execution and who is attached. */
interface EnvdProcess {
  readonly pid: number;
  readonly tag: string | undefined;
  readonly config: { cmd: string; args: string[]; envs: Record<string, string>; cwd?: string };
  readonly tty: boolean;
  readonly execution: Execution;
  readonly listeners: Set<Channel<ProcessEventInit>>;
  /** Listeners that have fallen behind: while any has, the process's output is not read. */
  behind: number;
}

/** Events queued for one attached client before the process's output is held back. */
const QUEUED_EVENTS = 256;
/** The first pid given out in a sandbox: numbers the SDK shows, stable for the process's life. */
const FIRST_PID = 1000;
const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** How a call finds its sandbox (the gate put it in the call's context). */
export type SandboxOf = (context: HandlerContext) => EnvdSandbox;

export function processService(options: EnvdOptions, sandboxOf: SandboxOf): ServiceImpl<typeof Process> {
  const { db, limits, log } = options;
  /** Each sandbox's processes by pid, and the next pid it gives out. */
  const tables = new Map<string, { next: number; processes: Map<number, EnvdProcess> }>();
  const tableOf = (projectId: string) => {
    let table = tables.get(projectId);
    if (!table) tables.set(projectId, (table = { next: FIRST_PID, processes: new Map() }));
    return table;
  };

  function find(sandbox: EnvdSandbox, selector: ProcessSelector | undefined): EnvdProcess {
    const processes = tableOf(sandbox.projectId).processes;
    const chosen = selector?.selector;
    if (chosen?.case === "pid") {
      const found = processes.get(chosen.value);
      if (found) return found;
      throw new ConnectError(`process with pid ${chosen.value} not found`, Code.NotFound);
    }
    if (chosen?.case === "tag") {
      for (const found of processes.values()) if (found.tag === chosen.value) return found;
      throw new ConnectError(`process with tag ${chosen.value.slice(0, 100)} not found`, Code.NotFound);
    }
    throw new ConnectError("process: a pid or a tag must be given", Code.InvalidArgument);
  }

  /** Attaches a client: its events from now on, until the process ends or the client goes. */
  function attach(process: EnvdProcess, context: HandlerContext): Channel<ProcessEventInit> {
    let behind = false;
    const channel = new Channel<ProcessEventInit>(QUEUED_EVENTS, (now) => {
      if (now === behind) return;
      behind = now;
      process.behind += now ? 1 : -1;
      if (process.behind === 0) process.execution.process?.resume();
      else if (now) process.execution.process?.pause();
    });
    process.listeners.add(channel);
    const detach = () => {
      process.listeners.delete(channel);
      if (behind && --process.behind === 0) process.execution.process?.resume();
      channel.end();
    };
    context.signal.addEventListener("abort", detach, { once: true });
    return channel;
  }

  async function* events(process: EnvdProcess, channel: Channel<ProcessEventInit>) {
    try {
      yield { event: { event: { case: "start" as const, value: { pid: process.pid } } } };
      for await (const event of channel) yield { event };
    } finally {
      process.listeners.delete(channel);
    }
  }

  function checkStart(request: StartRequest): { argv: string[]; env: Record<string, string> } {
    const config = request.process;
    if (!config?.cmd) throw new ConnectError("process.cmd: a program must be given", Code.InvalidArgument);
    const argv = [config.cmd, ...config.args];
    if (argv.some((word) => word.includes("\0")))
      throw new ConnectError(
        "process.cmd and process.args must not contain NUL characters",
        Code.InvalidArgument,
      );
    for (const [name, value] of Object.entries(config.envs)) {
      if (!ENV_NAME.test(name) || name.length > 256)
        throw new ConnectError(
          `process.envs: ${name.slice(0, 64)} is not an environment variable's name (letters, digits, '_', not a digit first)`,
          Code.InvalidArgument,
        );
      if (name === EXEC_MARKER)
        throw new ConnectError(`process.envs: ${EXEC_MARKER} is the runtime's own`, Code.InvalidArgument);
      if (value.includes("\0"))
        throw new ConnectError(`process.envs.${name} must not contain NUL characters`, Code.InvalidArgument);
    }
    const size = request.pty?.size;
    if (request.pty && !(size && size.cols > 0 && size.rows > 0 && size.cols <= 1000 && size.rows <= 1000))
      throw new ConnectError("pty.size: cols and rows must each be 1 to 1000", Code.InvalidArgument);
    return { argv, env: config.envs };
  }

  /** Starts the request's command with `first` attached before any output can come. */
  async function launch(sandbox: EnvdSandbox, request: StartRequest, context: HandlerContext) {
    const { argv, env: own } = checkStart(request);
    const env = { ...sandbox.envVars, ...own };
    const config = request.process!;
    const cwd =
      config.cwd === undefined || config.cwd === "" ? undefined : sandboxPath(config.cwd, "process.cwd");
    const table = tableOf(sandbox.projectId);
    const max = limits.exec.maxBackgroundProcesses;
    if (table.processes.size >= max)
      throw new ConnectError(
        `sandbox ${sandbox.projectId} already runs ${table.processes.size} processes, the most agent-sandbox:runtime.exec.maxBackgroundProcesses allows (${max}); wait for one to end, or kill one`,
        Code.ResourceExhausted,
      );
    const execution = new Execution(
      randomUUID(),
      sandbox.projectId,
      argv,
      { command: argv, shell: false, cwd, env, background: true },
      sandbox.runner,
      db,
      log,
    );
    const size = request.pty?.size;
    const process: EnvdProcess = {
      pid: table.next++,
      tag: request.tag,
      config: { cmd: config.cmd, args: [...config.args], envs: { ...env }, cwd },
      tty: size !== undefined,
      execution,
      listeners: new Set(),
      behind: 0,
    };
    const first = attach(process, context);
    const emit = (event: ProcessEventInit) => {
      for (const listener of process.listeners) listener.push(event);
    };
    table.processes.set(process.pid, process);
    try {
      await execution.start(
        sandbox.ownerId,
        limits.exec.maxTimeoutSeconds,
        (stream, chunk) =>
          emit({
            event: {
              case: "data",
              value: { output: { case: process.tty ? "pty" : stream, value: new Uint8Array(chunk) } },
            },
          }),
        {
          stdin: process.tty || request.stdin !== false ? "stream" : undefined,
          tty: size && { cols: size.cols, rows: size.rows },
        },
      );
    } catch (error) {
      table.processes.delete(process.pid);
      throw notRunning(sandbox.projectId, error);
    }
    void execution.finished.then(() => {
      table.processes.delete(process.pid);
      const code = execution.exitCode;
      emit({
        event: {
          case: "end",
          value: {
            exitCode: code ?? -1,
            exited: code !== null,
            status: code === null ? "unknown" : code > 128 ? `signal: ${code - 128}` : `exit status ${code}`,
            error: code === null ? "the process's output stream failed; its end is unknown" : undefined,
          },
        },
      });
      // The table (and its next pid) stays: a pid is never given out again, so a stale one finds nothing.
      for (const listener of process.listeners) listener.end();
    });
    return { process, first };
  }

  /** The process's stdin (or terminal), refused when it was started without one. */
  function inputOf(process: EnvdProcess): NodeJS.WritableStream {
    const input = process.execution.process.input;
    if (!input)
      throw new ConnectError(
        `process ${process.pid} was started without stdin (start it with stdin: true)`,
        Code.FailedPrecondition,
      );
    return input;
  }

  function write(process: EnvdProcess, input: { case: "stdin" | "pty" | undefined; value?: Uint8Array }) {
    if (input.case === undefined || input.value === undefined)
      throw new ConnectError("input: stdin or pty bytes must be given", Code.InvalidArgument);
    if (input.case === "pty" && !process.tty)
      throw new ConnectError(`process ${process.pid} has no terminal: send stdin`, Code.FailedPrecondition);
    inputOf(process).write(Buffer.from(input.value));
  }

  const running = (process: EnvdProcess): SandboxProcess => process.execution.process;

  return {
    async *start(request, context) {
      const { process, first } = await launch(sandboxOf(context), request, context);
      yield* events(process, first);
    },
    async *connect(request, context) {
      const process = find(sandboxOf(context), request.process);
      yield* events(process, attach(process, context));
    },
    list(_request, context) {
      const { processes } = tableOf(sandboxOf(context).projectId);
      return {
        processes: [...processes.values()].map((p) => ({ pid: p.pid, tag: p.tag, config: p.config })),
      };
    },
    sendInput(request, context) {
      write(find(sandboxOf(context), request.process), request.input?.input ?? { case: undefined });
      return {};
    },
    async streamInput(requests, context) {
      let process: EnvdProcess | undefined;
      for await (const request of requests) {
        const event = request.event;
        if (event.case === "start") process = find(sandboxOf(context), event.value.process);
        else if (event.case === "data") {
          if (!process)
            throw new ConnectError("a start event must name the process first", Code.InvalidArgument);
          write(process, event.value.input?.input ?? { case: undefined });
        }
      }
      return {};
    },
    closeStdin(request, context) {
      const process = find(sandboxOf(context), request.process);
      if (process.tty)
        throw new ConnectError(
          `process ${process.pid} runs on a terminal: send Ctrl-D (0x04) to end its input`,
          Code.FailedPrecondition,
        );
      inputOf(process).end();
      return {};
    },
    async sendSignal(request, context) {
      const process = find(sandboxOf(context), request.process);
      if (request.signal === Signal.SIGKILL) {
        // Answered once the process has ended and left the table, as the REST delete is: an SDK that
        // kills and then lists (E2B's `commands.kill` then `commands.list`) must not find it still there.
        await process.execution.kill("killed");
        await process.execution.finished;
        tableOf(sandboxOf(context).projectId).processes.delete(process.pid);
      } else if (request.signal === Signal.SIGTERM) await process.execution.signal("TERM");
      else throw new ConnectError("signal: must be SIGNAL_SIGTERM or SIGNAL_SIGKILL", Code.InvalidArgument);
      return {};
    },
    async update(request, context) {
      const process = find(sandboxOf(context), request.process);
      const size = request.pty?.size;
      if (!size) return {};
      if (!process.tty)
        throw new ConnectError(`process ${process.pid} has no terminal to resize`, Code.FailedPrecondition);
      if (!(size.cols > 0 && size.rows > 0 && size.cols <= 1000 && size.rows <= 1000))
        throw new ConnectError("pty.size: cols and rows must each be 1 to 1000", Code.InvalidArgument);
      await running(process).resize?.({ cols: size.cols, rows: size.rows });
      return {};
    },
  };
}
