// The symlink class of the attack table: every process of root's that walks or writes a path the agent can
// write (the git keeper, the backup daemon and the platform's final backup, the entrypoint at boot, the
// container engine binding a protected path), attacked with the parent-symlink swap: a directory on the way
// to something root acts on is moved aside and a link to `/` (or to a root-only file, or a host directory)
// put in its place, then root's process is made to act. Checking the last name alone (`islink`, `lchown`)
// does not stop it: the kernel resolves the parents. A case is blocked when nothing outside the agent's home
// changed owner, mode or content and no root-only file reached a backup; attacks.test.ts also compares a
// listing of everything outside the home before and after the whole class (`outsideHomeScript`). A microVM
// guest's init resolves its protected paths inside the guest before anything of the agent's runs and
// powers the guest off on one that leads out of the home: no case plants one there (it would stop the
// guest the table runs in); the guest's restart runs every other case's boot-time half.
import type { SandboxCase } from "./cases.js";

export interface SymlinkCase extends SandboxCase {
  /**
   * What the agent plants before the platform stops the sandbox (its final backup runs then, as root) and
   * starts it again (the entrypoint, root's, keeps the repositories, and restores the backup into a home
   * without its first-boot mark); `script` reads the verdict after the start. Absent: `script` makes the
   * root-side process act itself (a git command, for the keeper) and reads the verdict at once.
   */
  readonly plant?: string;
}

const KEEPER =
  "sandbox-git-keeper: worktree roots reached from the home one name at a time (O_NOFOLLOW|O_DIRECTORY from the parent's descriptor), acted on through their descriptors (fchown, fchmod), served only at their recorded real path and below .worktrees";
const BACKUP =
  "sandbox-backup: rclone runs as the agent (setpriv) and keeps a link as a link (--links); root's own walk of the home (changed_since) enters directories with O_NOFOLLOW from the parent's descriptor";

/** `/etc`'s owner and mode, the directory the issue's reproduction took. */
const ETC_STATE = "stat -c '%u:%g %a' /etc";

/**
 * A verdict on `/etc` compared with `$etc_before`: ESCAPED when its owner or mode changed, otherwise BLOCKED
 * with the first refusal git or the keeper printed (into /tmp/sec/sl.out).
 */
const etcVerdict = (blockedBy: string) =>
  `etc_after=$(${ETC_STATE}); if [ "$etc_after" != "$etc_before" ]; then echo "ESCAPED /etc went from $etc_before to $etc_after"; else echo "BLOCKED /etc still $etc_after; $(grep -m1 -oE 'agent-sandbox: .*|fatal: .*' /tmp/sec/sl.out | head -c 160)${blockedBy}"; fi`;

/** Two writing git commands in the kept repository: the keeper gives back what they wrote afterwards. */
const WRITING_COMMANDS = `b=sl-$RANDOM; git checkout -q -b "$b" >>/tmp/sec/sl.out 2>&1; git checkout -q main >>/tmp/sec/sl.out 2>&1; git branch -q -D "$b" >>/tmp/sec/sl.out 2>&1`;

/**
 * A linked worktree made (through the keeper) at `.worktrees/$1/etc`, then `.worktrees/$1` moved aside and
 * a link to `/` put in its place: the worktree's recorded root is now `/etc` by its path.
 */
const swappedWorktree = (name: string) =>
  `: >/tmp/sec/sl.out && cd "$REPO" && mkdir -p .worktrees/${name} && chmod 777 .worktrees/${name} && git worktree add -q --detach .worktrees/${name}/etc >>/tmp/sec/sl.out 2>&1 && mv .worktrees/${name} .worktrees/${name}.old && ln -s / .worktrees/${name}`;
/** Undoes {@link swappedWorktree}. */
const unswapWorktree = (name: string) =>
  `cd "$REPO" && rm -f .worktrees/${name} && { [ ! -d .worktrees/${name}.old ] || mv .worktrees/${name}.old .worktrees/${name}; } && git worktree remove --force .worktrees/${name}/etc >/dev/null 2>&1; rm -rf .worktrees/${name}; git worktree prune >/dev/null 2>&1`;

/** The backup remote of a sandbox whose backups stay on the host (components/tenant/identity.ts). */
const BACKUP_REMOTE = "/mnt/backup/workspace";
/** Where the backup cases put their links (the home's own, so a backup takes it). */
const BACKUP_LINKS = "$HOME/sl-backup";
/**
 * A root-only file of every sandbox (sshd's host key: root's, 0600) and its telltale: a text file with this
 * line. Only a whole line of a text file: the world-readable binaries that print it (ssh-add, gpgv, rclone)
 * hold the words too, and a walk of the backup that went through a link the agent swapped in (rclone runs as
 * the agent, and copies what the agent could read anyway) is no leak of root's.
 */
