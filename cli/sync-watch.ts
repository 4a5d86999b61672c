// `sbx sync --watch`: the sandbox's new commits fetched into refs/remotes/sandbox/* as they are made, started
// from this machine like every sync. One SSH session stays open running a small waiter inside (Python, sent on
// the command line, so any image with python3 has it) that reads the repository's branches a few times a
// second and prints a line when one moves; each line runs the same `git fetch` a one-shot `sbx sync` runs. A
// session that ends (the sandbox restarted, the network dropped, the laptop slept) is opened again with a
// growing delay, and a fetch follows every reconnection, so nothing made meanwhile is missed. Fetching is all
// it does: the working tree, the index and the local branches are never touched.
import { spawn } from "node:child_process";
import { setTimeout as sleep } from "node:timers/promises";
import type { ProjectView } from "../sdk/src/client.js";
import type { CliClient } from "./client.js";
import type { ConfigStore } from "./config.js";
import { sshTarget } from "./context.js";
import { CliError, EXIT } from "./errors.js";
import { isJsonMode, note } from "./output.js";
import { printable } from "./printable.js";
import { fetchSandbox } from "./repo.js";
import { shellQuote, sshOptions, type SshTarget } from "./ssh.js";

/** How often the waiter reads the branches inside. */
export const WAITER_POLL_MS = 250;
/** The first and the longest wait before a dropped session is opened again. */
export const RECONNECT_FIRST_MS = 1_000;
export const RECONNECT_MAX_MS = 30_000;
/** How often a sandbox that is not running is asked about (an API GET: the watch never starts it). */
export const NOT_RUNNING_POLL_MS = 3_000;
/** A waiter's line longer than this is not one of its lines: it is dropped. */
export const MAX_WAITER_LINE = 4_096;

/** `sync` options that cannot go with --watch: each copies or sets something once. */
const NOT_WITH_WATCH = ["artifacts", "to", "mode", "interval"] as const;

/** The options --watch is given with that it does not take, named as on the command line; none: undefined. */
export function watchConflicts(options: Partial<Record<string, unknown>>): string | undefined {
  const given = NOT_WITH_WATCH.filter((name) => options[name] !== undefined).map((name) => `--${name}`);
  return given.length === 0
    ? undefined
    : `--watch only fetches commits: it does not take ${given.join(", ")} (run sbx sync ${given.join(" ")} on its own)`;
}

/**
 * The waiter, run inside as the agent: `python3 -c WAITER <git dir> <poll ms>`. Its protocol, one line each:
 * `ready <branches>` once it has read the branches; `moved <ref> <value>` when a branch is new or points
 * elsewhere; `gone <ref>` when one was deleted. It reads loose refs under refs/heads and packed-refs (git writes
 * both by renaming a finished file into place, so a read sees one state or the other), and ends when its
 * standard input closes (the session ended) or its output is gone. No git repository there: exit 4.
 */
export const WAITER = String.raw`import os, select, sys
git_dir, poll = os.fsencode(sys.argv[1]), int(sys.argv[2]) / 1000
heads = os.path.join(git_dir, b"refs", b"heads")
packed = os.path.join(git_dir, b"packed-refs")

def say(line):
    try:
        sys.stdout.buffer.write(line + b"\n")
        sys.stdout.buffer.flush()
    except (BrokenPipeError, OSError):
        sys.exit(0)

def branches():
    found = {}
    try:
        with open(packed, "rb") as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2 and parts[1].startswith(b"refs/heads/"):
                    found[parts[1]] = parts[0]
    except OSError:
        pass
    for top, _, files in os.walk(heads):
        for name in files:
            if name.endswith(b".lock"):
                continue
            path = os.path.join(top, name)
            try:
                with open(path, "rb") as f:
                    value = f.read(256).split()
            except OSError:
                continue
            if value:
                found[b"refs/heads/" + os.path.relpath(path, heads)] = value[0]
    return found

if not os.path.isdir(heads):
    sys.stderr.write("no git repository at %s\n" % sys.argv[1])
    sys.exit(4)
seen = branches()
say(b"ready %d" % len(seen))
while True:
    readable, _, _ = select.select([0], [], [], poll)
    if readable and not os.read(0, 4096):
        sys.exit(0)
    now = branches()
    for ref in sorted(now):
        if seen.get(ref) != now[ref]:
            say(b"moved " + ref + b" " + now[ref])
    for ref in sorted(seen):
        if ref not in now:
            say(b"gone " + ref)
    seen = now
`;

