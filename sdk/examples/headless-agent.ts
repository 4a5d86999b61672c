// Run an agent headless in a sandbox and fetch the diff it made: the agent binary is put in the sandbox
// (here by the caller; in real use it is installed in the image), given a prompt with `-p`, and the
// repository's last commit is read back as a diff. Nothing here runs on the caller's machine but HTTP.
import type { ExecResult, Sandbox } from "../src/index.js";

export interface HeadlessRun {
  readonly exitCode: number;
  readonly stdout: string;
  readonly stderr: string;
  /** `git diff HEAD~1` in the repository after the agent ran. */
  readonly diff: string;
}

/** A buffered exec's answer (the SDK's ExecResult also admits the background answer, 202). */
function ended(result: ExecResult) {
  if (!("stdout" in result)) throw new Error(`the exec did not end in the answer (202)`);
  return result;
}

/** Runs `<agent> -p <prompt>` in `repo` inside the sandbox, then answers the diff of its commit. */
export async function runHeadlessAgent(
  sandbox: Sandbox,
  options: {
    readonly repo: string;
    readonly prompt: string;
    readonly agent?: string;
    readonly timeoutS?: number;
  },
): Promise<HeadlessRun> {
  const run = ended(
    await sandbox.exec([options.agent ?? "claude", "-p", options.prompt], {
      cwd: options.repo,
      env: { PATH: "/home/agent/bin:/usr/local/bin:/usr/bin:/bin" },
      timeout_s: options.timeoutS ?? 600,
    }),
  );
  const diff = ended(await sandbox.exec(["git", "diff", "HEAD~1"], { cwd: options.repo }));
  if (diff.exit_code !== 0) throw new Error(`git diff HEAD~1 exited ${diff.exit_code}: ${diff.stderr}`);
  return { exitCode: run.exit_code, stdout: run.stdout, stderr: run.stderr, diff: diff.stdout };
}
