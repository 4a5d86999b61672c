// What a worktree's branch names inside the sandbox. A branch may have `/` in it (`feat/x`); the worktree's
// directory under .worktrees and its tmux session take `__` for each (`feat__x`, as seed 001's branch mode
// names its worktrees), and its front-door route, a host name's label, takes `-` for each `_` (`feat--x`).
// Either form names the worktree afterwards: the mapping leaves a mapped name as it is.
import { CliError, EXIT } from "./errors.js";
import { WORKTREE_NAME } from "./repo.js";
import { capture } from "./ssh.js";

/**
 * A branch the CLI passes on: letters, digits, `_`, `-` and `/` between two of them (no `//`, none at either
 * end). Git's own rules (`git check-ref-format --branch`) apply besides.
 */
const BRANCH_NAME = /^[A-Za-z0-9](?:[A-Za-z0-9_-]|\/(?=[A-Za-z0-9_-]))*$/;

/** A route's name, as lib/front-door.ts takes it: a DNS label of at most 32 characters. */
const ROUTE_LABEL = /^[a-z0-9](?:[a-z0-9-]{0,30}[a-z0-9])?$/;

export interface WorktreeName {
  /** The git branch, as given (`feat/x`, or `feat__x` when the mapped name was given). */
  readonly branch: string;
  /** The directory under `.worktrees` and the tmux session (`feat__x`). */
  readonly dir: string;
}

/** `feat/x` → `feat__x`; a name without `/` is its own. */
export function worktreeDir(branch: string): string {
  return branch.replaceAll("/", "__");
}

/**
 * The name two worktrees may not share: their front-door routes' name, whether or not they have a route
 * (`feat__x`, `feat--x` and `feat/x` share `feat--x`). The sandbox's side compares it with `tr _ -`.
 */
export function worktreeLabel(dir: string): string {
  return dir.replaceAll("_", "-");
}

/** The worktree's front-door route name, or undefined when its name cannot become a DNS label. */
export function worktreeRoute(dir: string): string | undefined {
  const label = worktreeLabel(dir);
  return ROUTE_LABEL.test(label) ? label : undefined;
}

/** Checks a worktree's name as typed (a branch, or the mapped name) and maps it; refuses with exit 5. */
export function parseWorktreeName(name: string): WorktreeName {
  if (!BRANCH_NAME.test(name))
    throw new CliError(
      EXIT.badInput,
      `invalid worktree name ${JSON.stringify(name)}: use letters, digits, '_', '-' and '/' between them (no shell characters); it names a branch, and with '/' as '__' a directory and a tmux session`,
    );
  const dir = worktreeDir(name);
  if (!WORKTREE_NAME.test(dir))
    throw new CliError(
      EXIT.badInput,
      `invalid worktree name ${JSON.stringify(name)}: its directory and tmux session ${dir} would be over 63 characters`,
    );
  return { branch: name, dir };
}

/** Git's own rules for a branch's name (`git check-ref-format --branch`, here): `HEAD` is not one, say. */
export async function checkBranchName(branch: string): Promise<void> {
  const checked = await capture("git", ["check-ref-format", "--branch", branch]);
  if (checked.code !== 0)
    throw new CliError(
      EXIT.badInput,
      `invalid branch name ${JSON.stringify(branch)}: git refuses it (git check-ref-format --branch); nothing was made`,
    );
}
