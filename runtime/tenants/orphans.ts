import { execFile } from "node:child_process";
import { promises as fs, readFileSync, rmSync, writeFileSync } from "node:fs";
import * as path from "node:path";
import { promisify } from "node:util";
import { gunzipSync } from "node:zlib";
import type Docker from "dockerode";
import { LABELS, MANAGED_BY, RESOURCE_TYPES } from "../../lib/constants.js";
import { isNotFound } from "../../lib/docker-client.js";
import { reconfigureSquid, squidPaths } from "../../lib/host/squid.js";
import { deleteMicroVm, readMicroVm, tapName } from "../../lib/microvm/launcher.js";
import { processAlive } from "../../lib/process.js";
import {
  deleteSavedRule,
  parseTenantTag,
  ruleComment,
  savedRules,
  tenantTag,
} from "../../provider/resources/tenant-firewall.js";
import type { StackConfig } from "../../stacks/config.js";
import type { Queryable } from "../store/db.js";
import { projectsWithOpenOperations } from "../store/operations.js";
import { platformInstanceId, snapshotOptions, stateBackendUrl, tenantDisksRoot } from "./config.js";
import { fileBackendDir, fileStateLayout } from "../stack-state.js";
import { microVmDirs } from "../microvm-support.js";
import { TENANT_PROJECT } from "./stack.js";

const execFileAsync = promisify(execFile);

/** What the sweep looks at: everything a tenant stack makes on the host, and the project's snapshots. */
export type OrphanKind =
  | "container"
  | "network"
  | "volume"
  | "rule"
  | "squid-fragment"
  | "disk-mount"
  | "disk-image"
  | "microvm"
  | "snapshot";

/** A resource of this platform instance that no live tenant stack owns. */
export interface Orphan {
  readonly kind: OrphanKind;
  /** Its name: the engine object's, the rule as `iptables -S` prints it, the file, the image reference. */
  readonly name: string;
  /** The engine's id, or the registry's manifest digest. */
  readonly id?: string;
  /** The project it names (its label, rule comment or file name); `(none)` when it names none. */
  readonly tenant: string;
  /** Why it is an orphan. */
  readonly why: string;
  /** Where a snapshot is (the registry or the engine), and its tags. */
  readonly detail?: string;
  /** With `remove`: whether it is gone now. */
  removed?: boolean;
  /** With `remove`: what went wrong removing it. */
  error?: string;
}

/** A resource that looks unowned but is left alone this time, and why (a live operation, too young). */
export interface SkippedResource {
  readonly kind: OrphanKind;
  readonly name: string;
  readonly tenant: string;
  readonly why: string;
}

export interface OrphanReport {
  readonly instance: string;
  readonly backendUrl: string;
  readonly checkedAt: string;
  /** Whether removal was asked for. */
  readonly remove: boolean;
  /** Tenant stacks in the backend. */
  readonly stacks: number;
  readonly orphans: Orphan[];
  readonly skipped: SkippedResource[];
  /** What could not be looked at (an unreachable registry, no database to ask about operations). */
  readonly notes: string[];
}

export interface OrphanSweepOptions {
  /** This platform instance (`platformInstanceId`): only resources carrying it are looked at. */
  readonly instance: string;
  /** The tenant stacks' state backend (`file://...`). */
  readonly backendUrl: string;
  readonly docker: Docker;
  readonly squid: { readonly configFile: string; readonly fragmentsDir: string };
  /**
   * Local mode: where the tenants' filesystem images and their mountpoints are (`<root>/<project>/`,
   * sandbox:host:Filesystem): everything there is this instance's. Absent: none are looked at.
   */
  readonly disksRoot?: string;
  /**
   * Local mode: the microVMs' state directories (`<stateRoot>/<project>/`: qemu, its SSH forwarder, tap and
   * disks) and their snapshots (`<snapshotsRoot>/<project>/*.qcow2`); everything there is this instance's.
   */
  readonly microVm?: { readonly stateRoot: string; readonly snapshotsRoot: string };
  /** The instance's snapshot repository (`127.0.0.1:5000/sandboxes`): images under it are snapshots. */
  readonly snapshotRepository: string;
  /** Whether the repository's registry is this instance's own, to be listed and pruned (the local one). */
  readonly sweepRegistry: boolean;
  /** Resources younger than this are never removed: a create may have made them before its state says so. */
  readonly graceSeconds: number;
  /** The runtime's database: projects with an open operation are left alone. */
  readonly db?: Queryable;
  /** Remove what is found. */
  readonly remove?: boolean;
  /** One sweep at a time per instance: a second one started meanwhile fails at once. */
  readonly lockFile?: string;
}

