import { spawn } from "node:child_process";
import { existsSync, mkdirSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";

/** Where the suite's host locks live (one file each; flock(1) holds them, never their content). */
const LOCK_DIR = path.join(os.tmpdir(), "agent-sandbox-test-locks");

export interface HostLock {
  /** Gives the lock up (its holder process exits). */
  release(): Promise<void>;
}

/**
 * Takes the suite's exclusive lock `name` on this machine, waiting up to `timeoutMs` for the file that
 * holds it: for what one machine has only one of and test files running side by side would share (the
 * fake internet's metadata address, say). The lock is held by a `flock` child whose command waits on its
 * standard input: when this process ends, even killed, the pipe closes, the child exits and the kernel
 * drops the lock, so a killed worker never leaves one held.
 */
export async function hostLock(name: string, timeoutMs = 1_800_000): Promise<HostLock> {
  if (!/^[a-z][a-z0-9-]*$/.test(name))
    throw new Error(`host lock name ${JSON.stringify(name)} is not a-z0-9-`);
  mkdirSync(LOCK_DIR, { recursive: true });
  const asked = Date.now();
  const lock = await holdFile(path.join(LOCK_DIR, `${name}.lock`), timeoutMs);
  // A file's wait for another's turn is time its own figures do not show: the run's log says it.
  const waited = Date.now() - asked;
  if (waited >= 2_000) console.log(`host lock ${name}: waited ${(waited / 1000).toFixed(1)} s for its turn`);
  return lock;
}

/**
 * Holds an exclusive flock on `file` (made if missing) until `release`, or until this process ends: a
 * `flock` child whose command waits on its standard input, which closes when this process dies.
 */
export async function holdFile(file: string, timeoutMs = 1_800_000): Promise<HostLock & { unref(): void }> {
  const lock = await flockHolder(file, ["--timeout", String(Math.ceil(timeoutMs / 1000))]);
  if (!lock) throw new Error(`lock ${file} not taken within ${timeoutMs} ms`);
  return lock;
}

/**
 * Takes the flock on `file` if nobody holds it, for the rest of this process's life (its holder never keeps
 * the process alive); false at once when another process holds it.
 */
export async function holdFileForLife(file: string): Promise<boolean> {
  const lock = await flockHolder(file, ["--nonblock"]);
  lock?.unref();
  return lock !== undefined;
}

/** flock's exit code when the lock is another's (--nonblock, or --timeout run out). */
const CONFLICT = 75;

async function flockHolder(
  file: string,
  wait: readonly string[],
): Promise<(HostLock & { unref(): void }) | undefined> {
  const holder = spawn(
    "flock",
    [
      "--exclusive",
      ...wait,
      "--conflict-exit-code",
      String(CONFLICT),
      file,
      "sh",
      "-c",
      "echo held; exec cat >/dev/null",
    ],
    { stdio: ["pipe", "pipe", "pipe"] },
  );
  let stderr = "";
  holder.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => holder.once("exit", (code) => resolve(code)));
  const held = await new Promise<boolean>((resolve, reject) => {
    holder.stdout.once("data", () => resolve(true));
    holder.once("error", reject);
    void exited.then((code) =>
      code === CONFLICT
        ? resolve(false)
        : reject(new Error(`flock on ${file} exited ${code} ${stderr.trim()}`)),
    );
  });
  if (!held) return undefined;
  return {
    async release() {
      // Held by this process again while it waits: an unref'd holder's exit alone kept nothing alive, and
      // a benchmark that failed ended (exit 0, its error never printed) while it stopped its host.
      holder.ref();
      holder.stdin.end();
      await exited;
    },
    unref() {
      holder.unref();
      for (const stream of [holder.stdin, holder.stdout, holder.stderr])
        (stream as unknown as { unref?: () => void }).unref?.();
    },
  };
}

/** Whether some live process holds the flock on `file` (a missing file is held by no one). */
export async function fileHeld(file: string): Promise<boolean> {
  if (!existsSync(file)) return false;
  const code = await new Promise<number | null>((resolve, reject) => {
    const probe = spawn("flock", ["--nonblock", "--conflict-exit-code", "75", file, "true"], {
      stdio: "ignore",
    });
    probe.once("error", reject);
    probe.once("exit", resolve);
  });
  if (code !== 0 && code !== 75) throw new Error(`flock on ${file} exited ${code}`);
  return code === 75;
}
