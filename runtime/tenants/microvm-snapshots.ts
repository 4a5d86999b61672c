// Snapshots of a microVM project: what a container snapshot holds (the system state: packages,
// tools, configs; not the home, which is its own disk), as a qcow2 of the VM's root changes over the sandbox
// image's ext4. A restore boots a new overlay over it. Kept beside the VMs, the newest `keep` per project.
import { createHash, randomBytes } from "node:crypto";
import { createReadStream, promises as fs } from "node:fs";
import * as path from "node:path";
import { pipeline } from "node:stream/promises";
import { microVmFiles, qmpCommand, readMicroVm } from "../../lib/microvm/launcher.js";
import { run } from "../../lib/process.js";
import type { Queryable } from "../store/db.js";
import type { TenantSpec } from "../../components/tenant/spec.js";
import { snapshotTag } from "./snapshots.js";
import {
  deleteSnapshotRecord,
  listSnapshots,
  recordSnapshot,
  type SnapshotRecord,
} from "../store/snapshots.js";

/** A microVM tenant's VM directory and its snapshots' directory. */
export function microVmPaths(spec: TenantSpec): { stateDir: string; snapshotsDir: string } {
  const root = spec.microvm!.stateRoot;
  return {
    stateDir: path.join(root, spec.projectId),
    snapshotsDir: path.join(path.dirname(root), "snapshots", spec.projectId),
  };
}

/** The raw ext4 at the bottom of a qcow2's backing chain (the sandbox image's root). */
async function baseOf(image: string): Promise<string> {
  const { stdout } = await run("qemu-img", ["info", "-U", "--backing-chain", "--output=json", image]);
  const chain = JSON.parse(stdout) as { filename: string; format: string }[];
  const base = chain.at(-1);
  if (!base || base.format !== "raw") throw new Error(`${image} is not over a raw root filesystem`);
  return base.filename;
}

async function sha256(file: string): Promise<string> {
  const hash = createHash("sha256");
  await pipeline(createReadStream(file), hash);
  return `sha256:${hash.digest("hex")}`;
}

/**
 * Pauses the VM (QMP `stop` drains and flushes its disks), writes its root's changes over the image's ext4
 * as `<tag>.qcow2` (made under a temporary name, then renamed), resumes it, records the snapshot and removes
 * the ones past `keep`. The guest is not asked to sync: what it wrote in the last second (the root's and
 * home's `commit=1`) may be missing, as in a container snapshot taken mid-write. A stopped VM's disk is
 * read as it is.
 */
export async function takeMicroVmSnapshot(
  db: Queryable,
  spec: TenantSpec,
  keep: number,
): Promise<SnapshotRecord> {
  const { stateDir, snapshotsDir } = microVmPaths(spec);
  const state = await readMicroVm(stateDir);
  const overlay = microVmFiles(stateDir).overlay;
  const base = await baseOf(overlay);
  const tag = snapshotTag(new Date());
  const target = path.join(snapshotsDir, `${tag}.qcow2`);
  const partial = path.join(snapshotsDir, `.${tag}.${randomBytes(4).toString("hex")}.partial`);
  await fs.mkdir(snapshotsDir, { recursive: true, mode: 0o700 });
  const paused = state.running && (await qmpCommand(stateDir, "stop").then(() => true));
  try {
    await run(
      "qemu-img",
      ["convert", "-U", "-O", "qcow2", "-B", base, "-F", "raw", overlay, partial],
      600_000,
    );
  } catch (error) {
    await fs.rm(partial, { force: true });
    throw new Error(`copying the microVM's root for a snapshot failed: ${(error as Error).message}`);
  } finally {
    if (paused) await qmpCommand(stateDir, "cont");
  }
  await fs.rename(partial, target);
  const digest = await sha256(target);
  const snapshot = await recordSnapshot(db, { projectId: spec.projectId, tag, image: target, digest });
  await pruneMicroVmSnapshots(db, spec.projectId, keep);
  return snapshot;
}

/** Deletes the snapshots past the newest `keep` (their files, then their records); 0 deletes them all. */
export async function pruneMicroVmSnapshots(
  db: Queryable,
  projectId: string,
  keep: number,
): Promise<string[]> {
  const removed: string[] = [];
  for (const old of (await listSnapshots(db, projectId)).slice(keep)) {
    await fs.rm(old.image, { force: true });
    await deleteSnapshotRecord(db, projectId, old.tag);
    removed.push(old.tag);
  }
  return removed;
}

/** Every snapshot of a deleted microVM project, and its directory (with what an interrupted one left). */
export async function deleteAllMicroVmSnapshots(db: Queryable, spec: TenantSpec): Promise<string[]> {
  const removed = await pruneMicroVmSnapshots(db, spec.projectId, 0);
  await fs.rm(microVmPaths(spec).snapshotsDir, { recursive: true, force: true });
  return removed;
}
