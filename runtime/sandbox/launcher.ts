// A command's exec made before it is asked for. The engine's exec (runc entering the container's namespaces
// and forking: ~50 ms here) is most of what a first command costs (`node -v` itself takes 5 ms), so the
// container backend keeps one exec per sandbox already started and waiting on its stdin: the launcher. A
// command asked for is written to it as a shell command line, and it becomes that command (`exec`): the same
// process the engine's exec would have started (as the agent, its environment, the wrapper of process.ts),
// whose output, exit code and host pid the engine reports as for any exec. A new launcher is started behind
// each one taken, one at a time for the whole runtime: a burst's replacements wait for the burst (below).
// Nothing listens inside the sandbox (ARCHITECTURE decision 5): the runtime holds the
// launcher's stdin through the engine, as it holds any exec's.
//
// The launcher runs as the agent, so the agent can end it or write to its stdin: what it can do there it can
// do to any command the API runs as the agent (docs/security.md, "Exec"); a launcher found gone is replaced.
import type { Duplex } from "node:stream";
import type Docker from "dockerode";
import { createSandboxExec } from "./exec.js";
import { shellWord } from "./ssh.js";

/**
 * The launcher: a line count, then that many lines, evaluated as one shell command line. Its stdin closed
 * before a whole command line came (the runtime gone, the launcher let go): it exits having run nothing.
 * `read` takes a byte at a time from a pipe, so whatever follows the command line is the command's stdin.
 */
export const LAUNCHER_SCRIPT = `IFS= read -r n || exit 0
s=
while [ "$n" -gt 0 ] && IFS= read -r l; do s="$s$l
"; n=$((n - 1)); done
[ "$n" -eq 0 ] 2>/dev/null || exit 125
eval "$s"`;

/** The launcher's argv ($0 names it in the shell's messages and in the agent's `ps`). */
export const LAUNCHER_ARGV = ["/bin/sh", "-c", LAUNCHER_SCRIPT, "sbx-launcher"] as const;

/**
 * What a launcher is sent to become `argv` with `env` added to its environment: `exec env NAME=value …
 * argv…`, every word quoted, preceded by its line count (a quoted word may hold newlines).
 */
export function launchLine(argv: readonly string[], env: readonly string[]): string {
  const line = `exec ${["env", ...env, ...argv].map(shellWord).join(" ")}\n`;
  return `${line.split("\n").length - 1}\n${line}`;
}

/** A launcher started and not yet taken: its exec and the engine's stream of it (stdin in, output out). */
export interface Launcher {
  readonly exec: Docker.Exec;
  readonly stream: Duplex;
}

interface Held extends Launcher {
  /** Its stream ended, or it printed before it was sent a command: never to be taken. */
  gone: boolean;
  /** Stops watching it while it waits (once taken, its stream is its command's). */
  unwatch(): void;
}

/** How many sandboxes keep a launcher at once by default; past it the one used longest ago is let go. */
export const MAX_LAUNCHERS = 512;

/**
 * How long no launcher has been taken before replacements are started while others are due or in use. A
 * replacement is work done ahead (the engine's exec, ~50 ms of its CPU): behind a command when nothing else
 * runs it starts at once, but behind a burst (a hundred sandboxes' first commands) a hundred of them would
 * take the CPU the burst's own commands wait for (tests/bench/interactive.ts), so they wait for the burst.
 */
export const REPLENISH_QUIET_MS = 200;

