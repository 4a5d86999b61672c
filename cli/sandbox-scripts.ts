// What the CLI runs inside the sandbox over SSH, as the agent. Every value reaches the script as a
// positional parameter (`set -- 'quoted' ...`), never pasted into its text. A script's exit 3 is a
// conflict (something already there), 4 something missing, 5 bad input; each prints why on stderr.
import { CliError, EXIT } from "./errors.js";
import { remote, shellQuote, type SshTarget } from "./ssh.js";

/**
 * Paths of a repository brought in that are read-only inside by default (hooks, the repo's image and its list
 * of protected paths, the precommit checks). The git keeper refuses commits that change them too, with the
 * paths that list names (sandbox-image/rootfs/usr/local/lib/agent-sandbox/protect-refs).
 */
export const PROTECTED_IN_REPO = [".git/hooks", ".husky", ".agent-sandbox", ".agent-precommit"] as const;

/** Lines every repository brought in gets in .git/info/exclude: .env files never reach a commit. */
const EXCLUDES = [".env", ".env.*", ".envrc", "/.worktrees/"];

export async function runScript(
  target: SshTarget,
  what: string,
  script: string,
  args: readonly string[],
): Promise<string> {
  const result = await remote(target, `set -- ${args.map(shellQuote).join(" ")}\n${script}`);
  if (result.code === 0) return result.stdout;
  const why = result.stderr.trim() || `exit ${result.code}`;
  if (result.code === 255)
    throw new CliError(EXIT.remote, `${what}: cannot reach the sandbox over SSH: ${why}`);
  if (result.code === 3) throw new CliError(EXIT.conflict, `${what}: ${why}`);
  if (result.code === 4) throw new CliError(EXIT.notFound, `${what}: ${why}`);
  if (result.code === 5) throw new CliError(EXIT.badInput, `${what}: ${why}`);
  throw new CliError(EXIT.remote, `${what}: ${why}`);
}

/**
 * Makes /workspace/<repo> a repository that takes pushes into its checked-out branch (updateInstead),
 * with HEAD on `branch` when new; prints `created` when it made it. The directories that become read-only
 * are made (empty) so that they can be mounted, and a git identity for the agent when it has none.
 */
export const PREPARE_REPO = `set -eu
name=$1 branch=$2
repo="$HOME/workspace/$name"
mkdir -p "$HOME/workspace"
if [ ! -d "$repo/.git" ]; then
  if [ -e "$repo" ] && [ -n "$(ls -A "$repo" 2>/dev/null)" ]; then
    echo "/workspace/$name exists and is not a git repository; move it away inside the sandbox" >&2; exit 3
  fi
  git init -q "$repo"
  git -C "$repo" symbolic-ref HEAD "refs/heads/$branch"
  echo created
fi
git -C "$repo" config receive.denyCurrentBranch updateInstead
mkdir -p "$repo/.git/info" ${PROTECTED_IN_REPO.map((p) => `"$repo/${p}"`).join(" ")}
for line in ${EXCLUDES.map(shellQuote).join(" ")}; do
  grep -qxF -- "$line" "$repo/.git/info/exclude" 2>/dev/null || printf '%s\\n' "$line" >>"$repo/.git/info/exclude"
done
git config --global user.name >/dev/null || git config --global user.name agent
git config --global user.email >/dev/null || git config --global user.email "agent@$(hostname).sandbox"
`;

/** Removes what {@link PREPARE_REPO} made when the first push then failed (nothing half-made). */
export const REMOVE_REPO = `set -eu
rm -rf -- "$HOME/workspace/$1"
`;

/**
 * Makes worktree `dir` (.worktrees/<dir>, tmux session <dir>) on `branch`: checked out when it exists, else
 * made from `from` (or HEAD). Refused (3) when a worktree there or one whose name maps onto the same route
 * name (`_` read as `-`: feat__x, feat--x) exists, naming it and its branch.
 */
export const WORKTREE_ADD = `set -eu
name=$1 branch=$2 wt=$3 from=$4
repo="$HOME/workspace/$name"
[ -d "$repo/.git" ] || { echo "no repository at /workspace/$name: run sbx start first" >&2; exit 4; }
git check-ref-format --branch "$branch" >/dev/null 2>&1 ||
  { echo "git refuses $branch as a branch name (git check-ref-format --branch)" >&2; exit 5; }
dir="$repo/.worktrees/$wt"
label=$(printf '%s' "$wt" | tr _ -)
for other in "$repo/.worktrees"/*; do
  [ -e "$other" ] || continue
  o=\${other##*/}
  [ "$(printf '%s' "$o" | tr _ -)" = "$label" ] || continue
  on=$(git -C "$other" rev-parse --symbolic-full-name HEAD 2>/dev/null || true)
  case $on in refs/heads/*) on=\${on#refs/heads/} ;; *) on="(no branch)" ;; esac
  if [ "$o" = "$wt" ] && [ "$on" = "$branch" ]; then
    echo "worktree $branch already exists (/workspace/$name/.worktrees/$wt)" >&2; exit 3
  elif [ "$o" = "$wt" ]; then
    echo "branch $branch maps onto .worktrees/$wt, the worktree of branch $on: name the branch otherwise" >&2; exit 3
  fi
  echo "branch $branch (.worktrees/$wt) and branch $on (.worktrees/$o) would share the route name $label: name the branch otherwise" >&2; exit 3
done
if tmux has-session -t "=$wt" 2>/dev/null; then echo "a tmux session named $wt already exists" >&2; exit 3; fi
if git -C "$repo" show-ref --verify --quiet "refs/heads/$branch"; then
  git -C "$repo" worktree add -q "$dir" "$branch"
else
  git -C "$repo" worktree add -q -b "$branch" "$dir" \${from:+"$from"}
fi
if ! tmux new-session -d -s "$wt" -c "$dir"; then
  git -C "$repo" worktree remove --force "$dir"; exit 1
fi
printf '%s\\n' "$dir"
`;