/** The grace period by default: longer than any create, which makes its objects before it saves them. */
export const DEFAULT_ORPHAN_GRACE_SECONDS = 600;

/** The sweep's options from the platform config. */
export function orphanSweepOptions(
  config: StackConfig,
  docker: Docker,
  extra: Partial<Pick<OrphanSweepOptions, "db" | "remove" | "graceSeconds">> = {},
): OrphanSweepOptions {
  const squid = squidPaths(config.host);
  const snapshots = snapshotOptions(config);
  return {
    instance: platformInstanceId(config),
    backendUrl: stateBackendUrl(config),
    docker,
    squid: { configFile: squid.config, fragmentsDir: squid.fragmentsDir },
    ...(config.target === "local"
      ? { disksRoot: tenantDisksRoot(config), microVm: microVmDirs(config.host.dataDir) }
      : {}),
    snapshotRepository: snapshots.repository,
    sweepRegistry: snapshots.pruneRegistry,
    graceSeconds: DEFAULT_ORPHAN_GRACE_SECONDS,
    lockFile: path.join(config.host.dataDir, "orphan-sweep.lock"),
    ...extra,
  };
}

/** What one tenant stack's state says it owns. */
interface StackFacts {
  readonly locked: boolean;
  /** Why its state could not be read: then nothing of its tenant is touched. */
  readonly unreadable?: string;
  /** `<kind>:<name or id>` of every resource its state lists (pending creates included). */
  readonly owns: Set<string>;
}

const FRAGMENT = /^tenant-([a-z0-9][a-z0-9-]{0,39})\.(conf|domains)$/;
/** A temporary file of a fragment's write (`writeFileAtomic`) that was killed before its rename. */
const FRAGMENT_TEMP = /^\.tenant-([a-z0-9][a-z0-9-]{0,39})\.(conf|domains)\.[0-9a-f]{12}\.tmp$/;

/** Reads a file-backend checkpoint: the resources and the half-done operations it records. */
function stateResources(
  text: string,
): Array<{ type: string; id?: string; outputs?: Record<string, unknown> }> {
  const document = JSON.parse(text) as {
    checkpoint?: {
      latest?: {
        resources?: Array<{ type?: string; id?: string; inputs?: object; outputs?: object }>;
        pending_operations?: Array<{
          resource?: { type?: string; id?: string; inputs?: object; outputs?: object };
        }>;
      } | null;
    };
  };
  if (typeof document !== "object" || document === null || !("checkpoint" in document))
    throw new Error("not a Pulumi checkpoint");
  const latest = document.checkpoint?.latest;
  const all = [
    ...(latest?.resources ?? []),
    ...(latest?.pending_operations ?? []).flatMap((op) => (op.resource ? [op.resource] : [])),
  ];
  return all.map((r) => ({ type: r.type ?? "", id: r.id, outputs: { ...r.inputs, ...r.outputs } }));
}

function ownedKeys(resources: ReturnType<typeof stateResources>): Set<string> {
  const owns = new Set<string>();
  const text = (value: unknown) => (typeof value === "string" ? value : undefined);
  // What names each resource the sweep looks at (the identity's keypair, directories and files it does not).
  const keysOf: Record<string, (outputs: Record<string, unknown>, id?: string) => Array<string | undefined>> =
    {
      [RESOURCE_TYPES.dockerContainer]: (o, id) => [`container:${text(o.name)}`, `container:${id}`],
      [RESOURCE_TYPES.dockerNetwork]: (o, id) => [`network:${text(o.name)}`, `network:${id}`],
      [RESOURCE_TYPES.dockerVolume]: (o) => [`volume:${text(o.name)}`],
      [RESOURCE_TYPES.tenantFirewall]: (o) =>
        text(o.tenantId) ? [`rule:${tenantTag(text(o.tenantId)!, text(o.instance))}`] : [],
      // Named from the inputs too: a create in progress records only those before it writes the files.
      // Named from the inputs too: a create killed before its outputs were saved still owns them.
      [RESOURCE_TYPES.hostFilesystem]: (o, id) => [
        `disk-image:${text(o.imagePath)}`,
        `disk-image:${id}`,
        `disk-mount:${text(o.mountpoint)}`,
      ],
      [RESOURCE_TYPES.microVm]: (o) => [`microvm:${text(o.stateDir)}`],
      [RESOURCE_TYPES.squidTenant]: (o) => [
        `squid-fragment:${text(o.fragment)}`,
        `squid-fragment:${text(o.domainsFile)}`,
        ...(text(o.fragmentsDir) && text(o.tenantId)
          ? [".conf", ".domains"].map(
              (ext) =>
                `squid-fragment:${path.join(text(o.fragmentsDir)!, `tenant-${text(o.tenantId)}${ext}`)}`,
            )
          : []),
      ],
    };
  for (const { type, id, outputs = {} } of resources)
    for (const key of keysOf[type]?.(outputs, id) ?? [])
      if (key && !key.endsWith(":undefined")) owns.add(key);
  return owns;
}

