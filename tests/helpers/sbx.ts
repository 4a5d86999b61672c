// Running the `sbx` CLI (bin/sbx) as a user would, and a tmux server of the test's own on the host where it
// runs in a real PTY (send-keys, capture-pane).
import { execFile, execFileSync, spawn } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import * as fs from "node:fs/promises";
import * as os from "node:os";
import * as path from "node:path";
import { promisify } from "node:util";
import { waitFor } from "../../lib/process.js";

const run = promisify(execFile);
export const SBX = path.resolve(import.meta.dirname, "../../bin/sbx");

/** `git -C cwd ...args` on the host as a developer "dev" (author and committer), its output trimmed. */
export const hostGit = (cwd: string, args: readonly string[]): string =>
  execFileSync("git", ["-C", cwd, ...args], {
    encoding: "utf8",
    env: {
      ...process.env,
      GIT_AUTHOR_NAME: "dev",
      GIT_AUTHOR_EMAIL: "dev@host.test",
      GIT_COMMITTER_NAME: "dev",
      GIT_COMMITTER_EMAIL: "dev@host.test",
    },
  }).trim();

/**
 * A developer's desk: a temporary directory with the user's sbx config dir (`alice`) and a repository `app` of
 * one commit on `main` (a README, and a .gitignore for .env files as `sbx env push` expects).
 */
export async function developerRepo(prefix: string): Promise<{ work: string; alice: string; repo: string }> {
  const work = await fs.mkdtemp(path.join(os.tmpdir(), prefix));
  const alice = path.join(work, "alice-config");
  const repo = path.join(work, "app");
  await fs.mkdir(repo);
  hostGit(repo, ["init", "-q", "-b", "main"]);
  await fs.writeFile(path.join(repo, "README.md"), "# app\n");
  await fs.writeFile(path.join(repo, ".gitignore"), ".env\n.env.*\n");
  hostGit(repo, ["add", "-A"]);
  hostGit(repo, ["commit", "-q", "-m", "first"]);
  return { work, alice, repo };
}

/**
 * A dev server as an agent starts one, over `sbx ssh`: `page` as index.html of `dir` in the sandbox, served by
 * `python3 -m http.server <port>` on every address, detached from the SSH session.
 */
export const sbxServePage = (configHome: string, repo: string, dir: string, page: string, port: number) =>
  sbx(configHome, repo, [
    "ssh",
    "--",
    "bash",
    "-c",
    `cd ${dir} && echo '${page}' > index.html && (setsid nohup python3 -m http.server ${port} >/dev/null 2>&1 </dev/null &)`,
  ]);

export interface SbxResult {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
  /** stdout parsed (with --json). */
  json<T = Record<string, unknown>>(): T;
}

/** `sbx ...args` in `cwd` with the config dir `configHome`; never throws on a non-zero exit. */
export function sbx(
  configHome: string,
  cwd: string,
  args: readonly string[],
  options: { input?: string; env?: Record<string, string>; timeoutMs?: number } = {},
): Promise<SbxResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(SBX, args, {
      cwd,
      env: { ...process.env, XDG_CONFIG_HOME: configHome, ...options.env },
      stdio: ["pipe", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (c: Buffer) => (stdout += c.toString()));
    child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
    const timer = setTimeout(() => child.kill("SIGKILL"), options.timeoutMs ?? 600_000);
    child.once("error", reject);
    child.once("close", (code) => {
      clearTimeout(timer);
      resolve({
        code: code ?? -1,
        stdout,
        stderr,
        json: <T>() => {
          try {
            return JSON.parse(stdout) as T;
          } catch {
            throw new Error(`sbx ${args.join(" ")} printed no JSON (exit ${code}): ${stdout} ${stderr}`);
          }
        },
      });
    });
    child.stdin.end(options.input ?? "");
  });
}

/**
 * Every path under `dir` (a repository and its .git, say) as `path kind mode sha256` (a link: its target),
 * sorted: two listings are equal when nothing there was added, removed, retyped, rechmodded or rewritten.
 */
export async function treeListing(dir: string): Promise<string[]> {
  const lines: string[] = [];
  const walk = async (at: string): Promise<void> => {
    for (const entry of (await fs.readdir(at)).sort()) {
      const file = path.join(at, entry);
      const stat = await fs.lstat(file);
      const rel = path.relative(dir, file);
      const mode = (stat.mode & 0o7777).toString(8);
      if (stat.isSymbolicLink()) lines.push(`${rel} link ${await fs.readlink(file)}`);
      else if (stat.isDirectory()) {
        lines.push(`${rel} dir ${mode}`);
        await walk(file);
      } else if (stat.isFile())
        lines.push(
          `${rel} file ${mode} ${createHash("sha256")
            .update(await fs.readFile(file))
            .digest("hex")}`,
        );
      else lines.push(`${rel} other ${mode}`);
    }
  };
  await walk(dir);
  return lines;
}

/** A tmux server on the host of the test's own (its own socket), for real PTYs. */
export class HostTmux {
  readonly socket = `sbx-test-${randomBytes(4).toString("hex")}`;

  async tmux(...args: string[]): Promise<string> {
    return (await run("tmux", ["-L", this.socket, ...args])).stdout;
  }

  /** A window running `command` (a shell line) at 120x40; the pane stays once it exits. */
  async open(name: string, command: string, cwd: string): Promise<void> {
    await this.tmux(
      "new-session",
      "-d",
      "-s",
      name,
      "-x",
      "120",
      "-y",
      "40",
      "-c",
      cwd,
      `${command}; echo "[exit $?]"; sleep 600`,
    );
  }

  async send(name: string, ...keys: string[]): Promise<void> {
    await this.tmux("send-keys", "-t", `=${name}:`, ...keys);
  }

  async capture(name: string): Promise<string> {
    return this.tmux("capture-pane", "-p", "-J", "-S", "-200", "-t", `=${name}:`);
  }

  async waitFor(name: string, text: string | RegExp, timeoutMs = 30_000): Promise<string> {
    let screen = "";
    try {
      return await waitFor(`${String(text)} in host tmux window ${name}`, timeoutMs, async () => {
        screen = await this.capture(name);
        return (typeof text === "string" ? screen.includes(text) : text.test(screen)) ? screen : undefined;
      });
    } catch (error) {
      throw new Error(`${(error as Error).message}; the window shows:\n${screen.trimEnd()}`);
    }
  }

  async stop(): Promise<void> {
    await this.tmux("kill-server").catch(() => undefined);
  }
}