export const WORKTREE_LIST = `set -eu
repo="$HOME/workspace/$1"
[ -d "$repo/.git" ] || { echo "no repository at /workspace/$1: run sbx start first" >&2; exit 4; }
git -C "$repo" worktree list --porcelain
echo "--sessions"
tmux list-sessions -F '#{session_name} #{session_attached}' 2>/dev/null || true
`;

/**
 * Removes worktree `dir` and its tmux session. Named by a branch with `/` (`given` is not `dir`), the
 * worktree must be on that branch.
 */
export const WORKTREE_RM = `set -eu
name=$1 wt=$2 force=$3 given=$4
repo="$HOME/workspace/$name"
dir="$repo/.worktrees/$wt"
[ -d "$dir" ] || { echo "no worktree $given in /workspace/$name (.worktrees/$wt)" >&2; exit 4; }
if [ "$given" != "$wt" ]; then
  on=$(git -C "$dir" rev-parse --symbolic-full-name HEAD 2>/dev/null || true)
  [ "$on" = "refs/heads/$given" ] || { echo "no worktree on branch $given: .worktrees/$wt is on \${on#refs/heads/}" >&2; exit 4; }
fi
if [ "$force" = yes ]; then git -C "$repo" worktree remove --force "$dir"
else git -C "$repo" worktree remove "$dir" || { echo "worktree $given has changes: commit them, or sbx worktree rm --force" >&2; exit 3; }
fi
tmux kill-session -t "=$wt" 2>/dev/null || true
`;

/**
 * Writes .env files (name, base64 pairs after the first two parameters) into a worktree, 0600, with an
 * .envrc that loads them, and allows it for direnv.
 */
export const ENV_PUSH = `set -eu
name=$1 wt=$2; shift 2
repo="$HOME/workspace/$name"
dir=$repo
[ -z "$wt" ] || dir="$repo/.worktrees/$wt"
[ -d "$dir" ] || { echo "no such directory: \${dir#$HOME}" >&2; exit 4; }
umask 077
envrc="# Written by sbx env push: loads the repository's .env files (never committed: .git/info/exclude)."
while [ $# -ge 2 ]; do
  printf '%s' "$2" | base64 -d >"$dir/$1.sbx-tmp" && mv -f "$dir/$1.sbx-tmp" "$dir/$1"
  envrc="$envrc
dotenv_if_exists $1"
  shift 2
done
printf '%s\\n' "$envrc" >"$dir/.envrc"
direnv allow "$dir" >/dev/null 2>&1 || direnv allow "$dir"
`;

/** Runs a devcontainer's postCreateCommand once per repository, in it, with its containerEnv. */
export const POST_CREATE = `set -eu
name=$1 command=$2
repo="$HOME/workspace/$name"
# Beside the repository, not in its .git: a kept repository's .git is not the agent's (docs/security.md).
marker="$HOME/.config/agent-sandbox/post-create-done/$name"
[ ! -e "$marker" ] && [ ! -e "$repo/.git/sbx-post-create-done" ] || { echo "already run"; exit 0; }
cd "$repo"
[ ! -r "$HOME/.config/agent-sandbox/container.env" ] || { set -a; . "$HOME/.config/agent-sandbox/container.env"; set +a; }
bash -lc "$command"
mkdir -p "$HOME/.config/agent-sandbox/post-create-done"
touch "$marker"
`;

/** Runs a devcontainer's postStartCommand (at each `sbx start`) in the repository, with its environment. */
export const POST_START = `set -eu
cd "$HOME/workspace/$1"
[ ! -r "$HOME/.config/agent-sandbox/container.env" ] || { set -a; . "$HOME/.config/agent-sandbox/container.env"; set +a; }
bash -lc "$2"
`;

/** containerEnv as a file the agent's login shells load (/etc/profile.d/agent-sandbox-direnv.sh), 0600. */
export const CONTAINER_ENV = `set -eu
umask 077
mkdir -p "$HOME/.config/agent-sandbox"
printf '%s' "$1" >"$HOME/.config/agent-sandbox/container.env.tmp"
mv -f "$HOME/.config/agent-sandbox/container.env.tmp" "$HOME/.config/agent-sandbox/container.env"
`;
