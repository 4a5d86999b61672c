import type Docker from "dockerode";
import { LABELS } from "../../lib/constants.js";
import { isNotFound } from "../../lib/docker-client.js";
import { tenantNames } from "../../components/tenant/names.js";
import type { Queryable } from "../db.js";
import { SandboxNotRunningError } from "../sandbox/exec.js";
import type { SandboxRunner } from "../sandbox/runner.js";
import { authFor, type RegistryAuth } from "../gcp/registry.js";

/** Where snapshots go and how many stay (seed 000 §5.2). */
export interface SnapshotOptions {
  /** `127.0.0.1:5000/sandboxes` here, `<region>-docker.pkg.dev/<project>/sandboxes` on GCP. */
  readonly repository: string;
  /** Newest snapshots kept per project; older ones are deleted. */
  readonly keep: number;
  /**
   * Delete old snapshots from the registry through its HTTP API (the local registry). On GCP the
   * repository's cleanup policy keeps the newest five, so only the local copies are removed.
   */
  readonly pruneRegistry: boolean;
  /**
   * The registry's credentials for pushes and pulls (GCP: Artifact Registry with the Project Service account's
   * token); none for the local registry.
   */
  readonly registryAuth?: () => Promise<RegistryAuth>;
  /** Deletes every image a deleted project left in the registry (GCP: its Artifact Registry package). */
  readonly deleteProjectImages?: (projectId: string) => Promise<unknown>;
}

export interface SnapshotRecord {
  readonly project_id: string;
  readonly tag: string;
  readonly image: string;
  readonly digest: string;
  readonly created_at: Date;
}

/** `20261122-031502-123`: the seed's timestamp tag, with milliseconds so two snapshots never collide. */
export function snapshotTag(at: Date): string {
  const iso = at.toISOString(); // 2026-11-22T03:15:02.123Z
  return `${iso.slice(0, 10).replaceAll("-", "")}-${iso.slice(11, 19).replaceAll(":", "")}-${iso.slice(20, 23)}`;
}

export function snapshotRepository(options: SnapshotOptions, projectId: string): string {
  return `${options.repository}/${projectId}`;
}

/** Follows an engine progress stream (pull, push) to its end; an `error` event fails it. */
async function followProgress(docker: Docker, stream: NodeJS.ReadableStream): Promise<object[]> {
  return new Promise((resolve, reject) => {
    docker.modem.followProgress(stream, (error: Error | null, events: object[]) => {
      if (error) return reject(error);
      const failed = events.find((e) => (e as { error?: string }).error) as { error?: string } | undefined;
      if (failed) return reject(new Error(failed.error));
      resolve(events);
    });
  });
}

/** Makes sure the engine has `image`, pulling it from its registry when it does not. */
export async function ensureImage(
  docker: Docker,
  image: string,
  registryAuth?: () => Promise<RegistryAuth>,
): Promise<void> {
  try {
    await docker.getImage(image).inspect();
  } catch (error) {
    if (!isNotFound(error)) throw error;
    const authconfig = authFor(image, await registryAuth?.());
    await followProgress(docker, await docker.pull(image, authconfig ? { authconfig } : {}));
  }
}

export async function listSnapshots(db: Queryable, projectId: string): Promise<SnapshotRecord[]> {
  return (
    await db.query<SnapshotRecord>(
      "select * from snapshots where project_id = $1 order by created_at desc, tag desc",
      [projectId],
    )
  ).rows;
}

/**
 * Commits the sandbox's container (its system state: packages, tools, configs; /home/agent is the
 * volume and is not in it) as `<repository>/<project>:<timestamp>` and `:latest`, pushes both, records
 * the snapshot and removes the ones past `keep`.
 */