const ROOT_ONLY_FILE = "/etc/ssh/ssh_host_ed25519_key";
const ROOT_ONLY_TELLTALE = "-----BEGIN OPENSSH PRIVATE KEY-----";

export function symlinkCases(): SymlinkCase[] {
  const c = (id: string, attack: string, mechanism: string, script: string, plant?: string): SymlinkCase => ({
    id: `symlink/${id}`,
    cls: "symlink",
    attack,
    mechanism,
    script,
    ...(plant ? { plant } : {}),
  });
  return [
    c(
      "keeper-worktree-outside",
      "the issue's reproduction: git worktree add ~/x/etc, then ~/x moved aside and linked to /, then a writing git command",
      `${KEEPER}; git worktree add outside .worktrees refused`,
      `etc_before=$(${ETC_STATE}); d="$HOME/sl-x"; rm -rf "$d" "$d.old"; mkdir -p "$d" && chmod 777 "$d" && cd "$REPO" && git worktree add -q --detach "$d/etc" >/tmp/sec/sl.out 2>&1; if [ -d "$d/etc" ]; then mv "$d" "$d.old" && ln -s / "$d"; fi; cd "$REPO" && ${WRITING_COMMANDS}; ${etcVerdict("")}; rm -f "$d"; [ ! -d "$d.old" ] || mv "$d.old" "$d"; git worktree remove --force "$d/etc" >/dev/null 2>&1; rm -rf "$d"; git worktree prune >/dev/null 2>&1`,
    ),
    c(
      "keeper-worktrees-parent-swap",
      "a worktree below .worktrees whose parent directory is swapped for a link to /, then a writing git command (the keeper gives files back and secures every root)",
      KEEPER,
      `etc_before=$(${ETC_STATE}); ${swappedWorktree("sl")} && cd "$REPO" && ${WRITING_COMMANDS}; ${etcVerdict("; the root's parent is a link: not walked, not secured")}; ${unswapWorktree("sl")}`,
    ),
    c(
      "keeper-dot-git-link",
      "a linked worktree's .git file replaced by a link to a root file, then a writing git command (the keeper makes that .git file its own)",
      `${KEEPER}; a .git that is not a regular file is left alone`,
      `shadow_before=$(stat -c '%u:%g %a' /etc/shadow); cd "$REPO" && git worktree add -q --detach .worktrees/sl-dotgit >/tmp/sec/sl.out 2>&1 && (cd .worktrees/sl-dotgit && cp .git /tmp/sec/sl-dotgit && rm -f .git 2>>/tmp/sec/sl.out; ln -s /etc/shadow .git 2>>/tmp/sec/sl.out); ${WRITING_COMMANDS}; shadow_after=$(stat -c '%u:%g %a' /etc/shadow); if [ "$shadow_after" != "$shadow_before" ]; then echo "ESCAPED /etc/shadow went from $shadow_before to $shadow_after"; else echo "BLOCKED /etc/shadow still $shadow_after; $(grep -m1 -oE 'rm: .*|ln: .*|agent-sandbox: .*' /tmp/sec/sl.out | head -c 120)"; fi; rm -f .worktrees/sl-dotgit/.git 2>/dev/null; cp /tmp/sec/sl-dotgit .worktrees/sl-dotgit/.git 2>/dev/null; git worktree remove --force .worktrees/sl-dotgit >/dev/null 2>&1; git worktree prune >/dev/null 2>&1`,
    ),
    c(
      "keeper-hardlink-given-back",
      "a second name for .git/config made in the worktree, then a writing git command (the keeper gives the worktree's files of its own back to the agent)",
      "fs.protected_hardlinks (no hard link to a file the agent does not own; set by the guest's init in a microVM); the keeper gives back no file with a second name",
      `cd "$REPO" && ln .git/config sl-config >/tmp/sec/sl.out 2>&1; ${WRITING_COMMANDS}; owner=$(stat -c %U .git/config); rm -f sl-config; if [ "$owner" != gitkeeper ]; then echo "ESCAPED .git/config is now $owner's"; else echo "BLOCKED .git/config still gitkeeper's; $(grep -m1 -oE 'ln: .*' /tmp/sec/sl.out | head -c 120)"; fi`,
    ),
    c(
      "keeper-socket-cwd-link",
      "the keeper's socket asked to run a writing command in a directory reached through a link to /etc",
      "sandbox-git-keeper: a command runs only in a kept repository reached from the home without a link",
      `etc_before=$(${ETC_STATE}); ln -sfn /etc "$HOME/sl-cwd"; python3 -c 'import json,os,socket; s=socket.socket(socket.AF_UNIX,socket.SOCK_SEQPACKET); s.connect("/run/agent-sandbox/git-keeper.sock"); socket.send_fds(s,[json.dumps({"op":"git","argv":["checkout","-q","-b","sl"],"cwd":os.path.expanduser("~/sl-cwd"),"env":{}}).encode()],[0,1,2]); print(s.recv(999))' >/tmp/sec/sl.out 2>&1; rm -f "$HOME/sl-cwd"; ${etcVerdict("")}`,
    ),
    c(
      "keeper-at-boot-parent-swap",
      "a worktree below .worktrees whose parent is swapped for a link to / and left so across a restart (the entrypoint's keeper secures every root at boot)",
      KEEPER,
      `for _ in $(seq 60); do [ -S /run/agent-sandbox/git-keeper.sock ] && break; sleep 1; done; etc_before=$(cat "$HOME/.sl-etc-before"); rm -f "$HOME/.sl-etc-before"; : >/tmp/sec/sl.out; ${etcVerdict("; the root's parent is a link: not secured at boot")}; ${unswapWorktree("slb")}`,
      `mkdir -p /tmp/sec && ${ETC_STATE} >"$HOME/.sl-etc-before" && ${swappedWorktree("slb")}`,
    ),
    // The swap loop runs until the stop ends every process of the sandbox, after the final backup.
    c(
      "backup-root-file-links",
      "links to a root-only file and to its directory, and a directory swapped for that link again and again, in the home while root's final backup runs",
      BACKUP,
      `found=$(grep -rlIx -- '${ROOT_ONLY_TELLTALE}' ${BACKUP_REMOTE} 2>/dev/null | head -3 | tr '\\n' ' '); taken=$(readlink ${BACKUP_REMOTE}/sl-backup/hostkey || cat ${BACKUP_REMOTE}/sl-backup/hostkey.rclonelink) 2>/dev/null; rm -rf ${BACKUP_LINKS}; if [ -n "$found" ]; then echo "ESCAPED a root-only file in the backup: $found"; elif [ -z "$taken" ]; then echo "INCONCLUSIVE the final backup did not take the home"; else echo "BLOCKED the backup holds the links as links (hostkey -> $taken), no root-only content"; fi`,
      `rm -rf ${BACKUP_LINKS} && mkdir -p ${BACKUP_LINKS}/swap && ln -s ${ROOT_ONLY_FILE} ${BACKUP_LINKS}/hostkey && ln -s /etc/ssh ${BACKUP_LINKS}/sshdir && echo plain >${BACKUP_LINKS}/swap/file && setsid nohup bash -c 'exec -a sl-backup-swap bash -c "cd ${BACKUP_LINKS} && while :; do mv swap swap.old && ln -s /etc/ssh swap && rm swap && mv swap.old swap; done"' >/dev/null 2>&1 </dev/null &`,
    ),
    c(
      "restore-through-link",
      "a backup shaped by the agent (a link to /etc and a file below it, where the final backup leaves them) restored at the next boot",
      "sandbox-backup restore: rclone runs as the agent (setpriv) even when the entrypoint, root, asks for the restore",
      `if [ -e /etc/sl-restored ]; then echo "ESCAPED /etc/sl-restored written by the restore"; elif [ ! -e "$HOME/.cache/sl-restore" ] && [ ! -L "$HOME/.cache/sl-restore" ]; then echo "INCONCLUSIVE the restore did not run (nothing restored)"; else echo "BLOCKED restored as the agent: nothing written through the link ($(ls -ld "$HOME/.cache/sl-restore" | cut -c1))"; fi; rm -rf "$HOME/.cache/sl-restore" ${BACKUP_REMOTE}/.cache/sl-restore ${BACKUP_REMOTE}/.cache/sl-restore.rclonelink`,
      // .cache is excluded from backups, so the final backup's sync leaves what is planted there in the
      // remote; the restore (a copy of the whole remote) takes it. No first-boot mark: the next boot restores.
      `mkdir -p ${BACKUP_REMOTE}/.cache/sl-restore && printf /etc >${BACKUP_REMOTE}/.cache/sl-restore.rclonelink && echo planted >${BACKUP_REMOTE}/.cache/sl-restore/sl-restored && rm -f "$HOME/.sandbox_initialized"`,
    ),
    c(
      "entrypoint-first-boot-mark-link",
      "the first-boot mark replaced by a link to a root-owned directory's file (the entrypoint tests it and makes it at boot)",
      "sandbox-entrypoint: the mark is made by the agent (runuser), never by root",
      `if [ -e /etc/agent-sandbox/sl-initialized ]; then echo "ESCAPED /etc/agent-sandbox/sl-initialized made at boot"; else echo "BLOCKED nothing made through the link ($(readlink "$HOME/.sandbox_initialized"))"; fi; rm -f "$HOME/.sandbox_initialized"; touch "$HOME/.sandbox_initialized"`,
      `rm -f "$HOME/.sandbox_initialized" && ln -s /etc/agent-sandbox/sl-initialized "$HOME/.sandbox_initialized"`,
    ),
  ];
}

