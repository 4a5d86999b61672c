// The repository on the host: what `sbx start` checks before anything is made, and git's side of the
// transfers. Refs travel through git's own protocol over the project's SSH (never through a shell), so a
// branch name is never interpreted; the names the CLI passes to a shell (worktrees) are checked here.
import * as path from "node:path";
import { CliError, EXIT } from "./errors.js";
import { capture, gitSshCommand, sshUrl, type SshTarget } from "./ssh.js";

/**
 * A worktree's directory under .worktrees and its tmux session (and, for the terminal, the URL's `session`); a
 * branch with `/` maps onto one (cli/worktree-name.ts).
 */
export const WORKTREE_NAME = /^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$/;

export function checkWorktreeName(name: string): string {
  if (!WORKTREE_NAME.test(name) || name.endsWith(".lock") || name.includes(".."))
    throw new CliError(
      EXIT.badInput,
      `invalid worktree name ${JSON.stringify(name)}: use letters, digits, '_' and '-' (at most 63, no shell characters); it names a directory, a branch and a tmux session`,
    );
  return name;
}

/** The directory name inside the sandbox for a repository at `root`. */
export function sandboxRepoName(root: string): string {
  const name = path
    .basename(root)
    .replace(/[^A-Za-z0-9._-]/g, "-")
    .replace(/^[.-]+/, "");
  return name || "repo";
}

async function git(cwd: string, args: string[], env: NodeJS.ProcessEnv = {}) {
  return capture("git", ["-C", cwd, ...args], { env: { ...process.env, ...env, GIT_TERMINAL_PROMPT: "0" } });
}

export interface RepoState {
  readonly root: string;
  readonly branches: readonly string[];
  /** The checked-out branch; undefined when HEAD is detached. */
  readonly current: string | undefined;
  /** Paths `git status --porcelain` lists: changes a push does not carry. */
  readonly dirty: readonly string[];
  /** Objects' size on disk (packed and loose), bytes. */
  readonly sizeBytes: number;
}

export async function inspectRepo(dir: string): Promise<RepoState> {
  const top = await git(dir, ["rev-parse", "--show-toplevel"]);
  if (top.code !== 0)
    throw new CliError(
      EXIT.badInput,
      `${path.resolve(dir)} is not a git repository (git init, or pass the repository's path)`,
    );
  const root = top.stdout.trim();
  const refs = await git(root, ["for-each-ref", "--format=%(refname:short)", "refs/heads"]);
  const branches = refs.stdout.split("\n").filter(Boolean);
  if (branches.length === 0)
    throw new CliError(EXIT.badInput, `${root} has no commits yet: commit something first`);
  const head = await git(root, ["symbolic-ref", "--short", "-q", "HEAD"]);
  const status = await git(root, ["status", "--porcelain", "--untracked-files=normal"]);
  const counts = await git(root, ["count-objects", "-v"]);
  const kib = (key: string) =>
    Number(
      /^(\S+): (\d+)$/m.exec(counts.stdout.split("\n").find((l) => l.startsWith(`${key}:`)) ?? "")?.[2] ?? 0,
    );
  return {
    root,
    branches,
    current: head.code === 0 ? head.stdout.trim() || undefined : undefined,
    dirty: status.stdout.split("\n").filter(Boolean),
    sizeBytes: (kib("size") + kib("size-pack")) * 1024,
  };
}

/**
 * Pushes `branches` into the sandbox's repository; updateInstead checks the current one out there. A branch
 * the sandbox refuses because it moved on inside (or its checkout has changes) is kept as the sandbox has
 * it and reported; any other failure throws.
 */