export type WaiterLine =
  | { readonly kind: "ready"; readonly branches: number }
  | { readonly kind: "moved"; readonly ref: string; readonly to: string }
  | { readonly kind: "gone"; readonly ref: string };

/**
 * One line of the waiter's, or undefined for anything else: the waiter runs in the agent's shell, so its
 * output is only ever a reason to fetch (what is fetched is what git and its checks take).
 */
export function parseWaiterLine(line: string): WaiterLine | undefined {
  const ready = /^ready (\d{1,9})$/.exec(line);
  if (ready) return { kind: "ready", branches: Number(ready[1]) };
  // A ref name holds no space, control character or backslash (git check-ref-format); any other character,
  // UTF-8 included, may be in a branch's name.
  const moved = /^moved (refs\/heads\/[^\s\p{Cc}\\]+) ([^\s\p{Cc}\\]+)$/u.exec(line);
  if (moved) return { kind: "moved", ref: moved[1]!, to: moved[2]! };
  const gone = /^gone (refs\/heads\/[^\s\p{Cc}\\]+)$/u.exec(line);
  if (gone) return { kind: "gone", ref: gone[1]! };
  return undefined;
}

/** Splits a stream into lines; a line over `max` characters is dropped whole. */
export function lineSplitter(onLine: (line: string) => void, max = MAX_WAITER_LINE) {
  let partial = "";
  let overlong = false;
  return (chunk: string) => {
    const pieces = (partial + chunk).split("\n");
    partial = pieces.pop() ?? "";
    for (const piece of pieces) {
      if (!overlong && piece.length <= max) onLine(piece);
      overlong = false;
    }
    if (partial.length > max) {
      partial = "";
      overlong = true;
    }
  };
}

/** The wait before reconnection attempt `failures` (1, 2, 3...): 1 s, 2 s, 4 s... at most 30 s. */
export function reconnectDelayMs(failures: number): number {
  return Math.min(RECONNECT_MAX_MS, RECONNECT_FIRST_MS * 2 ** Math.max(0, Math.min(failures - 1, 30)));
}

/** An error that ends the watch whatever its exit code says (the sandbox cannot run the waiter). */
export class WatchEnd extends CliError {}

/**
 * Whether an error ends the watch rather than a session: the login is gone, the project or its key is, or the
 * sandbox sent what git's checks refuse (the watch stops following a sandbox that does that, as a one-shot
 * sync exits 9). Anything else (the network, SSH, a sandbox starting) is waited out.
 */
export function endsTheWatch(error: unknown): boolean {
  if (error instanceof WatchEnd) return true;
  if (!(error instanceof CliError)) return false;
  const ending: number[] = [EXIT.auth, EXIT.notFound, EXIT.refused, EXIT.badInput, EXIT.usage];
  return ending.includes(error.code);
}

export interface Updated {
  readonly ref: string;
  readonly from: string | null;
  readonly to: string;
}

/** One changed ref as `sbx sync` prints it. */
export const updateLine = (u: Updated) =>
  `${u.ref}: ${u.from ? u.from.slice(0, 9) : "(new)"} → ${u.to.slice(0, 9)}`;

export type WatchEvent =
  | { readonly event: "watching" | "reconnected" }
  | { readonly event: "fetched"; readonly updated: readonly Updated[] }
  | { readonly event: "waiting"; readonly status: string }
  | { readonly event: "disconnected"; readonly reason: string; readonly retry_in_s: number };

