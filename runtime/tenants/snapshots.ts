import type Docker from "dockerode";
import { LABELS } from "../../lib/constants.js";
import { isNotFound } from "../../lib/docker-client.js";
import { tenantNames } from "../../components/tenant/names.js";
import type { Queryable } from "../store/db.js";
import {
  deleteSnapshotRecord,
  listSnapshots,
  recordSnapshot,
  type SnapshotRecord,
} from "../store/snapshots.js";
import { SandboxNotRunningError } from "../sandbox/exec.js";
import { authFor, type RegistryAuth } from "../gcp/registry.js";

/** Where snapshots go and how many stay. */
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
    // Nothing half-made: a commit no record lists would be an orphan, and `:latest` goes back.
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
  const snapshot = await recordSnapshot(db, { projectId, tag, image: `${repo}:${tag}`, digest });
  await pruneSnapshots(db, docker, projectId, options);
  return snapshot;
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
    await deleteSnapshotRecord(db, projectId, old.tag);
    removed.push(old.tag);
  }
  return removed;
}

/** Removes every snapshot of a deleted project, from the registry when it is ours. */
export async function deleteAllSnapshots(
  db: Queryable,
  docker: Docker,
  projectId: string,
  options: SnapshotOptions,
): Promise<string[]> {
  const removed = await pruneSnapshots(db, docker, projectId, { ...options, keep: 0 });
  const repo = snapshotRepository(options, projectId);
  // Every tag of the project's repository, recorded or not: a snapshot whose runtime died between its
  // commit (or push) and its record left one the table never listed.
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
