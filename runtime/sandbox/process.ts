// Commands run in a sandbox for the API: as the agent user, as the leader of a session of their
// own, marked so that the whole tree they fork can be found and killed by a second exec.
import type { Duplex } from "node:stream";
import { trace } from "@opentelemetry/api";
import type Docker from "dockerode";
import { createSandboxExec } from "./exec.js";
import { launchLine, type ExecLaunchers } from "./launcher.js";

/** The user commands run as (uid 1000, home /home/agent: sandbox-image/Dockerfile). */
export const AGENT_USER = "agent";

/**
 * Set in every process an API exec starts, inherited by everything it forks: the tree is found by it
 * (/proc/<pid>/environ) even where a child started a session or group of its own. Callers may not set it.
 */
export const EXEC_MARKER = "SBX_EXEC_ID";

/**
 * Enters the working directory (given, else /workspace when the image has one, else the agent's home) and
 * runs the command under `setsid -w`, so that it leads a new session and process group whose exit status
 * setsid passes on ($0 names the wrapper in its messages, $1 is the directory, the rest the argv). On a
 * terminal the command runs in the session the terminal already leads (a new one would have no controlling
 * terminal: no job control, no Ctrl-C).
 */
const wrapper = (tty: boolean) =>
  [
    'if [ -n "$1" ]; then cd -- "$1" 2>/dev/null || { printf "cwd %s: no such directory, or the agent may not enter it\\n" "$1" >&2; exit 126; }',
    'elif [ -d /workspace ]; then cd /workspace; else cd "$HOME"; fi',
    tty ? 'shift; exec "$@"' : 'shift; exec setsid -w -- "$@"',
  ].join("\n");

/**
 * Signals every process of an exec's tree (as the agent: nothing of root's can be touched). KILL first
 * stops them all, so that none forks a child between the scan and the kill, and repeats the scan until
 * none is left; other signals go to each process group once. Prints how many processes were signalled.
 */
const SIGNAL_TREE = `
id="$1"; sig="$2"
scan() {
  for d in /proc/[0-9]*; do
    p="\${d#/proc/}"; [ "$p" = "$$" ] && continue
    tr '\\0' '\\n' < "$d/environ" 2>/dev/null | grep -qxF "${EXEC_MARKER}=$id" && echo "$p"
  done
}
n=0
if [ "$sig" = KILL ]; then
  for round in 1 2 3 4 5 6 7 8; do
    pids=$(scan); [ -z "$pids" ] && break
    kill -STOP $pids 2>/dev/null; kill -KILL $pids 2>/dev/null
    n=$((n + $(echo "$pids" | wc -l)))
  done
else
  pids=$(scan)
  for g in $(for p in $pids; do ps -o pgid= -p "$p"; done | sort -u); do kill -"$sig" "-$g" 2>/dev/null; done
  [ -n "$pids" ] && n=$(echo "$pids" | wc -l)
fi
echo "$n"
`;

/** What runs in the sandbox for `command`: the wrapper, its directory, the argv (for any backend). */
export const processArgv = (command: SandboxCommand): string[] => [
  "/bin/sh",
  "-c",
  wrapper(command.tty !== undefined),
  "sbx-exec",
  command.cwd ?? "",
  ...command.argv,
];

/** What signals the tree of exec `id` (it prints how many processes it found). */
export const signalArgv = (id: string, signal: SignalName): string[] => [
  "/bin/sh",
  "-c",
  SIGNAL_TREE,
  "sbx-signal",
  id,
  signal,
];

/** Signals an exec's tree may be sent (by name, without SIG). */
export const SIGNALS = ["HUP", "INT", "QUIT", "KILL", "USR1", "USR2", "TERM", "STOP", "CONT"] as const;
export type SignalName = (typeof SIGNALS)[number];

export interface SandboxCommand {
  /** The argv; a shell string runs as `bash -c <string>`. */
  readonly argv: readonly string[];
  readonly cwd?: string;
  readonly env?: Readonly<Record<string, string>>;
  /** Written and closed; `stream`: written by the caller through {@link SandboxProcess.input}. */
  readonly stdin?: Buffer | "stream";
  /** Run on a terminal of this size: its output comes as stdout alone, and {@link SandboxProcess.resize} works. */
  readonly tty?: TerminalSize;
}

/** A terminal's size in characters. */
export interface TerminalSize {
  readonly cols: number;
  readonly rows: number;
}

export type OutputStream = "stdout" | "stderr";

export interface SandboxProcess {
  /** The id in its processes' environment ({@link EXEC_MARKER}) and in the audit. */
  readonly id: string;
  /** The command's stdin, when it was asked for as a stream: end() closes it. */
  readonly input: NodeJS.WritableStream | undefined;
  /** Settles with the exit code (128 + n when a signal n ended it) once its output has all been read. */
  readonly exited: Promise<number>;
  /** Stops reading its output (back-pressure: the process blocks once the pipe fills). */
  pause(): void;
  resume(): void;
  /** Stops reading and attaches nothing more; the processes go on unless {@link signalTree} is used. */
  detach(): void;
  /** Resizes its terminal (a command started with `tty`; without one, nothing happens). */
  resize?(size: TerminalSize): Promise<void>;
}

