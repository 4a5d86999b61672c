import { spawn } from "node:child_process";
import { mkdirSync } from "node:fs";
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
  const file = path.join(LOCK_DIR, `${name}.lock`);
  const holder = spawn(
    "flock",
    [
      "--exclusive",
      "--timeout",
      String(Math.ceil(timeoutMs / 1000)),
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
  await new Promise<void>((resolve, reject) => {
    holder.stdout.once("data", () => resolve());
    holder.once("error", reject);
    void exited.then((code) =>
      reject(
        new Error(
          `host lock ${name} (${file}) not taken within ${timeoutMs} ms: flock exited ${code} ${stderr.trim()}`,
        ),
      ),
    );
  });
  return {
    async release() {
      holder.stdin.end();
      await exited;
    },
  };
}
