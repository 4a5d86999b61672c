import { execFile, spawn } from "node:child_process";
import { openSync, promises as fs, readFileSync } from "node:fs";
import * as path from "node:path";
import { once } from "node:events";
import { promisify } from "node:util";

const execFileAsync = promisify(execFile);

export interface RunResult {
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs a command; a failure names the command and carries its stderr. */
export async function run(command: string, args: readonly string[], timeoutMs = 60_000): Promise<RunResult> {
  try {
    const { stdout, stderr } = await execFileAsync(command, args, {
      timeout: timeoutMs,
      maxBuffer: 16 << 20,
    });
    return { stdout, stderr };
  } catch (error) {
    const e = error as NodeJS.ErrnoException & { stderr?: string; code?: string | number };
    if (e.code === "ENOENT") throw new Error(`${command} is not installed`);
    throw new Error(`${command} ${args.join(" ")} failed: ${(e.stderr ?? e.message).trim()}`);
  }
}

/** True when the command exits 0 (for `iptables -C`-style probes). */
export async function succeeds(command: string, args: readonly string[]): Promise<boolean> {
  try {
    await execFileAsync(command, args, { timeout: 10_000 });
    return true;
  } catch {
    return false;
  }
}

export async function commandExists(command: string): Promise<boolean> {
  const dirs = (process.env.PATH ?? "").split(path.delimiter).concat(["/usr/sbin", "/sbin"]);
  for (const dir of dirs) {
    try {
      await fs.access(path.join(dir, command), fs.constants.X_OK);
      return true;
    } catch {
      // keep looking
    }
  }
  return false;
}

/**
 * Whether process `pid` runs: it exists (or is another user's: EPERM) and has not exited. A process that
 * exited but was not reaped yet (a zombie) still "receives" `kill(pid, 0)`, so that alone takes it for
 * alive; a daemon's parent is init once it has forked away, and some inits (this machine's) reap only
 * every few seconds, so a killed daemon looked alive for that long (a Squid killed with -9 was restarted a
 * watchdog sweep late, and Squid itself refuses to start over a pid file naming a zombie).
 */
export function processAlive(pid: number): boolean {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "EPERM") return false;
  }
  let stat = "";
  try {
    stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  } catch {
    return true; // no procfs to ask: the signal's answer stands
  }
  // "<pid> (<comm>) <state> ...": comm may hold spaces and parentheses; the state follows the last ')'.
  const state = stat.charAt(stat.lastIndexOf(")") + 2);
  return state !== "Z" && state !== "X";
}

/**
 * The pid in `pidFile` when that process is alive (and, given `command`, runs that program: a pid file
 * left from before a reboot may name a pid that now belongs to something else), else undefined.
 */
export async function livePid(pidFile: string, command?: string): Promise<number | undefined> {
  let pid: number;
  try {
    pid = Number.parseInt((await fs.readFile(pidFile, "utf8")).trim(), 10);
  } catch {
    return undefined;
  }
  if (!processAlive(pid)) return undefined;
  if (command !== undefined) {
    const comm = await fs.readFile(`/proc/${pid}/comm`, "utf8").catch(() => "");
    if (comm.trim() !== command.slice(0, 15)) return undefined; // the kernel keeps 15 bytes of the name
  }
  return pid;
}

/**
 * Starts a long-running daemon in its own session (no systemd here), output appended to `logFile`, its
 * pid written to `pidFile`. It outlives the caller, as a service should.
 */
export async function startDaemon(
  command: string,
  args: readonly string[],
  logFile: string,
  pidFile: string,
): Promise<number> {
  await fs.mkdir(path.dirname(logFile), { recursive: true });
  await fs.mkdir(path.dirname(pidFile), { recursive: true });
  const log = openSync(logFile, "a");
  const child = spawn(command, args, { detached: true, stdio: ["ignore", log, log] });
  const pid = await new Promise<number>((resolve, reject) => {
    child.once("error", (error) => reject(new Error(`cannot start ${command}: ${error.message}`)));
    child.once("spawn", () => resolve(child.pid!));
  });
  child.unref();
  await fs.writeFile(pidFile, `${pid}\n`);
  return pid;
}

/** `waitFor`'s first pause between probes, and the longest it grows to (by half each time). */
export const POLL_FIRST_MS = 100;
export const POLL_MAX_MS = 500;

/**
 * Polls `probe` until it returns a value or `timeoutMs` passes; then throws `what` with the last error.
 * The pause between probes starts short (most waits end within a second) and grows to `POLL_MAX_MS`: a
 * wait of minutes (a VM's boot, a stack's update) polls twice a second, not ten times, and its probes (a
 * database query, a process spawned) leave the CPU to what it waits for.
 */
export async function waitFor<T>(
  what: string,
  timeoutMs: number,
  probe: () => Promise<T | undefined>,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  let pause = POLL_FIRST_MS;
  for (;;) {
    try {
      const value = await probe();
      if (value !== undefined) return value;
    } catch (error) {
      last = error;
    }
    if (Date.now() > deadline) {
      throw new Error(`${what} not ready after ${timeoutMs} ms${last ? `: ${(last as Error).message}` : ""}`);
    }
    await new Promise((resolve) => setTimeout(resolve, pause));
    pause = Math.min(POLL_MAX_MS, Math.round(pause * 1.5));
  }
}

/**
 * Runs `work` holding an exclusive lock on `lockFile` (created when missing) against every caller that takes it
 * this way, in this process or another (each call's `flock` opens the file anew, and flock(2) locks are per
 * open file, not per process), waiting at most `timeoutMs` for it. The lock is held by a child `flock` that
 * ends with its stdin: when this process dies, even by SIGKILL, the pipe closes and the lock is released.
 */
export async function withFileLock<T>(
  lockFile: string,
  work: () => Promise<T>,
  timeoutMs = 60_000,
): Promise<T> {
  const seconds = String(Math.max(1, Math.ceil(timeoutMs / 1000)));
  // `flock -w` waits for the lock, then runs the shell, which says so and holds it until its stdin ends.
  const holder = spawn(
    "flock",
    ["-x", "-w", seconds, lockFile, "sh", "-c", "echo locked; exec cat >/dev/null"],
    {
      stdio: "pipe",
    },
  );
  try {
    await new Promise<void>((resolve, reject) => {
      let stderr = "";
      holder.stderr!.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
      holder.stdout!.once("data", () => resolve());
      holder.once("error", (error) => reject(new Error(`flock ${lockFile}: ${error.message}`)));
      holder.once("exit", (code) =>
        reject(
          new Error(
            code === 1
              ? `the lock ${lockFile} was held by another holder for ${seconds} s`
              : `flock ${lockFile} exited ${code}: ${stderr.trim()}`,
          ),
        ),
      );
    });
    return await work();
  } finally {
    holder.stdin!.end();
    if (holder.exitCode === null && holder.signalCode === null) await once(holder, "exit");
  }
}