/** The tenant stacks of a `file://` backend and what each owns; `projectId` reads only that one's. */
async function readStacks(backendUrl: string, projectId?: string): Promise<Map<string, StackFacts>> {
  const backendDir = fileBackendDir(backendUrl);
  if (backendDir === undefined)
    throw new Error(
      `the orphan sweep reads tenant stacks from a file:// state backend; ${backendUrl} is not supported`,
    );
  const dir = fileStateLayout(backendDir, TENANT_PROJECT, "").stacksDir;
  const files = await fs.readdir(dir).catch((error: NodeJS.ErrnoException) => {
    if (error.code === "ENOENT") return [] as string[];
    throw error;
  });
  const stacks = new Map<string, StackFacts>();
  for (const file of files) {
    const match = /^tenant-([a-z0-9][a-z0-9-]{0,39})\.json(\.gz)?$/.exec(file);
    if (!match || (projectId !== undefined && match[1] !== projectId)) continue;
    const stack = `tenant-${match[1]}`;
    const locks = await fs
      .readdir(fileStateLayout(backendDir, TENANT_PROJECT, stack).locks)
      .catch(() => [] as string[]);
    const locked = locks.some((lock) => lock.endsWith(".json"));
    try {
      const raw = await fs.readFile(path.join(dir, file));
      const text = (match[2] ? gunzipSync(raw) : raw).toString("utf8");
      stacks.set(match[1]!, { locked, owns: ownedKeys(stateResources(text)) });
    } catch (error) {
      stacks.set(match[1]!, { locked, unreadable: (error as Error).message, owns: new Set() });
    }
  }
  return stacks;
}

/** A resource of this instance as found, before it is judged. */
interface Candidate {
  readonly kind: OrphanKind;
  readonly name: string;
  readonly id?: string;
  /** Keys a stack's state may list it under (`owns`). */
  readonly keys: readonly string[];
  readonly tenant: string | undefined;
  /** When it was made, where the engine or the file system knows. */
  readonly createdAt?: Date;
  readonly detail?: string;
  remove(): Promise<void>;
}

const gone = async (request: Promise<unknown>) => {
  try {
    await request;
  } catch (error) {
    if (!isNotFound(error)) throw error;
  }
};