/** The launchers of one engine's containers (the container backend holds one set for the runtime). */
export class ExecLaunchers {
  private readonly waiting = new Map<string, Held>();
  private readonly starting = new Map<string, Promise<void>>();
  /** Sandboxes whose next launcher is due, oldest first; one is started at a time (`starting`). */
  private readonly due = new Set<string>();
  private lastTake = 0;
  /** Commands being given a launcher or running in one. */
  private inUse = 0;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly docker: () => Docker,
    /** Who launchers run as: the user every API command runs as (process.ts). */
    private readonly user: string,
    private readonly limit = MAX_LAUNCHERS,
    private readonly quietMs = REPLENISH_QUIET_MS,
  ) {}

  /**
   * The container's waiting launcher, or one started now (throws SandboxNotRunningError when the sandbox is
   * not running); another is started once its stream closes. The caller writes it a {@link launchLine} and
   * owns its stream.
   */
  async take(container: string): Promise<Launcher & { waited: boolean }> {
    this.lastTake = performance.now();
    this.inUse += 1;
    // One due and not started is this command's own to start; one being started is nearer than a new one.
    this.due.delete(container);
    let launcher: Launcher;
    let held: Held | undefined;
    try {
      await this.starting.get(container);
      held = this.waiting.get(container);
      this.waiting.delete(container);
      if (held && !held.gone) {
        held.unwatch();
        // Its command keeps the runtime alive as any exec does.
        (held.stream as Duplex & { ref?: () => void }).ref?.();
        launcher = held;
      } else {
        launcher = await startLauncher(this.docker(), container, this.user);
      }
    } catch (error) {
      this.inUse -= 1;
      throw error;
    }
    // The next one once this one's command is over: started beside it, the engine's exec of the next would
    // hold up the engine's report of this one's end (by ~45 ms here).
    launcher.stream.once("close", () => {
      this.inUse -= 1;
      this.replenish(container);
    });
    return { exec: launcher.exec, stream: launcher.stream, waited: launcher === held };
  }

  /** How many launchers wait now. */
  get size(): number {
    return this.waiting.size;
  }

  /** How many sandboxes' next launchers are due and not yet started. */
  get pending(): number {
    return this.due.size;
  }

  /** Lets every waiting launcher go (its stdin closed: it exits having run nothing); none due is started. */
  close(): void {
    for (const held of this.waiting.values()) letGo(held);
    this.waiting.clear();
    this.due.clear();
    clearTimeout(this.timer);
  }

  /** The container's next launcher is due unless one waits or is starting; a stopped sandbox gets none. */
  private replenish(container: string): void {
    if (this.waiting.has(container) || this.starting.has(container)) return;
    this.due.add(container);
    this.pump();
  }

  /**
   * Starts the oldest due launcher when none is starting: at once when it is the only one due and no other
   * command runs through one, else once no launcher has been taken for `quietMs`.
   */
  private pump(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    if (this.starting.size > 0 || this.due.size === 0) return;
    const alone = this.due.size === 1 && this.inUse === 0;
    const wait = alone ? 0 : this.lastTake + this.quietMs - performance.now();
    if (wait > 0) {
      this.timer = setTimeout(() => this.pump(), wait);
      this.timer.unref();
      return;
    }
    const container = this.due.values().next().value as string;
    this.due.delete(container);
    const started = startLauncher(this.docker(), container, this.user)
      .then((launcher) => {
        if (this.waiting.has(container)) return letGo({ ...launcher, unwatch: () => undefined });
        this.hold(container, launcher);
      })
      .catch(() => undefined)
      .finally(() => {
        this.starting.delete(container);
        this.pump();
      });
    this.starting.set(container, started);
  }

  private hold(container: string, launcher: Launcher): void {
    const held: Held = { ...launcher, gone: false, unwatch: () => undefined };
    const gone = () => {
      held.gone = true;
      if (this.waiting.get(container) === held) this.waiting.delete(container);
      launcher.stream.destroy();
    };
    // Flowing, so that its end is seen as it comes; a launcher prints nothing before its command line.
    launcher.stream.on("data", gone);
    launcher.stream.on("end", gone);
    launcher.stream.on("close", gone);
    launcher.stream.on("error", gone);
    held.unwatch = () => {
      launcher.stream.off("data", gone);
      launcher.stream.off("end", gone);
      launcher.stream.off("close", gone);
      launcher.stream.off("error", gone);
    };
    this.waiting.set(container, held);
    // The runtime may exit with launchers waiting (each then reads the end of its stdin and exits).
    (launcher.stream as Duplex & { unref?: () => void }).unref?.();
    while (this.waiting.size > this.limit) {
      const [oldest, first] = this.waiting.entries().next().value as [string, Held];
      this.waiting.delete(oldest);
      letGo(first);
    }
  }
}

/** A launcher's stdin closed: it exits having run nothing. */
function letGo(held: Launcher & { unwatch(): void }): void {
  held.unwatch();
  held.stream.on("error", () => undefined);
  held.stream.end();
  held.stream.resume();
}

/** A launcher started in `container` as `user`, its stdin the engine's stream. */
export async function startLauncher(docker: Docker, container: string, user: string): Promise<Launcher> {
  const exec = await createSandboxExec(docker, container, {
    Cmd: [...LAUNCHER_ARGV],
    User: user,
    AttachStdin: true,
    AttachStdout: true,
    AttachStderr: true,
  });
  const stream = (await exec.start({ hijack: true, stdin: true })) as Duplex;
  return { exec, stream };
}
