// Backups of a kubernetes project's home, taken by the runtime. In a container, the backup daemon
// runs as root beside the agent and alone reads the tenant's storage token. A Pod has no root: any token its
// daemon could read, the agent could read too, and then delete its own backups; and its NetworkPolicy keeps
// it away from GKE's metadata server anyway. So the runtime does it from outside, with what it already has:
// the API server's exec and the tenant's own short-lived token.
//
// The home is read through the Pod's own `sftp-server -R` (read-only, as the Pod's user), run over the exec's
// stdin and stdout and mounted by sshfs in passive mode (no SSH, no network, no key) in a mount namespace of the
// backup's own, and rclone syncs that mount to the tenant's prefix of the bucket: the same command line, the
// same excludes and the same layout as the container's daemon (symbolic links as `.rclonelink` objects), so a
// restore, a snapshot or a move between backends reads one format. The token never enters the Pod.
//
// What the mount shows is the tenant's, and changes under the reader (a directory listed a moment ago is a link
// to the host's /etc when it is read): so the mount follows no link (`nosymfollow`), and rclone runs as an
// unprivileged user that could read nothing of the runtime's or write anywhere on the host even if it did.
// (rclone's own sftp backend would keep the host out of the path altogether, but Debian's rclone 1.60 speaks
// SFTP only through its own SSH client, and keeps no links as `.rclonelink` objects on that backend.)
//
// A new home (the claim's UID differs from the one of the last backup, or none is recorded) is restored first
// from what the bucket holds, as the container's entrypoint does at a first boot, onto a writable mount: a sync
// from an empty claim would otherwise delete the project's backup.
import { spawn, type ChildProcess } from "node:child_process";
import { promises as fs } from "node:fs";
import { gcsBackupRemote, localBackupHostDir } from "../../components/tenant/identity.js";
import { NOBODY_UID } from "../../lib/constants.js";
import type { TenantSpec } from "../../components/tenant/spec.js";
import type { Database } from "../store/db.js";
import { readBackupRecord, recordBackup } from "../store/tenants.js";
import { SandboxNotRunningError } from "../sandbox/exec.js";
import type { SandboxRunner } from "../sandbox/runner.js";
import type { BackupStatus } from "../sandbox/backup.js";
import type { PodExec, PodExecOptions } from "./exec.js";
import { SFTP_SERVER } from "./ssh-gateway.js";

/**
 * What a backup leaves out: the same as sandbox-backup's EXCLUDES (sandbox-image/rootfs/usr/local/sbin/
 * sandbox-backup; tests/unit/kubernetes-backup.test.ts reads both), caches and the first-boot marker.
 */
export const BACKUP_EXCLUDES = [".cache/**", ".npm/_cacache/**", ".sandbox_initialized", "/lost+found/**"];
/** sandbox-backup's NETWORK_FLAGS: fail fast on an unreachable bucket instead of hanging a whole interval. */
export const NETWORK_FLAGS = [
  "--contimeout",
  "10s",
  "--timeout",
  "60s",
  "--retries",
  "2",
  "--low-level-retries",
  "3",
];
/** How long a mount may take to appear (sshfs's first requests go through the API server). */
const MOUNT_TIMEOUT_MS = 30_000;
/** At most this much of a tool's stderr is kept for an error. */
const STDERR_BYTES = 16 * 1024;

/** The runtime's record of a kubernetes project's backups: backup-status's fields, and the claim last seen. */
export interface KubernetesBackupRecord extends BackupStatus {
  /** The home claim's UID at the last attempt: another one is a new home, restored before it is synced. */
  readonly home_claim_uid?: string;
  readonly last_restore_at?: string | null;
}