async function engineCandidates(options: OrphanSweepOptions): Promise<Candidate[]> {
  const { docker, instance } = options;
  const filters = { label: [`${LABELS.instance}=${instance}`, `${LABELS.managedBy}=${MANAGED_BY}`] };
  const candidates: Candidate[] = [];
  for (const c of await docker.listContainers({ all: true, filters })) {
    const name = (c.Names[0] ?? c.Id).replace(/^\//, "");
    candidates.push({
      kind: "container",
      name,
      id: c.Id,
      keys: [`container:${name}`, `container:${c.Id}`],
      tenant: c.Labels[LABELS.tenant],
      createdAt: new Date(c.Created * 1000),
      remove: () => gone(docker.getContainer(c.Id).remove({ force: true })),
    });
  }
  for (const n of await docker.listNetworks({ filters })) {
    candidates.push({
      kind: "network",
      name: n.Name,
      id: n.Id,
      keys: [`network:${n.Name}`, `network:${n.Id}`],
      tenant: n.Labels?.[LABELS.tenant],
      createdAt: new Date(n.Created),
      remove: () => gone(docker.getNetwork(n.Id).remove()),
    });
  }
  for (const v of (await docker.listVolumes({ filters })).Volumes ?? []) {
    candidates.push({
      kind: "volume",
      name: v.Name,
      keys: [`volume:${v.Name}`],
      tenant: v.Labels?.[LABELS.tenant],
      createdAt: (v as { CreatedAt?: string }).CreatedAt
        ? new Date((v as { CreatedAt?: string }).CreatedAt!)
        : undefined,
      remove: () => gone(docker.getVolume(v.Name).remove()),
    });
  }
  // Snapshots the engine still holds (a commit stays local after its push).
  const prefix = `${options.snapshotRepository}/`;
  for (const image of await docker.listImages({ filters })) {
    for (const ref of image.RepoTags ?? []) {
      if (!ref.startsWith(prefix)) continue;
      candidates.push({
        kind: "snapshot",
        name: ref,
        id: image.Id,
        keys: [],
        tenant: image.Labels?.[LABELS.tenant],
        createdAt: new Date(image.Created * 1000),
        detail: "in the engine",
        // By reference: only this tag goes, and the image with its last tag.
        remove: () => gone(docker.getImage(ref).remove()),
      });
    }
  }
  return candidates;
}

async function ruleCandidates(options: OrphanSweepOptions): Promise<Candidate[]> {
  const candidates: Candidate[] = [];
  for (const rule of await savedRules()) {
    const comment = ruleComment(rule);
    const tag = comment === undefined ? undefined : parseTenantTag(comment);
    // Rules without an instance (made before instances) cannot be told from another instance's: left alone.
    if (!tag || tag.instance !== options.instance) continue;
    candidates.push({
      kind: "rule",
      name: rule.join(" "),
      keys: [`rule:${comment}`],
      tenant: tag.tenantId,
      remove: () => deleteSavedRule(rule),
    });
  }
  return candidates;
}

/** The instance's own fragments directory: every tenant file in it is this instance's. */
async function fragmentCandidates(options: OrphanSweepOptions): Promise<Candidate[]> {
  const dir = options.squid.fragmentsDir;
  const files = await fs.readdir(dir).catch((error: NodeJS.ErrnoException) => {
    if (error.code === "ENOENT") return [] as string[];
    throw error;
  });
  const candidates: Candidate[] = [];
  for (const file of files) {
    const match = FRAGMENT.exec(file) ?? FRAGMENT_TEMP.exec(file);
    if (!match) continue;
    const full = path.join(dir, file);
    const stat = await fs.stat(full).catch(() => undefined);
    if (!stat?.isFile()) continue;
    candidates.push({
      kind: "squid-fragment",
      name: full,
      // No stack owns a temporary file: past the grace period it is left over from a killed write.
      keys: FRAGMENT.test(file) ? [`squid-fragment:${full}`] : [],
      tenant: match[1],
      createdAt: stat.mtime,
      remove: () => fs.rm(full, { force: true }),
    });
  }
  return candidates;
}

/**
 * A tenant's filesystem image (`<name>.img`), one a killed create left half-made (`.img.partial`), or a
 * fork's staged copy (`.img.fork`, runtime/tenants/fork.ts) that no create took over.
 */
const DISK_IMAGE = /^[a-z0-9-]+\.img(\.fork)?(\.partial)?$/;
const PROJECT_DIR = /^[a-z0-9][a-z0-9-]{0,38}[a-z0-9]$/;

/**
 * The tenants' filesystems under the disks root: each image, and each mount whose mountpoint is there (a
 * mount outlives its image's deletion, and holds the space until unmounted). A half-made image is no
 * stack's: past the grace period it is left over from a killed create.
 */
async function diskCandidates(options: OrphanSweepOptions): Promise<Candidate[]> {
  const root = options.disksRoot;
  if (!root) return [];
  const candidates: Candidate[] = [];
  const birth = (stat: { birthtime: Date; mtime: Date }) =>
    stat.birthtime.getTime() > 0 ? stat.birthtime : stat.mtime;
  const mountinfo = await fs.readFile("/proc/self/mountinfo", "utf8");
  for (const line of mountinfo.split("\n")) {
    const target = line.split(" ")[4]?.replace(/\\040/g, " ");
    if (!target?.startsWith(`${root}/`)) continue;
    const project = path.relative(root, target).split("/")[0]!;
    const stat = await fs.stat(target).catch(() => undefined);
    candidates.push({
      kind: "disk-mount",
      name: target,
      keys: [`disk-mount:${target}`],
      tenant: PROJECT_DIR.test(project) ? project : undefined,
      createdAt: stat ? birth(stat) : undefined,
      async remove() {
        const source = line.split(" - ")[1]?.split(" ")[1];
        await execFileAsync("umount", [target], { timeout: 60_000 });
        const loop = source && /^\/dev\/loop\d+$/.test(source) ? source : undefined;
        if (loop) await execFileAsync("losetup", ["-d", loop], { timeout: 30_000 }).catch(() => undefined);
        await fs.rmdir(target).catch(() => undefined);
      },
    });
  }
  const projects = await fs.readdir(root).catch((error: NodeJS.ErrnoException) => {
    if (error.code === "ENOENT") return [] as string[];
    throw error;
  });
  for (const project of projects) {
    const files = await fs.readdir(path.join(root, project)).catch(() => [] as string[]);
    for (const file of files) {
      if (!DISK_IMAGE.test(file)) continue;
      const full = path.join(root, project, file);
      const stat = await fs.stat(full).catch(() => undefined);
      if (!stat?.isFile()) continue;
      candidates.push({
        kind: "disk-image",
        name: full,
        // No stack lists a half-made image or a staged copy: kept while its project has an open operation.
        keys: /\.(partial|fork)$/.test(file) ? [] : [`disk-image:${full}`],
        tenant: PROJECT_DIR.test(project) ? project : undefined,
        createdAt: birth(stat),
        detail: `${Math.round(stat.blocks / 2048)} MiB used of ${Math.round(stat.size / 1048576)} MiB`,
        async remove() {
          // Still attached (mounted elsewhere, or a loop device a killed mount left): freed first.
          const { stdout } = await execFileAsync("losetup", ["-n", "-O", "NAME", "-j", full], {
            timeout: 30_000,
          });
          for (const device of stdout.split("\n").filter(Boolean))
            await execFileAsync("losetup", ["-d", device.trim()], { timeout: 30_000 });
          await fs.rm(full, { force: true });
          await fs.rmdir(path.join(root, project)).catch(() => undefined);
        },
      });
    }
  }
  return candidates;
}

/**
 * The microVMs under the state root, each a directory a `sandbox:vm:MicroVM` owns by its path: a VM no stack
 * lists (a create killed before its state was saved, a delete that never ran) is stopped and removed with
 * its forwarder, tap and disks. Each project's snapshot directory is a snapshot, owned while it has a stack.
 */
async function microVmCandidates(options: OrphanSweepOptions): Promise<Candidate[]> {
  if (!options.microVm) return [];
  const { stateRoot, snapshotsRoot } = options.microVm;
  const candidates: Candidate[] = [];
  const birth = (stat: { birthtime: Date; mtime: Date }) =>
    stat.birthtime.getTime() > 0 ? stat.birthtime : stat.mtime;
  const entries = async (dir: string) =>
    (await fs.readdir(dir).catch((error: NodeJS.ErrnoException) => {
      if (error.code === "ENOENT") return [] as string[];
      throw error;
    })) as string[];
  for (const project of await entries(stateRoot)) {
    const stateDir = path.join(stateRoot, project);
    const stat = await fs.stat(stateDir).catch(() => undefined);
    if (!stat?.isDirectory()) continue;
    const state = await readMicroVm(stateDir).catch(() => undefined);
    candidates.push({
      kind: "microvm",
      name: stateDir,
      keys: [`microvm:${stateDir}`],
      tenant: PROJECT_DIR.test(project) ? project : undefined,
      createdAt: birth(stat),
      detail: `qemu ${state?.running ? `running (pid ${state.pid})` : "not running"}, tap ${tapName(stateDir)}`,
      remove: () => deleteMicroVm(stateDir),
    });
  }
  for (const project of await entries(snapshotsRoot)) {
    const dir = path.join(snapshotsRoot, project);
    const stat = await fs.stat(dir).catch(() => undefined);
    if (!stat?.isDirectory()) continue;
    const files = (await entries(dir)).filter((file) => file.endsWith(".qcow2"));
    candidates.push({
      kind: "snapshot",
      name: dir,
      keys: [],
      tenant: PROJECT_DIR.test(project) ? project : undefined,
      createdAt: birth(stat),
      detail: `microVM snapshots on this host: ${files.sort().join(", ") || "none"}`,
      remove: () => fs.rm(dir, { recursive: true, force: true }),
    });
  }
  return candidates;
}

const MANIFEST_TYPES = [
  "application/vnd.docker.distribution.manifest.v2+json",
  "application/vnd.oci.image.manifest.v1+json",
].join(", ");

async function registryJson<T>(url: string, init?: RequestInit): Promise<{ body: T; response: Response }> {
  const response = await fetch(url, { ...init, signal: AbortSignal.timeout(15_000) });
  if (!response.ok) throw new Error(`GET ${url}: HTTP ${response.status}`);
  return { body: (await response.json()) as T, response };
}

/**
 * Snapshots in the instance's own registry whose image carries this instance's label. The label, not the
 * repository alone, decides: an image pushed there by another instance (or before instances) is left alone.
 */
async function registryCandidates(options: OrphanSweepOptions, notes: string[]): Promise<Candidate[]> {
  const slash = options.snapshotRepository.indexOf("/");
  const base = `http://${options.snapshotRepository.slice(0, slash)}`;
  const prefix = `${options.snapshotRepository.slice(slash + 1)}/`;
  const candidates: Candidate[] = [];
  let repositories: string[] = [];
  try {
    let next: string | undefined = `${base}/v2/_catalog?n=1000`;
    while (next) {
      const { body, response }: { body: { repositories?: string[] }; response: Response } =
        await registryJson<{ repositories?: string[] }>(next);
      repositories.push(...(body.repositories ?? []));
      const link = /<([^>]+)>;\s*rel="next"/.exec(response.headers.get("link") ?? "");
      next = link ? new URL(link[1]!, base).toString() : undefined;
    }
  } catch (error) {
    notes.push(
      `the registry at ${base} could not be listed (${(error as Error).cause ?? (error as Error).message}): its snapshots were not swept`,
    );
    return [];
  }
  repositories = repositories.filter((repo) => repo.startsWith(prefix));
  for (const repo of repositories) {
    const { body } = await registryJson<{ tags?: string[] | null }>(`${base}/v2/${repo}/tags/list`).catch(
      () => ({ body: { tags: [] } }),
    );
    const byDigest = new Map<string, { tags: string[]; labels: Record<string, string>; created?: Date }>();
    for (const tag of body.tags ?? []) {
      const response = await fetch(`${base}/v2/${repo}/manifests/${tag}`, {
        headers: { Accept: MANIFEST_TYPES },
        signal: AbortSignal.timeout(15_000),
      });
      const digest = response.headers.get("docker-content-digest");
      if (!response.ok || !digest) continue;
      const manifest = (await response.json()) as { config?: { digest?: string } };
      const known = byDigest.get(digest);
      if (known) {
        known.tags.push(tag);
        continue;
      }
      if (!manifest.config?.digest) continue; // a manifest list: not something a snapshot pushes
      const { body: image } = await registryJson<{
        created?: string;
        config?: { Labels?: Record<string, string> };
      }>(`${base}/v2/${repo}/blobs/${manifest.config.digest}`);
      byDigest.set(digest, {
        tags: [tag],
        labels: image.config?.Labels ?? {},
        created: image.created ? new Date(image.created) : undefined,
      });
    }
    for (const [digest, image] of byDigest) {
      if (image.labels[LABELS.instance] !== options.instance) continue;
      candidates.push({
        kind: "snapshot",
        name: `${options.snapshotRepository.slice(0, slash)}/${repo}@${digest}`,
        id: digest,
        keys: [],
        tenant: image.labels[LABELS.tenant],
        createdAt: image.created,
        detail: `in the registry, tags ${image.tags.sort().join(", ")}`,
        async remove() {
          const response = await fetch(`${base}/v2/${repo}/manifests/${digest}`, {
            method: "DELETE",
            signal: AbortSignal.timeout(15_000),
          });
          if (!response.ok && response.status !== 404)
            throw new Error(`DELETE ${repo}@${digest}: HTTP ${response.status}`);
        },
      });
    }
  }
  return candidates;
}

/** Takes the instance's sweep lock (a file naming its holder); a holder that no longer runs is replaced. */
function takeSweepLock(file: string): () => void {
  for (;;) {
    try {
      writeFileSync(file, `${process.pid}\n`, { flag: "wx" });
      return () => rmSync(file, { force: true });
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
      const holder = Number.parseInt(readFileSync(file, "utf8"), 10);
      if (processAlive(holder))
        throw new Error(`an orphan sweep of this instance is already running (process ${holder})`);
      rmSync(file, { force: true });
    }
  }
}

type Verdict = { orphan: true; why: string } | { orphan: false; skip?: string };

/**
 * Reports the resources of this platform instance that no live tenant stack owns (`remove`: and removes
 * them). Looked at: containers, networks, volumes and engine images carrying the instance's label; rules
 * in the project's chains whose comment names the instance; tenant files in the instance's Squid
 * fragments directory; filesystem images and mounts under its disks root; microVMs and their snapshots under
 * its data directory; images in the instance's registry labelled with it. A resource is owned when a
 * tenant stack's state lists it (a snapshot: when its project has a stack).
 *
 * A create makes its objects before its state lists them, so resources are listed first and stacks read
 * after: whatever existed when listed was made by an update that either still holds its stack's lock or
 * has saved its state by then. A locked stack, a project with an open operation in the database, a
 * state that does not parse and anything younger than the grace period are left alone; before each
 * removal its tenant's stack is read again.
 */
export async function sweepOrphans(options: OrphanSweepOptions): Promise<OrphanReport> {
  const release = options.lockFile ? takeSweepLock(options.lockFile) : () => undefined;
  try {
    return await sweep(options);
  } finally {
    release();
  }
}

async function sweep(options: OrphanSweepOptions): Promise<OrphanReport> {
  const notes: string[] = [];
  const checkedAt = new Date();
  const candidates = [
    ...(await engineCandidates(options)),
    ...(await ruleCandidates(options)),
    ...(await fragmentCandidates(options)),
    ...(await diskCandidates(options)),
    ...(await microVmCandidates(options)),
    ...(options.sweepRegistry ? await registryCandidates(options, notes) : []),
  ];
  if (!options.sweepRegistry)
    notes.push(
      `the registry of ${options.snapshotRepository} is not this host's (its cleanup policy prunes it): only the engine's copies were swept`,
    );
  const stacks = await readStacks(options.backendUrl);
  const stackCount = stacks.size;
  let busy = new Set<string>();
  if (options.db) busy = await projectsWithOpenOperations(options.db);
  else notes.push("no database: projects with an open operation were not looked up (stack locks still were)");

  const judge = (candidate: Candidate, facts: Map<string, StackFacts>, open: Set<string>): Verdict => {
    for (const stack of facts.values())
      if (candidate.keys.some((key) => stack.owns.has(key))) return { orphan: false };
    const tenant = candidate.tenant;
    const stack = tenant === undefined ? undefined : facts.get(tenant);
    if (candidate.kind === "snapshot" && stack) return { orphan: false };
    if (tenant !== undefined && open.has(tenant))
      return { orphan: false, skip: "its project has an open operation" };
    if (stack?.locked)
      return { orphan: false, skip: `stack tenant-${tenant} is locked by an update in flight` };
    if (stack?.unreadable)
      return { orphan: false, skip: `stack tenant-${tenant}'s state could not be read: ${stack.unreadable}` };
    const age = candidate.createdAt
      ? (checkedAt.getTime() - candidate.createdAt.getTime()) / 1000
      : undefined;
    if (age !== undefined && age < options.graceSeconds)
      return {
        orphan: false,
        skip: `made ${Math.max(0, Math.round(age))} s ago, within the grace period of ${options.graceSeconds} s`,
      };
    if (tenant === undefined) return { orphan: true, why: "it names no project" };
    return {
      orphan: true,
      why: stack ? `stack tenant-${tenant} does not list it` : `project ${tenant} has no tenant stack`,
    };
  };

  const orphans: Array<Orphan & { candidate: Candidate }> = [];
  const skipped: SkippedResource[] = [];
  for (const candidate of candidates) {
    const verdict = judge(candidate, stacks, busy);
    const tenant = candidate.tenant ?? "(none)";
    if (verdict.orphan) {
      orphans.push({
        kind: candidate.kind,
        name: candidate.name,
        ...(candidate.id ? { id: candidate.id } : {}),
        tenant,
        why: verdict.why,
        ...(candidate.detail ? { detail: candidate.detail } : {}),
        candidate,
      });
    } else if (verdict.skip)
      skipped.push({ kind: candidate.kind, name: candidate.name, tenant, why: verdict.skip });
  }

  if (options.remove) {
    // Containers first: a network or volume in use by one cannot go before it.
    // A mount before its image: an image goes once nothing has it mounted. A VM before its network: its
    // tap is a port of the network's bridge.
    const order: OrphanKind[] = [
      "microvm",
      "container",
      "network",
      "volume",
      "rule",
      "squid-fragment",
      "disk-mount",
      "disk-image",
      "snapshot",
    ];
    orphans.sort((a, b) => order.indexOf(a.kind) - order.indexOf(b.kind));
    let fragmentsRemoved = false;
    for (const orphan of orphans) {
      // Read again right before: a stack made (or locked) since the first look keeps what it owns.
      const tenant = orphan.candidate.tenant;
      if (tenant !== undefined) {
        const now = (await readStacks(options.backendUrl, tenant)).get(tenant);
        if (now) stacks.set(tenant, now);
        else stacks.delete(tenant);
      }
      if (options.db) busy = await projectsWithOpenOperations(options.db);
      const verdict = judge(orphan.candidate, stacks, busy);
      if (!verdict.orphan) {
        orphan.removed = false;
        orphan.error = `left alone: ${verdict.skip ?? "a tenant stack lists it now"}`;
        continue;
      }
      try {
        await orphan.candidate.remove();
        orphan.removed = true;
        if (orphan.kind === "squid-fragment") fragmentsRemoved = true;
      } catch (error) {
        orphan.removed = false;
        orphan.error = (error as Error).message;
      }
    }
    if (fragmentsRemoved) {
      try {
        const config = options.squid.configFile;
        await reconfigureSquid(config, () =>
          execFileAsync("squid", ["-k", "reconfigure", "-f", config], { timeout: 30_000 }),
        );
      } catch (error) {
        const why = `${(error as { stderr?: string }).stderr ?? (error as Error).message}`.trim();
        for (const orphan of orphans)
          if (orphan.kind === "squid-fragment" && orphan.removed)
            orphan.error = `removed, but Squid did not reload (${why}): it keeps the old rules until it does`;
      }
    }
  }

  return {
    instance: options.instance,
    backendUrl: options.backendUrl,
    checkedAt: checkedAt.toISOString(),
    remove: options.remove ?? false,
    stacks: stackCount,
    orphans: orphans.map(({ candidate: _candidate, ...orphan }) => orphan),
    skipped,
    notes,
  };
}

/** The report as an operator reads it. */
export function orphanReportText(report: OrphanReport): string {
  const lines = [
    `orphan sweep of platform instance ${report.instance} (tenant stacks in ${report.backendUrl}: ${report.stacks})`,
  ];
  if (report.orphans.length === 0) lines.push("no orphans");
  for (const orphan of report.orphans) {
    const outcome =
      orphan.removed === undefined ? "" : orphan.removed ? "  [removed]" : `  [not removed: ${orphan.error}]`;
    lines.push(
      `  ${orphan.kind.padEnd(14)} ${orphan.name}${orphan.id && orphan.kind !== "snapshot" ? ` (${orphan.id.slice(0, 12)})` : ""}`,
      `  ${"".padEnd(14)} project ${orphan.tenant}: ${orphan.why}${orphan.detail ? `; ${orphan.detail}` : ""}${outcome}`,
    );
    if (orphan.removed && orphan.error) lines.push(`  ${"".padEnd(14)} ${orphan.error}`);
  }
  if (report.skipped.length > 0) {
    lines.push("left alone this time:");
    for (const skip of report.skipped)
      lines.push(
        `  ${skip.kind.padEnd(14)} ${skip.name}`,
        `  ${"".padEnd(14)} project ${skip.tenant}: ${skip.why}`,
      );
  }
  for (const note of report.notes) lines.push(`note: ${note}`);
  if (!report.remove && report.orphans.length > 0)
    lines.push(`${report.orphans.length} orphan(s); run again with --remove to remove them`);
  return `${lines.join("\n")}\n`;
}
