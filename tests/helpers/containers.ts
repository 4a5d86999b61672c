import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { promisify } from "node:util";

const run = promisify(execFile);

export interface ExecResult {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** `docker` CLI call; a failure throws with the command's stderr. */
export async function docker(...args: string[]): Promise<string> {
  try {
    return (await run("docker", args, { maxBuffer: 16 << 20 })).stdout.trim();
  } catch (error) {
    throw new Error(`docker ${args.join(" ")}: ${(error as { stderr?: string }).stderr ?? String(error)}`);
  }
}

/** Runs a shell script in a container (as `user`), returning its exit code instead of throwing. */
export async function execIn(container: string, script: string, user = "agent"): Promise<ExecResult> {
  try {
    const { stdout, stderr } = await run(
      "docker",
      ["exec", "-u", user, "-w", "/home/agent", container, "bash", "-c", script],
      {
        maxBuffer: 16 << 20,
        timeout: 120_000,
      },
    );
    return { code: 0, stdout: stdout.trim(), stderr: stderr.trim() };
  } catch (error) {
    const e = error as { code?: number; stdout?: string; stderr?: string };
    return {
      code: typeof e.code === "number" ? e.code : -1,
      stdout: (e.stdout ?? "").trim(),
      stderr: (e.stderr ?? "").trim(),
    };
  }
}

/** A name no other test run uses, for containers, volumes and networks. */
export const uniqueName = (prefix: string): string => `${prefix}-${randomBytes(4).toString("hex")}`;

/** ssh's options for a sandbox of the test's own: never prompt, keep no record of its host key. */
export const sshOptions = (connectTimeoutSeconds: number): string[] =>
  [
    "BatchMode=yes",
    "StrictHostKeyChecking=no",
    "UserKnownHostsFile=/dev/null",
    `ConnectTimeout=${connectTimeoutSeconds}`,
  ].flatMap((option) => ["-o", option]);
