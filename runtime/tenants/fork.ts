// Fork: N new projects from one consistent point of a source project's home. The runtime copies the source's
// home image N times in one freeze window (lib/host/filesystem-copy.ts) into staging files beside each new
// project's image-to-be, before any of their creates is queued; each create's sandbox:host:Filesystem then
// takes its staged copy over (`copyFrom`). Everything else of a fork (network, keys, tokens, secrets) is a
// new project's own.
import { promises as fs } from "node:fs";
import * as path from "node:path";
import { tenantDiskPaths } from "../../components/tenant/names.js";
import type { TenantSpec } from "../../components/tenant/spec.js";
import { copyImageConsistently, type ImageCopies } from "../../lib/host/filesystem-copy.js";
import type { Queryable } from "../store/db.js";
import { getTenant } from "../store/tenants.js";
import type { ForkFields } from "./service.js";

/** At most this many forks per request. */
export const MAX_FORKS = 10;

/** A source's home as a fork copies it, or why it cannot. */
export type ForkableHome =
  | { readonly ok: true; readonly imagePath: string; readonly mountpoint: string; readonly homeBytes: number }
  | { readonly ok: false; readonly reason: string };

/** Whether a project's home can be forked: a container's home on a filesystem of its own, on this host. */
export function forkableHome(spec: TenantSpec): ForkableHome {
  const backend = spec.backend ?? "container";
  if (backend !== "container")
    return {
      ok: false,
      reason: `project ${spec.projectId} runs on ${backend}: only a container's home can be forked on this platform`,
    };
  if (spec.mode !== "local" || !spec.host.disksRoot || spec.homeBytes === undefined)
    return {
      ok: false,
      reason: `project ${spec.projectId}'s home is not a filesystem of its own (a project made before tenants.homeBytes, or on the gcp target): it cannot be copied at one point`,
    };
  return {
    ok: true,
    ...tenantDiskPaths(spec.host.disksRoot, spec.projectId, "home"),
    homeBytes: spec.homeBytes,
  };
}

/** Where a fork's copy of its source's home waits for its create: beside the image it becomes. */
export function stagedHomePath(disksRoot: string, projectId: string): string {
  return `${tenantDiskPaths(disksRoot, projectId, "home").imagePath}.fork`;
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
  const disksRoot = source.host.disksRoot!;
  const staged = forkIds.map((id) => stagedHomePath(disksRoot, id));
  const discard = async () => {
    for (const file of staged) await discardStaged(file);
  };
  try {
    // Each fork's own directory, as its filesystem's create would make it (root's, 0700).
    for (const file of staged) await fs.mkdir(path.dirname(file), { recursive: true, mode: 0o700 });
    const copies = await copyImageConsistently(home.imagePath, home.mountpoint, staged);
    // A home grown past its spec (never the case today) is copied whole: the fork's is never smaller.
    const homeBytes = Math.max(home.homeBytes, (await fs.stat(staged[0]!)).size);
    return {
      copies,
      fieldsOf: (projectId) => ({
        homeBytes,
        homeCopyFrom: stagedHomePath(disksRoot, projectId),
        protectedPaths: source.protectedPaths,
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

/**
 * After a fork's delete: its staged copy, if its create failed before its filesystem took the copy over (a
 * stack destroyed whole keeps no resource whose delete would remove it).
 */
export async function discardStagedHome(spec: TenantSpec): Promise<void> {
  if (spec.homeCopyFrom === undefined || !spec.host.disksRoot) return;
  // Only the staging path the runtime gives a fork: a spec is never a way to delete another file.
  if (spec.homeCopyFrom !== stagedHomePath(spec.host.disksRoot, spec.projectId)) return;
  await discardStaged(spec.homeCopyFrom);
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
  disksRoot: string,
  before: Date,
): Promise<string[]> {
  const projects = await fs.readdir(disksRoot).catch((error: NodeJS.ErrnoException) => {
    if (error.code === "ENOENT") return [] as string[];
    throw error;
  });
  const removed: string[] = [];
  for (const projectId of projects) {
    const staged = stagedHomePath(disksRoot, projectId);
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
  return removed;
}
