// Fork: N new projects from one consistent point of a source project's home. The runtime copies the source's
// home image N times at one point (lib/host/filesystem-copy.ts: the source's writes held for the first copy)
// into staging files beside each new project's image-to-be, before any of their creates is queued; each
// create then takes its staged copy over (`homeCopyFrom`: a container's sandbox:host:Filesystem, a microVM's
// first boot). Everything else of a fork (network, keys, tokens, secrets) is a new project's own. Which homes
// can be copied, and how their writes are held, is each backend's (SandboxBackend.forkableHome): a container's
// filesystem frozen, a microVM's guest paused.
import { promises as fs } from "node:fs";
import * as path from "node:path";
import { tenantDiskPaths } from "../../components/tenant/names.js";
import type { TenantSpec } from "../../components/tenant/spec.js";
import { exists } from "../../lib/files.js";
import {
  copyImageAtOnePoint,
  mountFreeze,
  type ImageCopies,
  type WriteHold,
} from "../../lib/host/filesystem-copy.js";
import { guestPauseHold } from "../../lib/microvm/hold.js";
import { guestStatus, microVmFiles, readMicroVm } from "../../lib/microvm/launcher.js";
import type { Queryable } from "../store/db.js";
import { getTenant } from "../store/tenants.js";
import { TenantRequestError, type ForkFields } from "./service.js";

/** At most this many forks per request. */
export const MAX_FORKS = 10;

/** A source's home as a fork copies it, or why it cannot. */
export type ForkableHome =
  | {
      readonly ok: true;
      /** The image every copy is of. */
      readonly imagePath: string;
      /** Its size, as the forks' specs record it (`homeBytes`). */
      readonly homeBytes: number;
      /** Where a fork's copy waits for its create: beside the image it becomes (`homeCopyFrom`). */
      stagedPath(projectId: string): string;
      /** How the image's writes are held for the first copy, now; none when nothing writes to it. */
      hold(): Promise<WriteHold | undefined>;
    }
  | { readonly ok: false; readonly reason: string };

/** A fork's staged copy, beside the home image it becomes. */
const stagedCopyOf = (homeImage: string) => `${homeImage}.fork`;

/** Where a fork's copy of its source's home waits for its create, for a container: beside its filesystem's image. */
export function stagedHomePath(disksRoot: string, projectId: string): string {
  return stagedCopyOf(tenantDiskPaths(disksRoot, projectId, "home").imagePath);
}

/** Where a fork's copy waits, for a microVM: beside the home disk in its state directory. */
export function stagedMicroVmHomePath(stateRoot: string, projectId: string): string {
  return stagedCopyOf(microVmFiles(path.join(stateRoot, projectId)).home);
}

/** A container's home as a fork copies it: a filesystem of its own on this host, frozen while in use. */
export function filesystemHome(spec: TenantSpec): ForkableHome {
  if (spec.mode !== "local" || !spec.host.disksRoot || spec.homeBytes === undefined)
    return {
      ok: false,
      reason: `project ${spec.projectId}'s home is not a filesystem of its own (a project made before tenants.homeBytes, or on the gcp target): it cannot be copied at one point`,
    };
  const disksRoot = spec.host.disksRoot;
  const { imagePath, mountpoint } = tenantDiskPaths(disksRoot, spec.projectId, "home");
  return {
    ok: true,
    imagePath,
    homeBytes: spec.homeBytes,
    stagedPath: (projectId) => stagedHomePath(disksRoot, projectId),
    hold: () => mountFreeze(imagePath, mountpoint),
  };
}

/**
 * A microVM's home as a fork copies it: its home disk, in use while the guest runs. The guest first writes
 * its page cache out (`sync`, the agent's to run), then is paused for the copy (lib/microvm/hold.ts); one
 * paused by something else (a stop's memory save under way) is refused with a 409 to try again.
 */
export async function microVmHome(spec: TenantSpec, sync: () => Promise<void>): Promise<ForkableHome> {
  if (spec.mode !== "local" || !spec.microvm)
    return {
      ok: false,
      reason: `project ${spec.projectId}'s microVM has no home disk on this host: it cannot be copied`,
    };
  const stateRoot = spec.microvm.stateRoot;
  const stateDir = path.join(stateRoot, spec.projectId);
  const imagePath = microVmFiles(stateDir).home;
  if (!(await exists(imagePath)))
    return {
      ok: false,
      reason: `project ${spec.projectId}'s home disk (${imagePath}) is not there: nothing to copy`,
    };
  return {
    ok: true,
    imagePath,
    homeBytes: spec.homeBytes ?? (await fs.stat(imagePath)).size,
    stagedPath: (projectId) => stagedMicroVmHomePath(stateRoot, projectId),
    async hold() {
      // Not booted yet, or stopped: nothing writes to the disk.
      if (!(await readMicroVm(stateDir).catch(() => undefined))?.running) return undefined;
      const status = await guestStatus(stateDir);
      if (status !== "running")
        throw new TenantRequestError(
          409,
          `project ${spec.projectId}'s microVM is ${status ?? "not answering"}, not running: a pause or a resume is under way; fork it when that is done`,
        );
      await sync();
      return guestPauseHold(stateDir);
    },
  };
}

/** Copies staged for a fork's projects: the point they were taken at, and each one's spec fields. */
export interface StagedHomes {
  readonly copies: ImageCopies;
  /** What a fork's create takes from its source (its staged copy among them). */
  fieldsOf(projectId: string): ForkFields;
  /** Removes every staged copy and its directory (the creates were never recorded). */
  discard(): Promise<void>;
}