export async function takeSnapshot(
  db: Queryable,
  docker: Docker,
  projectId: string,
  options: SnapshotOptions,
): Promise<SnapshotRecord> {
  const repo = snapshotRepository(options, projectId);
  const tag = snapshotTag(new Date());
  const container = docker.getContainer(tenantNames(projectId).container);
  try {
    // The container's labels (tenant, owner, managed-by) become the image's.
    await container.commit({ repo, tag, pause: true, comment: `agent-sandbox snapshot of ${projectId}` });
  } catch (error) {
    if (isNotFound(error)) throw new SandboxNotRunningError(tenantNames(projectId).container);
    throw error;
  }
  const image = docker.getImage(`${repo}:${tag}`);
  const previousLatest = await docker
    .getImage(`${repo}:latest`)
    .inspect()
    .then(
      (i) => i.Id,
      () => undefined,
    );
  let pushed: object[];
  try {
    await image.tag({ repo, tag: "latest" });
    const authconfig = authFor(repo, await options.registryAuth?.());
    const auth = authconfig ? { authconfig } : {};
    pushed = await followProgress(docker, await image.push({ tag, ...auth }));
    await followProgress(docker, await docker.getImage(`${repo}:latest`).push({ tag: "latest", ...auth }));
  } catch (error) {
    // Nothing half-made (issue 18): a commit no record lists would be an orphan, and `:latest` goes back.
    const undone = await undoCommit(docker, repo, tag, previousLatest).then(
      () => "",
      (undo: Error) => `; removing its commit failed too: ${undo.message}`,
    );
    throw new Error(
      `pushing snapshot ${repo}:${tag} to the registry ${repo.split("/")[0]} failed (is the registry running?): ${(error as Error).message}${undone}`,
    );
  }
  const digest =
    pushed
      .map((e) => (e as { aux?: { Digest?: string } }).aux?.Digest)
      .find((d): d is string => typeof d === "string") ?? "";
  if (!digest.startsWith("sha256:")) throw new Error(`the registry reported no digest for ${repo}:${tag}`);
  const { rows } = await db.query<SnapshotRecord>(
    "insert into snapshots (project_id, tag, image, digest) values ($1, $2, $3, $4) returning *",
    [projectId, tag, `${repo}:${tag}`, digest],
  );
  await pruneSnapshots(db, docker, projectId, options);
  return rows[0]!;
}

/** Removes a snapshot's commit whose push failed, pointing `:latest` back where it was. */
async function undoCommit(docker: Docker, repo: string, tag: string, previousLatest: string | undefined) {
  const untag = (ref: string) =>
    docker
      .getImage(ref)
      .remove()
      .catch((error: unknown) => {
        if (!isNotFound(error)) throw error;
      });
  if (previousLatest) await docker.getImage(previousLatest).tag({ repo, tag: "latest" });
  else await untag(`${repo}:latest`);
  await untag(`${repo}:${tag}`);
}

/** `127.0.0.1:5000/sandboxes/p` → the registry's base URL and the repository name under it. */
function registryLocation(repo: string): { base: string; name: string } {
  const slash = repo.indexOf("/");
  return { base: `http://${repo.slice(0, slash)}`, name: repo.slice(slash + 1) };
}

/** Deletes the snapshots past the newest `keep`: from the registry (when ours), the engine and the table. */
export async function pruneSnapshots(
  db: Queryable,
  docker: Docker,
  projectId: string,
  options: SnapshotOptions,
): Promise<string[]> {
  const all = await listSnapshots(db, projectId);
  const kept = all.slice(0, options.keep);
  const keptDigests = new Set(kept.map((s) => s.digest));
  const removed: string[] = [];
  for (const old of all.slice(options.keep)) {
    if (options.pruneRegistry && !keptDigests.has(old.digest)) {
      const { base, name } = registryLocation(snapshotRepository(options, projectId));
      const response = await fetch(`${base}/v2/${name}/manifests/${old.digest}`, { method: "DELETE" });
      if (!response.ok && response.status !== 404)
        throw new Error(`deleting ${old.image} from the registry: HTTP ${response.status}`);
    }
    try {
      await docker.getImage(old.image).remove();
    } catch (error) {
      // 409: a container still runs it (restored from this snapshot); the tag goes with the next prune.
      if (!isNotFound(error) && (error as { statusCode?: number }).statusCode !== 409) throw error;
    }
    await db.query("delete from snapshots where project_id = $1 and tag = $2", [projectId, old.tag]);
    removed.push(old.tag);
  }
  return removed;
}