/**
 * Starts `command` in the sandbox as the agent; `onOutput` gets each chunk of stdout and stderr in the
 * order the engine sent them. Throws SandboxNotRunningError when the sandbox is stopped or missing. With
 * `launchers`, a command without a terminal becomes the sandbox's waiting launcher (launcher.ts) instead of
 * an exec of its own: the same process, output and exit code, without the engine's exec in its way.
 */
export async function startSandboxProcess(
  docker: Docker,
  container: string,
  id: string,
  command: SandboxCommand,
  onOutput: (stream: OutputStream, chunk: Buffer) => void,
  launchers?: ExecLaunchers,
): Promise<SandboxProcess> {
  const env = [
    ...Object.entries(command.env ?? {}).map(([name, value]) => `${name}=${value}`),
    `${EXEC_MARKER}=${id}`,
  ];
  const tty = command.tty !== undefined;
  let exec: Docker.Exec;
  let stream: Duplex;
  if (launchers && !tty) {
    const launched = await launchers.take(container);
    trace.getActiveSpan()?.setAttribute("sandbox.exec_launcher", launched.waited ? "waiting" : "started");
    ({ exec, stream } = launched);
    stream.write(launchLine(processArgv(command), env));
    if (command.stdin === undefined) stream.end();
  } else {
    exec = await createSandboxExec(docker, container, {
      Cmd: processArgv(command),
      User: AGENT_USER,
      Env: env,
      AttachStdin: command.stdin !== undefined,
      AttachStdout: true,
      AttachStderr: true,
      Tty: tty,
    });
    stream = (await exec.start({ hijack: true, stdin: command.stdin !== undefined, Tty: tty })) as Duplex;
  }
  if (Buffer.isBuffer(command.stdin)) stream.end(command.stdin);
  const resize = async ({ cols, rows }: TerminalSize) => {
    if (tty) await exec.resize({ w: cols, h: rows });
  };
  // A terminal's output is one raw stream; without one, the engine multiplexes stdout and stderr.
  if (command.tty) {
    stream.on("data", (chunk: Buffer) => onOutput("stdout", chunk));
    await resize(command.tty);
  } else {
    const demux = new Demultiplexer(onOutput);
    stream.on("data", (chunk: Buffer) => demux.push(chunk));
  }
  const exited = new Promise<number>((resolve, reject) => {
    let settled = false;
    const finish = () => {
      if (settled) return;
      settled = true;
      exec.inspect().then(
        (info) => resolve(info.ExitCode ?? -1),
        (error: unknown) => reject(error as Error),
      );
    };
    stream.on("end", finish);
    stream.on("close", finish);
    stream.on("error", (error) => {
      if (settled) return;
      settled = true;
      reject(error);
    });
  });
  // Nobody may be left with an unhandled rejection when the caller detaches and never awaits.
  exited.catch(() => undefined);
  return {
    id,
    input: command.stdin === "stream" ? stream : undefined,
    exited,
    pause: () => stream.pause(),
    resume: () => stream.resume(),
    detach: () => {
      stream.removeAllListeners("data");
      stream.destroy();
    },
    resize,
  };
}

/**
 * Sends `signal` to every process of exec `id` in the sandbox (KILL: until none is left); answers how
 * many processes it found. Runs as the agent, by a second exec.
 */
export async function signalTree(
  docker: Docker,
  container: string,
  id: string,
  signal: SignalName,
): Promise<number> {
  const exec = await createSandboxExec(docker, container, {
    Cmd: signalArgv(id, signal),
    User: AGENT_USER,
    AttachStdout: true,
    AttachStderr: true,
  });
  const stream = (await exec.start({ hijack: true, stdin: false })) as Duplex;
  const out: Buffer[] = [];
  const demux = new Demultiplexer((name, chunk) => name === "stdout" && out.push(chunk));
  stream.on("data", (chunk: Buffer) => demux.push(chunk));
  await new Promise<void>((resolve, reject) => {
    stream.on("end", resolve);
    stream.on("close", resolve);
    stream.on("error", reject);
  });
  return Number.parseInt(Buffer.concat(out).toString().trim(), 10) || 0;
}

/**
 * The engine's multiplexed attach stream (8-byte headers: stream type, 0, 0, 0, big-endian length) as
 * chunks in their order. dockerode's demuxStream writes into two streams, which loses the order between
 * them and hides back-pressure; this keeps both.
 */
export class Demultiplexer {
  private pending = Buffer.alloc(0);

  constructor(private readonly onOutput: (stream: OutputStream, chunk: Buffer) => void) {}

  push(chunk: Buffer): void {
    let buffer = this.pending.length > 0 ? Buffer.concat([this.pending, chunk]) : chunk;
    while (buffer.length >= 8) {
      const length = buffer.readUInt32BE(4);
      if (buffer.length < 8 + length) break;
      const type = buffer[0];
      const payload = buffer.subarray(8, 8 + length);
      // 0 is stdin (never sent back), 1 stdout, 2 stderr.
      if (length > 0 && (type === 1 || type === 2)) this.onOutput(type === 1 ? "stdout" : "stderr", payload);
      buffer = buffer.subarray(8 + length);
    }
    this.pending = buffer.length > 0 ? Buffer.from(buffer) : Buffer.alloc(0);
  }
}