/** Forks of one source in this process, one after another: two freezes of one filesystem collide (EBUSY). */
const forking = new Map<string, Promise<unknown>>();

/**
 * Copies the source's home, in use or not, once for each of `forkIds` at one point (frozen for the first
 * copy; the others are made from it), into each fork's staging file. A failure leaves nothing staged.
 */
export async function stageForkHomes(
  source: TenantSpec,
  home: Extract<ForkableHome, { ok: true }>,
  forkIds: readonly string[],
): Promise<StagedHomes> {
  const previous = forking.get(source.projectId) ?? Promise.resolve();
  const mine = previous.catch(() => undefined).then(() => stage(source, home, forkIds));
  forking.set(source.projectId, mine);
  try {
    return await mine;
  } finally {
    if (forking.get(source.projectId) === mine) forking.delete(source.projectId);
  }
}

async function stage(
  source: TenantSpec,
  home: Extract<ForkableHome, { ok: true }>,
  forkIds: readonly string[],
): Promise<StagedHomes> {
  const staged = forkIds.map((id) => home.stagedPath(id));
  const discard = async () => {
    for (const file of staged) await discardStaged(file);
  };
  try {
    // Each fork's own directory, as its filesystem's create would make it (root's, 0700).
    for (const file of staged) await fs.mkdir(path.dirname(file), { recursive: true, mode: 0o700 });
    const copies = await copyImageAtOnePoint(home.imagePath, await home.hold(), staged);
    // A home grown past its spec (never the case today) is copied whole: the fork's is never smaller.
    const homeBytes = Math.max(home.homeBytes, (await fs.stat(staged[0]!)).size);
    return {
      copies,
      fieldsOf: (projectId) => ({
        homeBytes,
        homeCopyFrom: home.stagedPath(projectId),
        protectedPaths: source.protectedPaths,
        // Not a snapshot of the source's own (a restore's): those live in the source's repository and go
        // with it, and the home is what a fork copies, not system state. Anything else (a devcontainer's
        // image) is the environment the agent works in.
        ...(source.image.includes(source.projectId) ? {} : { image: source.image }),
        ...(source.bandwidth ? { bandwidth: source.bandwidth } : {}),
      }),
      discard,
    };
  } catch (error) {
    await discard();
    throw error;
  }
}

async function discardStaged(file: string): Promise<void> {
  await fs.rm(file, { force: true });
  await fs.rm(`${file}.partial`, { force: true });
  // The directory only when nothing else is in it (never a filesystem's image).
  await fs.rmdir(path.dirname(file)).catch(() => undefined);
}

/** The staging paths the runtime gives a fork on its spec's roots (a container's disks, a microVM's state). */
function stagingPathsOf(spec: TenantSpec): string[] {
  return [
    ...(spec.host.disksRoot ? [stagedHomePath(spec.host.disksRoot, spec.projectId)] : []),
    ...(spec.microvm ? [stagedMicroVmHomePath(spec.microvm.stateRoot, spec.projectId)] : []),
  ];
}

/**
 * After a fork's delete: its staged copy, if its create failed before its home took the copy over (a stack
 * destroyed whole keeps no resource whose delete would remove it).
 */
export async function discardStagedHome(spec: TenantSpec): Promise<void> {
  // Only the staging path the runtime gives a fork: a spec is never a way to delete another file.
  if (spec.homeCopyFrom === undefined || !stagingPathsOf(spec).includes(spec.homeCopyFrom)) return;
  await discardStaged(spec.homeCopyFrom);
}

/** A directory of projects' homes (`<root>/<project>/`), and where a fork's copy is staged in it. */
export interface StagingRoot {
  readonly root: string;
  stagedPath(projectId: string): string;
}

/** The container's and the microVM's staging roots, where this host has them. */
export function stagingRoots(disksRoot: string, microVmStateRoot?: string): StagingRoot[] {
  return [
    { root: disksRoot, stagedPath: (projectId) => stagedHomePath(disksRoot, projectId) },
    ...(microVmStateRoot === undefined
      ? []
      : [
          {
            root: microVmStateRoot,
            stagedPath: (projectId: string) => stagedMicroVmHomePath(microVmStateRoot, projectId),
          },
        ]),
  ];
}

/**
 * At the runtime's start: every staged copy (whole or `.partial`) written before `before` (this process's
 * start) of a project that has no live tenant, left by a runtime killed between its fork's copies and the
 * transaction that records its forks (nothing else removes it but the orphan sweep, which an operator runs).
 * This process's own forks, which its API may already be staging, are all written after its start and never
 * touched; a recorded fork's copy is its create's, and kept. Returns the files removed.
 */
export async function discardUnrecordedStagedHomes(
  db: Queryable,
  roots: readonly StagingRoot[],
  before: Date,
): Promise<string[]> {
  const removed: string[] = [];
  for (const { root, stagedPath } of roots) {
    const projects = await fs.readdir(root).catch((error: NodeJS.ErrnoException) => {
      if (error.code === "ENOENT") return [] as string[];
      throw error;
    });
    for (const projectId of projects) {
      const staged = stagedPath(projectId);
      const present: string[] = [];
      for (const file of [staged, `${staged}.partial`]) {
        const stat = await fs.stat(file).catch(() => undefined);
        if (stat?.isFile() && stat.mtime < before) present.push(file);
      }
      if (present.length === 0) continue;
      const tenant = await getTenant(db, projectId);
      if (tenant && tenant.state !== "deleted") continue;
      for (const file of present) await fs.rm(file, { force: true });
      await fs.rmdir(path.dirname(staged)).catch(() => undefined);
      removed.push(...present);
    }
  }
  return removed;
}