export async function pushRepo(
  target: SshTarget,
  root: string,
  remotePath: string,
  branches: readonly string[],
): Promise<{ pushed: string[]; rejected: { branch: string; why: string }[] }> {
  const refspecs = branches.map((b) => `refs/heads/${b}:refs/heads/${b}`);
  const result = await git(
    root,
    ["push", "--porcelain", "--no-verify", sshUrl(target, remotePath), ...refspecs],
    { GIT_SSH_COMMAND: gitSshCommand(target) },
  );
  // Porcelain: `<flag>\t<from>:<to>\t<summary>` per ref; `!` is a refused one.
  const rejected = result.stdout
    .split("\n")
    .filter((line) => line.startsWith("!\t"))
    .map((line) => {
      const [, refs = "", why = ""] = line.split("\t");
      return { branch: refs.slice(refs.indexOf(":refs/heads/") + ":refs/heads/".length), why };
    });
  if (result.code !== 0 && rejected.length === 0)
    throw new CliError(EXIT.remote, `git push into the sandbox failed: ${result.stderr.trim()}`);
  const refused = new Set(rejected.map((r) => r.branch));
  return { pushed: branches.filter((b) => !refused.has(b)), rejected };
}

/** Fetches the sandbox's branches into refs/remotes/sandbox/*; returns what changed (`ref old new`). */
export async function fetchSandbox(
  target: SshTarget,
  root: string,
  remotePath: string,
): Promise<{ updated: { ref: string; from: string | null; to: string }[] }> {
  const before = await remoteRefs(root);
  // The sandbox serves these objects (its git-upload-pack runs in the agent's login shell): git checks each
  // one as it arrives (a tree with a .git or a '..' entry, a hostile .gitmodules), and the sandbox's commits
  // never make this machine fetch their submodules from elsewhere.
  const result = await git(
    root,
    [
      "-c",
      "fetch.fsckObjects=true",
      "fetch",
      "--no-tags",
      "--no-recurse-submodules",
      "--prune",
      sshUrl(target, remotePath),
      "+refs/heads/*:refs/remotes/sandbox/*",
    ],
    { GIT_SSH_COMMAND: gitSshCommand(target) },
  );
  if (result.code !== 0) {
    // git prunes before it fetches: a fetch that fails gives back the refs it pruned (their objects are
    // still here), so that a failed sync changes nothing.
    const after = await remoteRefs(root);
    for (const [ref, sha] of before)
      if (after.get(ref) !== sha) await git(root, ["update-ref", ref, sha, after.get(ref) ?? ""]);
  }
  if (result.code !== 0 && /fsck error|index-pack failed/.test(result.stderr))
    throw new CliError(
      EXIT.refused,
      `refused what the sandbox sent to git fetch: its objects fail git's checks, so nothing was fetched: ${result.stderr.trim()}`,
    );
  if (result.code !== 0)
    throw new CliError(EXIT.remote, `git fetch from the sandbox failed: ${result.stderr.trim()}`);
  const after = await remoteRefs(root);
  const updated = [...after]
    .filter(([ref, sha]) => before.get(ref) !== sha)
    .map(([ref, to]) => ({ ref: ref.replace(/^refs\/remotes\//, ""), from: before.get(ref) ?? null, to }));
  return { updated };
}

async function remoteRefs(root: string): Promise<Map<string, string>> {
  const refs = await git(root, ["for-each-ref", "--format=%(refname) %(objectname)", "refs/remotes/sandbox"]);
  return new Map(
    refs.stdout
      .split("\n")
      .filter(Boolean)
      .map((line) => line.split(" ") as [string, string]),
  );
}

/** The repository's `.env*` files at its root (regular files; never directories or .envrc). */
export async function envFiles(root: string): Promise<string[]> {
  const { readdir } = await import("node:fs/promises");
  const entries = await readdir(root, { withFileTypes: true });
  return entries
    .filter((e) => e.isFile() && /^\.env(\..+)?$/.test(e.name) && e.name !== ".envrc")
    .map((e) => e.name)
    .sort((a, b) => (a === ".env" ? -1 : b === ".env" ? 1 : a.localeCompare(b)));
}