export interface KubernetesBackupsOptions {
  /** A command in a project's Pod (runtime/kubernetes/sandbox.ts `kubernetesProjects(...).exec`). */
  readonly exec: (projectId: string, argv: readonly string[], options: PodExecOptions) => Promise<PodExec>;
  /** A project's runner through the cluster's exec (`kubernetesProjects(...).runnerOf`): short commands. */
  readonly runnerOf: (projectId: string) => SandboxRunner;
  /** The home claim's UID, or undefined when the claim does not exist. */
  readonly homeClaimUid: (projectId: string) => Promise<string | undefined>;
  /**
   * The tenant's own storage token, minted now, as rclone's `token` option takes it (runtime/gcp/credentials.ts);
   * a gcp-mode project's backups need it. A local one's go to its directory on this host (`backupRoot`), none.
   */
  readonly token?: (projectId: string) => Promise<string>;
  /** The storage endpoint when it is not Google's (an emulator): rclone's `endpoint`. */
  readonly storageEndpoint?: string;
  readonly log?: (message: string, fields?: Record<string, unknown>) => void;
}

export type BackupTrigger = "interval" | "change" | "final" | "once";

export type BackupOutcome =
  | { readonly ok: true; readonly restored: boolean }
  | { readonly ok: false; readonly why: string; readonly skipped?: boolean };