/** Removes every snapshot of a deleted project (seed 000 §5.5), from the registry when it is ours. */
export async function deleteAllSnapshots(
  db: Queryable,
  docker: Docker,
  projectId: string,
  options: SnapshotOptions,
): Promise<string[]> {
  const removed = await pruneSnapshots(db, docker, projectId, { ...options, keep: 0 });
  const repo = snapshotRepository(options, projectId);
  // Every tag of the project's repository, recorded or not: a snapshot whose runtime died between its
  // commit (or push) and its record left one the table never listed (issue 18's fault loops found it).
  const engineTags = (await docker.listImages({ filters: { label: [`${LABELS.tenant}=${projectId}`] } }))
    .flatMap((image) => image.RepoTags ?? [])
    .filter((ref) => ref.startsWith(`${repo}:`));
  for (const ref of new Set([`${repo}:latest`, ...engineTags])) {
    try {
      await docker.getImage(ref).remove();
    } catch (error) {
      if (!isNotFound(error) && (error as { statusCode?: number }).statusCode !== 409) throw error;
    }
  }
  // A snapshot pushed is also in the engine (the commit stays): with none there and none recorded, the
  // registry holds none of the project's, and is not asked (a platform may have no registry running).
  if (options.pruneRegistry && (removed.length > 0 || engineTags.length > 0))
    await deleteRegistryRepository(repo);
  // Artifact Registry: the project's whole package, whatever the table and the engine knew (asked every time:
  // a host replaced since the push has none of it in its engine).
  await options.deleteProjectImages?.(projectId);
  return removed;
}

const MANIFEST_TYPES = [
  "application/vnd.docker.distribution.manifest.v2+json",
  "application/vnd.oci.image.manifest.v1+json",
].join(", ");

/** Deletes every manifest of `repo` from the (local) registry, whatever the table recorded. */
async function deleteRegistryRepository(repo: string): Promise<void> {
  const { base, name } = registryLocation(repo);
  const listing = await fetch(`${base}/v2/${name}/tags/list`, { signal: AbortSignal.timeout(15_000) });
  if (listing.status === 404) return;
  if (!listing.ok) throw new Error(`listing ${repo} in the registry: HTTP ${listing.status}`);
  const { tags } = (await listing.json()) as { tags?: string[] | null };
  for (const tag of tags ?? []) {
    const head = await fetch(`${base}/v2/${name}/manifests/${tag}`, {
      method: "HEAD",
      headers: { Accept: MANIFEST_TYPES },
      signal: AbortSignal.timeout(15_000),
    });
    const digest = head.headers.get("docker-content-digest");
    if (!head.ok || !digest) continue; // deleted meanwhile (two tags of one manifest)
    const response = await fetch(`${base}/v2/${name}/manifests/${digest}`, {
      method: "DELETE",
      signal: AbortSignal.timeout(15_000),
    });
    if (!response.ok && response.status !== 404)
      throw new Error(`deleting ${repo}:${tag} from the registry: HTTP ${response.status}`);
  }
}

/** What `sandbox-backup status` reports (sandbox-image/rootfs/usr/local/sbin/sandbox-backup). */
export interface BackupStatus {
  readonly state?: string;
  readonly last_result?: string;
  readonly last_success_at?: string;
  readonly last_attempt_at?: string;
  readonly last_error?: string | null;
  readonly last_duration_ms?: number;
  readonly remote?: string | null;
  readonly interval_seconds?: number;
  readonly after_change_seconds?: number | null;
  readonly last_trigger?: string;
  readonly usage?: { bytes: number; objects: number } | null;
}

const BACKUP = "/usr/local/sbin/sandbox-backup";

/**
 * Runs one backup now (the final one before a snapshot or stop), as root (the backup's state is root's;
 * rclone drops to the agent) and bounded by `deadlineSeconds`: inside, the sync is killed then; outside,
 * the exec a few seconds later should the sandbox not let it end. On failure, why.
 */
