// How the API and the reconciler run something in a project's sandbox, whatever its backend: a
// container through the engine's exec API, a microVM over its sshd with the platform's key. Both run the same
// scripts (the exec wrapper, the files script, the signal scan, sandbox-backup) as the same users, so exec,
// files, sync, ports, backups and their audit behave the same on either.
import { constants } from "node:os";
import type Docker from "dockerode";
import type { Client, ClientChannel } from "ssh2";
import { tenantNames } from "../../components/tenant/names.js";
import { execInSandbox, ExecTimeoutError, type ExecResult } from "./exec.js";
import type { ExecLaunchers } from "./launcher.js";
import {
  EXEC_MARKER,
  processArgv,
  signalArgv,
  signalTree,
  startSandboxProcess,
  type OutputStream,
  type SandboxCommand,
  type SandboxProcess,
  type SignalName,
  type TerminalSize,
} from "./process.js";
import { shellWord, sshConnect, sshExec, WITH_SANDBOX_ENV, type SshTarget } from "./ssh.js";

export interface SandboxRunner {
  /** Starts `command` as the agent, leading a session of its own and marked with `id` (runtime/sandbox/process.ts). */
  start(
    id: string,
    command: SandboxCommand,
    onOutput: (stream: OutputStream, chunk: Buffer) => void,
  ): Promise<SandboxProcess>;
  /** Sends `signal` to every process of exec `id`; how many it found. */
  signal(id: string, signal: SignalName): Promise<number>;
  /**
   * Runs `argv` to its end, its output bounded, `stdin` (if given) its whole input. As the agent; `root` only
   * for what the platform itself runs there (the final backup, a microVM's storage token), which a microVM's
   * guest allows root's key and nothing else.
   */
  run(
    argv: readonly string[],
    options?: { root?: boolean; timeoutMs?: number; stdin?: Buffer },
  ): Promise<ExecResult>;
}

/** A project's sandbox runner; every call throws SandboxNotRunningError when the sandbox is not running. */
export type SandboxRunners = (projectId: string) => Promise<SandboxRunner>;

/**
 * The engine's exec API into the project's container; with `launchers`, commands without a terminal become
 * the sandbox's waiting launcher (launcher.ts).
 */
export function dockerRunner(docker: Docker, projectId: string, launchers?: ExecLaunchers): SandboxRunner {
  const container = tenantNames(projectId).container;
  return {
    start: (id, command, onOutput) =>
      startSandboxProcess(docker, container, id, command, onOutput, launchers),
    signal: (id, signal) => signalTree(docker, container, id, signal),
    run: (argv, options = {}) =>
      execInSandbox(docker, container, argv, {
        user: options.root ? "root" : "agent",
        timeoutMs: options.timeoutMs,
        stdin: options.stdin,
      }),
  };
}

/** Output kept per stream of a {@link SandboxRunner.run}; more is cut (its exit code still counts). */
const MAX_OUTPUT_BYTES = 1024 * 1024;

/** The command line sshd's login shell runs: the guest's login environment, then `env` with ours, then argv. */
const commandLine = (argv: readonly string[], env: Readonly<Record<string, string>> = {}) => {
  const assignments = Object.entries(env).map(([name, value]) => shellWord(`${name}=${value}`));
  return WITH_SANDBOX_ENV(`exec ${["env", ...assignments].join(" ")} ${argv.map(shellWord).join(" ")}`);
};

/** An exit code as a container's: the status, or 128 + n for a process that signal n ended (`SIGKILL`: 137). */
const exitCodeOf = (code: number | null | undefined, signal: string | undefined): number | undefined => {
  if (typeof code === "number") return code;
  const name = signal?.startsWith("SIG") ? signal : `SIG${signal}`;
  const number = signal ? constants.signals[name as keyof typeof constants.signals] : undefined;
  return number === undefined ? undefined : 128 + number;
};

/**
 * A command on its own connection: its stdout and stderr as they come, its stdin as asked, and its exit code
 * once both streams have ended. A connection that goes before the command's status (the VM stopped) rejects.
 */