/**
 * The plant phase of the cases that have one: each fragment runs as the agent and prints `@@<id> planted` when
 * it succeeded, `@@<id> not-planted` otherwise.
 */
export function plantScript(cases: readonly SymlinkCase[]): string {
  return cases
    .filter((c) => c.plant)
    .map(
      (c, i) =>
        `plant_${i}() {\n${c.plant}\n}\nif (cd "$HOME" && plant_${i}) >/dev/null 2>&1; then echo '@@${c.id} planted'; else echo '@@${c.id} not-planted'; fi`,
    )
    .join("\n");
}

/**
 * Everything outside the agent's home, one `path owner mode ctime` line each (a change of content, owner or
 * mode moves the ctime), as whoever runs it can see it: what the kernel, the sandbox's own processes and
 * the agent write for themselves is left out (/proc, /sys, /dev, /run, /tmp, /var/tmp, the backup
 * directory, logs, the backup daemon's status and what is made anew at every boot). `phase`
 * "before" keeps the listing in the directory `dir`; "after" prints what differs from it (at most 40
 * lines, `<` before, `>` after), then `@@outside <lines compared>`, and removes `dir`.
 */
export function outsideHomeScript(phase: "before" | "after", dir: string): string {
  const pruned = [
    "/proc",
    "/sys",
    "/dev",
    "/run",
    "/tmp",
    "/var/tmp",
    "/home",
    "/mnt",
    "/var/log",
    "/var/lib/agent-sandbox",
    dir,
  ];
  // The engine's files, and the tmpfs a microVM guest's init mounts for the platform's keys at every boot.
  const everyBoot = ["/etc/resolv.conf", "/etc/hosts", "/etc/hostname", "/etc/ssh/authorized_keys"];
  const prune = pruned.map((p) => `-path '${p}'`).join(" -o ");
  const skip = everyBoot.map((p) => `-path '${p}'`).join(" -o ");
  const list = (file: string) =>
    `find / -xdev \\( ${prune} \\) -prune -o \\( ${skip} \\) -o -printf '%p\\t%u:%g\\t%m\\t%C@\\n' 2>/dev/null | LC_ALL=C sort >'${dir}/${file}'`;
  if (phase === "before")
    return `rm -rf '${dir}' && mkdir -p '${dir}' && ${list("before")}; echo "@@outside $(wc -l <'${dir}/before')"`;
  return `${list("after")}; LC_ALL=C diff '${dir}/before' '${dir}/after' | grep -E '^[<>]' | head -40; echo "@@outside $(wc -l <'${dir}/after')"; rm -rf '${dir}'`;
}

/**
 * The container backend's protected paths are bind mounts of the home's own host directory (`<home>/<path>`
 * over `/home/agent/<path>`, read-only), which the engine resolves on the host, as root, at every start. The
 * agent swaps the directory above the repository for a link to a host directory (`$SL_HOST_DIR`, made by
 * the test with a `repo/.git/hooks/canary` in it) and leaves it so until the next start. attacks.test.ts
 * reads the verdict on the host side: the start refused (blocked), or the sandbox running with the host's
 * file readable (escaped). A microVM resolves its protected paths inside the guest (its init): no host
 * path to reach there.
 */
export function bindSourceCase(repo: string): SymlinkCase {
  const above = repo.slice(0, repo.lastIndexOf("/"));
  return {
    id: "symlink/protected-path-bind-source",
    cls: "symlink",
    attack:
      "the directory above a protected path (.git/hooks) swapped for a link to a host directory before a restart (the engine binds the path's source, resolved on the host as root)",
    mechanism:
      "the tenant provider starts no container whose bind source passes through a symbolic link, checked while the container is stopped",
    script: "",
    plant: `mv "$HOME/${above}" "$HOME/${above}.sl-aside" && ln -s "$SL_HOST_DIR" "$HOME/${above}"`,
  };
}