/** An open session of the waiter: its end says why (or rejects with an error that ends the watch). */
export interface WaiterSession {
  readonly ended: Promise<string>;
  close(): void;
}

/** What the watch does to the world, apart so that its loop can be run against a pretend sandbox. */
export interface WatchIo<Target> {
  /** The sandbox's SSH target when it runs, else its status. */
  connect(): Promise<{ running: true; target: Target } | { running: false; status: string }>;
  openSession(target: Target, onLine: (line: string) => void): WaiterSession;
  fetchCommits(target: Target): Promise<readonly Updated[]>;
  report(event: WatchEvent): void;
  sleep(ms: number, signal: AbortSignal): Promise<void>;
}

const reason = (error: unknown) => (error instanceof Error ? error.message : String(error));

/**
 * Follows the sandbox until `signal` aborts (then resolves, once no fetch is running) or an error that ends
 * the watch (then rejects with it). A session counts as good once its first fetch succeeded: the delays
 * start again from the shortest after one.
 */
export async function watchSandbox<Target>(io: WatchIo<Target>, signal: AbortSignal): Promise<void> {
  let failures = 0;
  let watching = false;
  let waitingFor: string | undefined;
  while (!signal.aborted) {
    let why: string;
    let caughtUp = false;
    try {
      const state = await io.connect();
      if (!state.running) {
        if (waitingFor !== state.status) io.report({ event: "waiting", status: state.status });
        waitingFor = state.status;
        await io.sleep(NOT_RUNNING_POLL_MS, signal);
        continue;
      }
      waitingFor = undefined;
      why = await followSession(io, state.target, signal, () => {
        caughtUp = true;
        if (!watching) io.report({ event: "watching" });
        else io.report({ event: "reconnected" });
        watching = true;
      });
    } catch (error) {
      if (endsTheWatch(error)) throw error;
      why = reason(error);
    }
    if (signal.aborted) break;
    failures = caughtUp ? 1 : failures + 1;
    const delay = reconnectDelayMs(failures);
    io.report({ event: "disconnected", reason: why, retry_in_s: delay / 1000 });
    await io.sleep(delay, signal);
  }
}

/**
 * One session: a fetch when the waiter is ready (what was made while no session was open) and one for every
 * line after; one fetch at a time, lines that come during one make one more. A failed fetch ends the session
 * (the next one fetches again). Resolves with why the session ended, once no fetch runs.
 */
async function followSession<Target>(
  io: WatchIo<Target>,
  target: Target,
  signal: AbortSignal,
  caughtUp: () => void,
): Promise<string> {
  let ready = false;
  let running: Promise<void> | undefined;
  let again = false;
  let failure: unknown;
  let firstDone = false;
  const fetchOnce = async () => {
    const updated = await io.fetchCommits(target);
    if (updated.length > 0) io.report({ event: "fetched", updated });
    if (!firstDone) caughtUp();
    firstDone = true;
  };
  const session = io.openSession(target, (line) => {
    const parsed = parseWaiterLine(line);
    if (!parsed || (parsed.kind !== "ready" && !ready) || signal.aborted || failure) return;
    ready = true;
    if (running) {
      again = true;
      return;
    }
    running = (async () => {
      do {
        again = false;
        try {
          await fetchOnce();
        } catch (error) {
          failure = error;
          session.close();
        }
      } while (again && !failure && !signal.aborted);
    })().finally(() => (running = undefined));
  });
  const stop = () => session.close();
  signal.addEventListener("abort", stop, { once: true });
  if (signal.aborted) stop();
  let why = "";
  let ending: unknown;
  try {
    why = await session.ended;
  } catch (error) {
    ending = error;
  } finally {
    signal.removeEventListener("abort", stop);
  }
  await running;
  if (ending !== undefined) throw ending;
  if (failure === undefined) return why;
  if (endsTheWatch(failure)) throw failure;
  return `fetching failed: ${reason(failure)}`;
}