export async function backupNow(
  sandbox: SandboxRunner,
  deadlineSeconds: number,
): Promise<{ ok: true } | { ok: false; why?: string }> {
  const result = await sandbox.run([BACKUP, "once", "--deadline", String(deadlineSeconds)], {
    root: true,
    timeoutMs: (deadlineSeconds + 5) * 1000,
  });
  if (result.exitCode === 0) return { ok: true };
  // 75 (EX_TEMPFAIL): the daemon's own sync held the lock past the deadline (the run waits for one under
  // way); the recorded error would be an older one.
  if (result.exitCode === 75)
    return { ok: false, why: "another backup (the daemon's) was still running at the deadline" };
  // Its one line of why; bounded, like everything read back from a sandbox.
  const why = result.stderr.trim().split("\n").at(-1)?.slice(0, 500);
  return why ? { ok: false, why } : { ok: false };
}

/** Records what a running sandbox said of its backups, for backup-status to answer while it is stopped. */
export async function recordBackupStatus(
  db: Queryable,
  projectId: string,
  status: BackupStatus,
): Promise<void> {
  await db.query("update tenants set last_backup = $2 where project_id = $1", [
    projectId,
    JSON.stringify(status),
  ]);
}

/** A final backup's outcome (`backupNow`), with when it was asked for and when it ended. */
export interface FinalBackup {
  readonly ok: boolean;
  readonly askedAt: Date;
  readonly endedAt: Date;
}

/**
 * After a final backup (before a stop or snapshot), records what the sandbox says of its backups for
 * backup-status to answer while it is stopped. A sandbox too slow to answer (a host under load) still had a
 * backup that succeeded: that backup is merged over the record, so backup-status answers it and not an older
 * one, and keeps what the record knew of the daemon (its remote, interval, usage); its times are the
 * runtime's, written as the daemon writes its own. Returns the status read, or why it could not be read.
 */
export async function recordAfterFinalBackup(
  db: Queryable,
  sandbox: SandboxRunner,
  projectId: string,
  backup: FinalBackup,
): Promise<{ status: BackupStatus } | { unread: string }> {
  let status: BackupStatus;
  try {
    status = await readBackupStatus(sandbox, projectId);
  } catch (error) {
    if (backup.ok) {
      const stamp = (at: Date) => at.toISOString().replace(/\.\d{3}Z$/, "+00:00");
      const finished: BackupStatus = {
        state: "idle",
        last_result: "ok",
        last_attempt_at: stamp(backup.askedAt),
        last_success_at: stamp(backup.endedAt),
        last_error: null,
        last_trigger: "once",
      };
      await db.query(
        "update tenants set last_backup = coalesce(last_backup, '{}'::jsonb) || $2::jsonb where project_id = $1",
        [projectId, JSON.stringify(finished)],
      );
    }
    return { unread: (error as Error).message };
  }
  await recordBackupStatus(db, projectId, status);
  return { status };
}

/** The backup daemon's status and the backup's size on its remote, read in the running sandbox. */
export async function readBackupStatus(sandbox: SandboxRunner, projectId: string): Promise<BackupStatus> {
  const status = await sandbox.run([BACKUP, "status"], { timeoutMs: 15_000 });
  if (status.exitCode !== 0)
    throw new Error(`sandbox-backup status failed in ${projectId}'s sandbox: ${status.stderr.trim()}`);
  // What the sandbox prints is the tenant's to shape: bounded by the exec, and checked before use.
  let parsed: BackupStatus;
  try {
    parsed = JSON.parse(status.stdout) as BackupStatus;
    if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed))
      throw new Error("not an object");
  } catch {
    throw new Error(`sandbox-backup status in ${projectId}'s sandbox did not answer a JSON object`);
  }
  let usage: BackupStatus["usage"] = null;
  if (parsed.remote) {
    // The size is an extra: a remote slow to list (a sandbox under load, a large backup) leaves it out, never
    // the status the daemon wrote.
    const size = await sandbox
      .run(["rclone", "size", "--json", "--contimeout", "5s", "--timeout", "20s", parsed.remote], {
        timeoutMs: 30_000,
      })
      .catch(() => undefined);
    if (size?.exitCode === 0) {
      const { bytes, count } = (() => {
        try {
          return JSON.parse(size.stdout) as { bytes?: unknown; count?: unknown };
        } catch {
          return {};
        }
      })();
      if (Number.isSafeInteger(bytes) && Number.isSafeInteger(count))
        usage = { bytes: bytes as number, objects: count as number };
    }
  }
  return { ...parsed, usage };
}