/** A tool's run: its exit code (null when it was killed) and the end of its stdout and stderr. */
export interface ToolResult {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

function runTool(
  command: string,
  args: readonly string[],
  env: NodeJS.ProcessEnv,
  timeoutMs: number,
  passFd?: number,
): Promise<ToolResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, {
      env,
      stdio: ["ignore", "pipe", "pipe", ...(passFd === undefined ? [] : [passFd])],
    });
    let stdout = "";
    let stderr = "";
    child.stdout!.on("data", (chunk: Buffer) => (stdout = (stdout + chunk.toString()).slice(-STDERR_BYTES)));
    child.stderr!.on("data", (chunk: Buffer) => (stderr = (stderr + chunk.toString()).slice(-STDERR_BYTES)));
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    child.once("error", (error) => {
      clearTimeout(timer);
      reject(new Error(`cannot run ${command}: ${error.message}`));
    });
    child.once("close", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

const lastLines = (text: string, lines = 3) => text.trim().split("\n").slice(-lines).join("\n");

/**
 * The user every rclone of these backups runs as: `nobody`, with no groups, no capabilities and no way to gain
 * any. It reads the host's world-readable files only, so a path that did lead out of a tenant's home would reach
 * nothing of the runtime's (its keys are root's), and a restore could write nowhere on the host.
 */
export const UNPRIVILEGED_ID = NOBODY_UID;

/** `argv` run as {@link UNPRIVILEGED_ID} (util-linux's setpriv; no_new_privs keeps a setuid binary from undoing it). */
export function unprivileged(argv: readonly string[]): string[] {
  return [
    "setpriv",
    `--reuid=${UNPRIVILEGED_ID}`,
    `--regid=${UNPRIVILEGED_ID}`,
    "--clear-groups",
    "--inh-caps=-all",
    "--bounding-set=-all",
    "--no-new-privs",
    "--",
    ...argv,
  ];
}

/**
 * Where the Pod's home is mounted in a backup's own mount namespace: on a fresh tmpfs over that namespace's /tmp
 * (root's, not writable by {@link UNPRIVILEGED_ID}), so that the mount is reachable by rclone's user and by
 * nothing on the host.
 */
export const HOME_IN_NAMESPACE = "/tmp/home";
/**
 * Where a local project's backup directory on this host is bound in that namespace: rclone's user reaches it
 * there whatever the modes of the directories above it on the host (a data directory may be root's alone).
 */
export const BACKUP_IN_NAMESPACE = "/tmp/backup";

/**
 * The mount namespace's start: a private tmpfs over /tmp, the mountpoint in it, and then sshfs itself (the same
 * process, so the runtime sees it end), passive: SFTP on its stdin and stdout. `$1` is sshfs's options.
 */
const NAMESPACE_SCRIPT = [
  // A local backup directory ($2): opened here, in this namespace, before the tmpfs below covers its path (it
  // may be under /tmp), then bound through that descriptor (-c: never resolved back to a path), with nothing on
  // it run or followed.
  'if [ -n "${2:-}" ]; then exec 3<"$2"; fi',
  "mount -t tmpfs -o mode=0755,size=64k,nosuid,nodev,noexec agent-sandbox-backup /tmp",
  `mkdir -m 0755 ${HOME_IN_NAMESPACE}`,
  'if [ -n "${2:-}" ]; then',
  `  mkdir -m 0755 ${BACKUP_IN_NAMESPACE}`,
  `  mount -c --bind /proc/self/fd/3 ${BACKUP_IN_NAMESPACE}`,
  `  mount -o remount,bind,nosuid,nodev,noexec,nosymfollow ${BACKUP_IN_NAMESPACE}`,
  "  exec 3<&-",
  "fi",
  `exec sshfs -f -o "$1" : ${HOME_IN_NAMESPACE}`,
].join("\n");

/** One mount of a process's mount table (/proc/<pid>/mountinfo), its fields unescaped. */
interface MountEntry {
  readonly mountpoint: string;
  /** The mount's own flags (ro, nosuid, nosymfollow, ...). */
  readonly options: readonly string[];
  readonly fsType: string;
}

async function mountsOf(pid: number): Promise<MountEntry[]> {
  const unescape = (field: string) =>
    field.replace(/\\([0-7]{3})/g, (_m, octal: string) => String.fromCharCode(parseInt(octal, 8)));
  const table = await fs.readFile(`/proc/${pid}/mountinfo`, "utf8");
  return table
    .split("\n")
    .filter((line) => line.includes(" - "))
    .map((line) => {
      const [before, after] = line.split(" - ") as [string, string];
      const fields = before.split(" ");
      return {
        mountpoint: unescape(fields[4] ?? ""),
        options: (fields[5] ?? "").split(","),
        fsType: after.split(" ")[0] ?? "",
      };
    });
}

export interface PodHomeMount {
  /** The home in the mount's namespace, as the commands {@link PodHomeMount.run} runs see it. */
  readonly path: string;
  /** Runs `argv` as {@link UNPRIVILEGED_ID} in the mount's namespace (where the home is {@link path}). */
  run(argv: readonly string[], env: NodeJS.ProcessEnv, timeoutMs: number): Promise<ToolResult>;
  /** Ends sshfs (and with it the namespace and its mount) and the exec; safe to call twice. */
  close(): Promise<void>;
}

/**
 * Mounts the Pod's home (its `$HOME`, the image's /home/agent) where only the backup's own commands reach it:
 * sshfs, in a mount namespace of its own, speaks SFTP on its stdin and stdout, which are carried to and from the
 * Pod's `sftp-server` (`-R` unless `writable`) through the exec.
 *
 * The tenant controls everything the mount shows, and can change it at any moment (a directory listed a moment
 * ago can be a link to `/` when it is read), so nothing on this host may follow a link through it: the mount is
 * `nosymfollow` (a path through a link fails with ELOOP; a link itself still reads as its target's text, which is
 * what rclone's `--links` keeps) and is used only by {@link UNPRIVILEGED_ID}. Links are shown as they are
 * (`no_contain_symlinks`: Debian's sshfs rewrites absolute and `..` targets by default); `allow_other` lets the
 * unprivileged user in, and no other process is in the namespace.
 */
export async function mountPodHome(
  exec: (argv: readonly string[], options: PodExecOptions) => Promise<PodExec>,
  writable = false,
  backupDir?: string,
): Promise<PodHomeMount> {
  const mode = writable ? "rw" : "ro";
  const options = [
    "passive",
    mode,
    "no_contain_symlinks",
    "idmap=none",
    "allow_other",
    // Writes wait for their answer (a restore's data is then bounded by the exec's, not queued in memory).
    ...(writable ? ["sshfs_sync"] : []),
  ].join(",");
  const sshfs: ChildProcess = spawn(
    "unshare",
    [
      ...["--mount", "--propagation", "private", "--", "sh", "-euc", NAMESPACE_SCRIPT, "sh", options],
      ...(backupDir === undefined ? [] : [backupDir]),
    ],
    { stdio: ["pipe", "pipe", "pipe"] },
  );
  let sshfsError = "";
  let serverError = "";
  sshfs.stderr!.on(
    "data",
    (chunk: Buffer) => (sshfsError = (sshfsError + chunk.toString()).slice(-STDERR_BYTES)),
  );
  let exited = false;
  const sshfsEnded = new Promise<number | null>((resolve) => {
    sshfs.once("close", (code) => {
      exited = true;
      resolve(code);
    });
    sshfs.once("error", (error) => {
      sshfsError += `cannot run unshare: ${error.message}`;
      exited = true;
      resolve(null);
    });
  });
  // The namespace, held open by a descriptor of its own: a command is put into this namespace and no other, even
  // should sshfs have ended and its pid been reused.
  const held: { namespace?: fs.FileHandle } = {};
  let pod: PodExec | undefined;
  let closed = false;
  const close = async () => {
    if (closed) return;
    closed = true;
    // On SIGTERM sshfs unmounts; the namespace, and anything left mounted in it, ends with its last process.
    sshfs.kill("SIGTERM");
    const ended = await Promise.race([sshfsEnded, new Promise((r) => setTimeout(r, 5_000, "timeout"))]);
    if (ended === "timeout") sshfs.kill("SIGKILL");
    pod?.close();
    await held.namespace?.close().catch(() => undefined);
  };
  const enter = async (argv: readonly string[], env: NodeJS.ProcessEnv, timeoutMs: number) => {
    if (exited || !held.namespace)
      throw new Error(`the Pod's home is no longer mounted: ${lastLines(sshfsError)}`);
    return runTool("nsenter", ["--mount=/proc/self/fd/3", "--", ...argv], env, timeoutMs, held.namespace.fd);
  };
  const failed = async (why: string): Promise<never> => {
    await close();
    throw new Error(`cannot mount the Pod's home: ${why}`);
  };
  try {
    pod = await exec(["sh", "-c", `exec ${SFTP_SERVER}${writable ? "" : " -R"} -d "$HOME"`], {
      stdin: true,
      tty: false,
      onOutput: (stream, chunk) => {
        if (stream === "stderr") {
          serverError = (serverError + chunk.toString()).slice(-STDERR_BYTES);
          return;
        }
        if (!sshfs.stdin!.write(chunk)) {
          pod!.pause();
          sshfs.stdin!.once("drain", () => pod!.resume());
        }
      },
    });
  } catch (error) {
    await close();
    throw error;
  }
  const opened = pod;
  sshfs.stdout!.on("data", (chunk: Buffer) => opened.write(chunk));
  sshfs.stdin!.on("error", () => undefined); // sshfs gone: its exit says why
  void opened.exited.then(
    () => sshfs.stdin!.end(),
    () => sshfs.stdin!.end(),
  );
  if (sshfs.pid === undefined) return failed(lastLines(sshfsError) || "unshare did not start");
  const mounted = async () =>
    (await mountsOf(sshfs.pid!).catch(() => [])).find(
      (entry) => entry.mountpoint === HOME_IN_NAMESPACE && entry.fsType.startsWith("fuse"),
    );
  const deadline = Date.now() + MOUNT_TIMEOUT_MS;
  while (!(await mounted())) {
    if (exited || Date.now() > deadline)
      return failed(lastLines(serverError) || lastLines(sshfsError) || (exited ? "sshfs ended" : "no mount"));
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  // Opened only now: before unshare(2), the process's namespace is this one's.
  const namespace = await fs.open(`/proc/${sshfs.pid}/ns/mnt`, "r").catch(() => undefined);
  held.namespace = namespace;
  const own = await fs.stat("/proc/self/ns/mnt");
  if (!namespace || exited || (await namespace.stat()).ino === own.ino)
    return failed(lastLines(sshfsError) || "sshfs ended");
  // The per-mount flags: no link is followed through the mount, and nothing on it runs or is a device.
  const remount = await enter(
    ["mount", "-o", `remount,bind,${mode},nosuid,nodev,noexec,nosymfollow`, HOME_IN_NAMESPACE],
    { PATH: process.env.PATH ?? "/usr/sbin:/usr/bin:/sbin:/bin" },
    15_000,
  );
  const entry = await mounted();
  if (remount.code !== 0 || !entry?.options.includes("nosymfollow"))
    return failed(
      `cannot make the mount nosymfollow (Linux 5.10 or later is needed): ${lastLines(remount.stderr) || "the flag is not set"}`,
    );
  return {
    path: HOME_IN_NAMESPACE,
    run: (argv, env, timeoutMs) => enter(unprivileged(argv), env, timeoutMs),
    close,
  };
}

/** What the bucket holds at the top of `remote` (`rclone lsf`, as `nobody`); a missing prefix is no backup. */
async function bucketListing(remote: string, env: NodeJS.ProcessEnv, timeoutMs: number) {
  const [command, ...args] = unprivileged(["rclone", "lsf", "--max-depth", "1", remote, ...NETWORK_FLAGS]);
  const listing = await runTool(command!, args, env, timeoutMs);
  return { ...listing, missing: listing.code !== 0 && /directory not found/i.test(listing.stderr) };
}

/** `rclone size --json` of the tenant's prefix, as `nobody`. */
function bucketSize(remote: string, env: NodeJS.ProcessEnv): Promise<ToolResult> {
  const [command, ...args] = unprivileged(["rclone", "size", "--json", remote, ...NETWORK_FLAGS]);
  return runTool(command!, args, env, 60_000);
}

/** The same of a local backup directory, read by the runtime itself (its parents may be root's alone). */
async function localListing(dir: string) {
  try {
    const names = await fs.readdir(dir);
    return { code: 0, stdout: names.join("\n"), stderr: "", missing: false };
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    return { code: 1, stdout: "", stderr: String((error as Error).message), missing: code === "ENOENT" };
  }
}

/** `rclone size --json` of a local backup directory: its files (links are `.rclonelink` files) and their bytes. */
async function localSize(dir: string): Promise<ToolResult> {
  let bytes = 0;
  let count = 0;
  const walk = async (at: string): Promise<void> => {
    for (const entry of await fs.readdir(at, { withFileTypes: true })) {
      const full = `${at}/${entry.name}`;
      if (entry.isDirectory()) await walk(full);
      else if (entry.isFile()) {
        bytes += (await fs.lstat(full)).size;
        count += 1;
      }
    }
  };
  await walk(dir);
  return { code: 0, stdout: JSON.stringify({ bytes, count }), stderr: "" };
}

/** `find`'s arguments for "anything in the home changed at or after `since`" (the daemon's changed_since). */
export function changedSinceArgv(since: Date): string[] {
  const prune = BACKUP_EXCLUDES.flatMap((pattern, index) => [
    ...(index > 0 ? ["-o"] : []),
    "-path",
    `./${pattern.replace(/^\//, "").replace(/\/\*\*$/, "")}`,
  ]);
  // mtimes have the file system's granularity: a second of slack never misses a change.
  const at = `@${Math.floor(since.getTime() / 1000) - 1}`;
  return [
    ...["sh", "-c", 'cd "$HOME" && exec find "$@"', "sh"],
    ...[".", "-xdev", "(", ...prune, ")", "-prune", "-o"],
    ...["(", "-newermt", at, "-o", "-newerct", at, ")", "-print", "-quit"],
  ];
}

/** The project's recorded backup state (`tenants.last_backup`), or {} when there is none. */
async function recorded(db: Database, projectId: string): Promise<KubernetesBackupRecord> {
  return (await readBackupRecord<KubernetesBackupRecord>(db, projectId)) ?? {};
}

/**
 * The runtime's backups of kubernetes projects: {@link backUp} one now (the final one before a stop or delete,
 * or an operator's), and {@link job} for every running project on its spec's interval. One backup of a project
 * at a time in this runtime: a second waits for the first and then takes its own (what changed meanwhile counts).
 */
export class KubernetesBackups {
  private readonly inFlight = new Map<string, Promise<BackupOutcome>>();

  constructor(readonly options: KubernetesBackupsOptions) {}

  backUp(
    db: Database,
    spec: TenantSpec,
    trigger: BackupTrigger,
    deadlineSeconds = 3600,
  ): Promise<BackupOutcome> {
    const before = this.inFlight.get(spec.projectId) ?? Promise.resolve(undefined);
    const next = before.catch(() => undefined).then(() => this.backUpNow(db, spec, trigger, deadlineSeconds));
    this.inFlight.set(spec.projectId, next);
    void next.finally(() => {
      if (this.inFlight.get(spec.projectId) === next) this.inFlight.delete(spec.projectId);
    });
    return next;
  }

  private async backUpNow(
    db: Database,
    spec: TenantSpec,
    trigger: BackupTrigger,
    deadlineSeconds: number,
  ): Promise<BackupOutcome> {
    const { projectId } = spec;
    // gcp: the tenant's prefix of the bucket, with its own token. local: its directory on this host, as a
    // container's (the same `workspace` layout), owned by the user rclone runs as.
    const hostDir =
      !spec.gcp && spec.mode === "local" && spec.host.backupRoot
        ? localBackupHostDir(spec.host.backupRoot, projectId)
        : undefined;
    // What is recorded (and shown); rclone reaches a local one where the backup's namespace binds it.
    const remote = spec.gcp ? gcsBackupRemote(spec.gcp.bucket, projectId) : hostDir && `${hostDir}/workspace`;
    if (!remote)
      return {
        ok: false,
        skipped: true,
        why: `project ${projectId} has no backup location (mode ${spec.mode})`,
      };
    const target = hostDir ? `${BACKUP_IN_NAMESPACE}/workspace` : remote;
    const previous = await recorded(db, projectId);
    const started = Date.now();
    const base: KubernetesBackupRecord = {
      ...previous,
      remote,
      interval_seconds: spec.backupIntervalSeconds,
      after_change_seconds: spec.backupAfterChangeSeconds || null,
      last_trigger: trigger,
      last_attempt_at: new Date(started).toISOString(),
    };
    const fail = async (why: string): Promise<BackupOutcome> => {
      await recordBackup(db, projectId, {
        ...base,
        state: "idle",
        last_result: "error",
        last_error: why,
        last_duration_ms: Date.now() - started,
      });
      this.options.log?.("kubernetes backup failed", { project: projectId, trigger, error: why });
      return { ok: false, why };
    };
    let claim: string | undefined;
    try {
      claim = await this.options.homeClaimUid(projectId);
    } catch (error) {
      return fail((error as Error).message);
    }
    if (!claim) return { ok: false, skipped: true, why: `project ${projectId} has no home claim` };
    let bucket: NodeJS.ProcessEnv = {};
    if (spec.gcp) {
      try {
        if (!this.options.token) throw new Error("this runtime mints no storage tokens (not on GCP)");
        bucket = {
          RCLONE_GCS_TOKEN: await this.options.token(projectId),
          RCLONE_GCS_BUCKET_POLICY_ONLY: "true",
          // The tenant's account may list only its own prefix: never probe (or try to create) the bucket.
          RCLONE_GCS_NO_CHECK_BUCKET: "true",
          ...(this.options.storageEndpoint
            ? { RCLONE_GCS_ENDPOINT: `${this.options.storageEndpoint.replace(/\/+$/, "")}/storage/v1/` }
            : {}),
        };
      } catch (error) {
        return fail(`no storage token: ${(error as Error).message}`);
      }
    }
    const env: NodeJS.ProcessEnv = {
      PATH: process.env.PATH ?? "/usr/sbin:/usr/bin:/sbin:/bin",
      RCLONE_CONFIG: "/dev/null",
      ...bucket,
    };
    const deadline = started + deadlineSeconds * 1000;
    const left = () => Math.max(1_000, deadline - Date.now());
    const exec = (argv: readonly string[], options: PodExecOptions) =>
      this.options.exec(projectId, argv, options);
    let restored = false;
    try {
      await recordBackup(db, projectId, { ...base, state: "running" });
      // A home not seen before: what the bucket holds comes back into it first (copied, never deleting).
      if (previous.home_claim_uid !== claim) {
        const listing = hostDir ? await localListing(remote) : await bucketListing(remote, env, left());
        if (listing.code !== 0 && !listing.missing)
          return await fail(`cannot read the backup at ${remote}: ${lastLines(listing.stderr)}`);
        if (listing.code === 0 && listing.stdout.trim() !== "") {
          const mount = await mountPodHome(exec, true, hostDir);
          try {
            // Files first, then links: SFTP's setstat follows a link, so a link's time cannot be set through the
            // mount (the Pod's user may not touch its target); links are made with the time they are made.
            for (const pass of [
              ["--exclude", "*.rclonelink"],
              ["--include", "*.rclonelink", "--local-no-set-modtime"],
            ]) {
              const copy = await mount.run(
                [
                  "rclone",
                  "copy",
                  target,
                  mount.path,
                  "--links",
                  "--transfers",
                  "4",
                  ...pass,
                  ...NETWORK_FLAGS,
                ],
                env,
                left(),
              );
              if (copy.code !== 0)
                return await fail(`restoring the new home from ${remote} failed: ${lastLines(copy.stderr)}`);
            }
          } finally {
            await mount.close();
          }
          restored = true;
          this.options.log?.("kubernetes home restored", { project: projectId, remote });
        }
        // The claim is recorded as this home's from now on: restored (or with nothing to restore).
        Object.assign(base, {
          home_claim_uid: claim,
          ...(restored ? { last_restore_at: new Date().toISOString() } : {}),
        });
        await recordBackup(db, projectId, { ...base, state: "running" });
      }
      const mount = await mountPodHome(exec, false, hostDir);
      let sync: ToolResult;
      try {
        const args = ["rclone", "sync", mount.path, target, "--links", "--create-empty-src-dirs"];
        for (const pattern of BACKUP_EXCLUDES) args.push("--exclude", pattern);
        sync = await mount.run([...args, ...NETWORK_FLAGS], env, left());
      } finally {
        await mount.close();
      }
      if (sync.code !== 0)
        return await fail(
          sync.code === null
            ? `did not finish within ${deadlineSeconds} s`
            : lastLines(sync.stderr) || "rclone failed",
        );
      const size = await (hostDir ? localSize(remote) : bucketSize(remote, env)).catch(() => undefined);
      const usage = (() => {
        try {
          const { bytes, count } = JSON.parse(size?.stdout ?? "") as { bytes?: unknown; count?: unknown };
          return Number.isSafeInteger(bytes) && Number.isSafeInteger(count)
            ? { bytes: bytes as number, objects: count as number }
            : (previous.usage ?? null);
        } catch {
          return previous.usage ?? null;
        }
      })();
      const now = new Date().toISOString();
      await recordBackup(db, projectId, {
        ...base,
        state: "idle",
        last_result: "ok",
        last_success_at: now,
        last_error: null,
        last_duration_ms: Date.now() - started,
        usage,
      });
      return { ok: true, restored };
    } catch (error) {
      if (error instanceof SandboxNotRunningError) {
        await recordBackup(db, projectId, { ...previous });
        return { ok: false, skipped: true, why: error.message };
      }
      return fail((error as Error).message);
    }
  }

  /**
   * Whether anything in the project's home changed since `since` (a walk in the Pod that stops at the first
   * change, leaving out what backups leave out). A walk that fails counts as a change: a backup then says why.
   */
  async changedSince(projectId: string, since: Date): Promise<boolean> {
    try {
      const { exitCode, stdout } = await this.options
        .runnerOf(projectId)
        .run(changedSinceArgv(since), { timeoutMs: 60_000 });
      return exitCode !== 0 || stdout.trim() !== "";
    } catch (error) {
      if (error instanceof SandboxNotRunningError) return false;
      return true;
    }
  }
}