async function sshProcess(
  target: SshTarget,
  line: string,
  stdin: SandboxCommand["stdin"],
  onOutput: (stream: OutputStream, chunk: Buffer) => void,
  user?: string,
  tty?: TerminalSize,
): Promise<{ channel: ClientChannel; client: Client; exited: Promise<number> }> {
  const client = await sshConnect(target, { user });
  let channel: ClientChannel;
  try {
    channel = await sshExec(client, line, { pty: tty });
  } catch (error) {
    client.end();
    throw error;
  }
  channel.on("data", (chunk: Buffer) => onOutput("stdout", chunk));
  channel.stderr.on("data", (chunk: Buffer) => onOutput("stderr", chunk));
  channel.on("error", () => undefined);
  if (Buffer.isBuffer(stdin)) channel.end(stdin);
  else if (stdin === undefined) channel.end();
  const exited = Promise.all([
    new Promise<number | undefined>((resolve) =>
      channel.once("close", (code: number | null, signal?: string) => resolve(exitCodeOf(code, signal))),
    ),
    new Promise((resolve) => channel.stderr.once("close", resolve)),
  ]).then(([code]) => {
    client.end();
    if (code === undefined) throw new Error(`the connection to ${target.host} ended before the command did`);
    return code;
  });
  // Nobody may be left with an unhandled rejection when the caller detaches and never awaits.
  exited.catch(() => undefined);
  return { channel, client, exited };
}

/** Over the guest's sshd: the agent with the platform's key, root only through the guest's forced command. */
export function sshRunner(target: SshTarget): SandboxRunner {
  return {
    async start(id, command, onOutput) {
      const line = commandLine(processArgv(command), { ...command.env, [EXEC_MARKER]: id });
      const { channel, client, exited } = await sshProcess(
        target,
        line,
        command.stdin,
        onOutput,
        undefined,
        command.tty,
      );
      return {
        id,
        input: command.stdin === "stream" ? channel : undefined,
        exited,
        pause: () => (channel.pause(), channel.stderr.pause()),
        resume: () => (channel.resume(), channel.stderr.resume()),
        detach: () => {
          channel.removeAllListeners("data");
          channel.stderr.removeAllListeners("data");
          channel.close();
          client.end();
        },
        resize: async ({ cols, rows }) => {
          if (command.tty) channel.setWindow(rows, cols, 0, 0);
        },
      };
    },
    async signal(id, signal) {
      const result = await this.run(signalArgv(id, signal), { timeoutMs: 30_000 });
      return Number.parseInt(result.stdout.trim(), 10) || 0;
    },
    async run(argv, options = {}) {
      const output = boundedOutput();
      // Root's key runs only the guest's forced command, which reads the argv from SSH_ORIGINAL_COMMAND.
      const line = options.root ? argv.map(shellWord).join(" ") : commandLine(argv);
      const { client, exited } = await sshProcess(
        target,
        line,
        options.stdin,
        output.onOutput,
        options.root ? "root" : undefined,
      );
      // Ending the connection hangs up the command's pipes; its processes are the scan's to end.
      return output.result(exited, options.timeoutMs, () => client.end(), argv, target.host);
    },
  };
}

/**
 * A {@link SandboxRunner.run}'s output, each stream kept up to {@link MAX_OUTPUT_BYTES}, and its result once
 * `exited` settles, or an ExecTimeoutError after `timeoutMs` (60 s), when `hangUp` has let the command go.
 */
export function boundedOutput() {
  const collected = { stdout: [] as Buffer[], stderr: [] as Buffer[] };
  const sizes = { stdout: 0, stderr: 0 };
  return {
    onOutput(stream: OutputStream, chunk: Buffer) {
      if (sizes[stream] >= MAX_OUTPUT_BYTES) return;
      collected[stream].push(chunk);
      sizes[stream] += chunk.length;
    },
    async result(
      exited: Promise<number>,
      timeoutMs: number | undefined,
      hangUp: () => void,
      argv: readonly string[],
      where: string,
    ): Promise<ExecResult> {
      const limit = timeoutMs ?? 60_000;
      let timer: NodeJS.Timeout | undefined;
      const deadline = new Promise<never>((_, reject) => {
        timer = setTimeout(() => {
          hangUp();
          reject(new ExecTimeoutError(argv, where, limit));
        }, limit);
      });
      try {
        const exitCode = await Promise.race([exited, deadline]);
        return {
          exitCode,
          stdout: Buffer.concat(collected.stdout).toString("utf8"),
          stderr: Buffer.concat(collected.stderr).toString("utf8"),
        };
      } finally {
        clearTimeout(timer);
      }
    },
  };
}