/** The waiter in the sandbox over the project's SSH, kept open (keepalives notice a link that died). */
function openWaiter(target: SshTarget, gitDir: string, onLine: (line: string) => void): WaiterSession {
  const ssh = spawn(
    "ssh",
    [
      ...sshOptions(target),
      "-T",
      "-o",
      "ServerAliveInterval=5",
      "-o",
      "ServerAliveCountMax=3",
      "-p",
      String(target.port),
      `${target.user}@${target.host}`,
      `python3 -c ${shellQuote(WAITER)} ${shellQuote(gitDir)} ${WAITER_POLL_MS}`,
    ],
    { stdio: ["pipe", "pipe", "pipe"] },
  );
  // Standard input stays open: its end is how the waiter learns the session is over.
  ssh.stdin.on("error", () => undefined);
  ssh.stdout.setEncoding("utf8");
  ssh.stdout.on("data", lineSplitter(onLine));
  let stderr = "";
  ssh.stderr.on("data", (c: Buffer) => (stderr = (stderr + c.toString()).slice(-8192)));
  const ended = new Promise<string>((resolve, reject) => {
    ssh.once("error", (error) => resolve(`ssh did not start: ${error.message}`));
    ssh.once("close", (code, signal) => {
      const said = printable(stderr.trim());
      if (code === 4) reject(new CliError(EXIT.notFound, `the sandbox has no repository to watch: ${said}`));
      else if (code === 127)
        reject(new WatchEnd(EXIT.remote, `the sandbox cannot run the watch's waiter (python3): ${said}`));
      else if (code === 255) resolve(`cannot reach the sandbox over SSH${said ? `: ${said}` : ""}`);
      else resolve(`the session ended (${signal ?? `exit ${code}`})${said ? `: ${said}` : ""}`);
    });
  });
  return { ended, close: () => ssh.kill("SIGTERM") };
}

function show(event: WatchEvent, repo: string): void {
  if (isJsonMode()) {
    process.stdout.write(`${JSON.stringify(event)}\n`);
    return;
  }
  switch (event.event) {
    case "watching":
      note(`watching /workspace/${repo}: new commits are fetched into refs/remotes/sandbox/* (Ctrl-C stops)`);
      return;
    case "reconnected":
      note("connected to the sandbox again; fetched what it made meanwhile");
      return;
    case "fetched":
      if (event.updated.length > 0)
        process.stdout.write(`${printable(event.updated.map(updateLine).join("\n"))}\n`);
      return;
    case "waiting":
      note(`the sandbox is ${event.status}: waiting for it to run (the watch does not start it)`);
      return;
    case "disconnected":
      note(`${event.reason}: connecting again in ${event.retry_in_s} s`);
      return;
    default: {
      const never: never = event;
      throw new Error(`unknown watch event ${JSON.stringify(never)}`);
    }
  }
}

/** `sbx sync --watch` for the project `id` linked to the repository at `root` (Ctrl-C ends it, exit 0). */
export async function runSyncWatch(
  api: CliClient,
  store: ConfigStore,
  id: string,
  root: string,
  repo: string,
): Promise<void> {
  const remotePath = `/home/agent/workspace/${repo}`;
  const stop = new AbortController();
  const end = () => stop.abort();
  process.once("SIGINT", end);
  process.once("SIGTERM", end);
  try {
    await watchSandbox<SshTarget>(
      {
        connect: async () => {
          const project: ProjectView = await api.project(id);
          if (project.status !== "running") return { running: false, status: project.status };
          // The host key is read again: a restarted sandbox has new ones.
          return { running: true, target: await sshTarget(api, store, project) };
        },
        openSession: (target, onLine) => openWaiter(target, `${remotePath}/.git`, onLine),
        fetchCommits: async (target) => (await fetchSandbox(target, root, remotePath)).updated,
        report: (event) => show(event, repo),
        sleep: (ms, signal) => sleep(ms, undefined, { signal }).catch(() => undefined),
      },
      stop.signal,
    );
  } finally {
    process.off("SIGINT", end);
    process.off("SIGTERM", end);
  }
}
