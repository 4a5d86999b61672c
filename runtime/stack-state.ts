import { existsSync, promises as fs } from "node:fs";
import * as path from "node:path";
import { isAtomicTemp } from "../lib/files.js";
import type { GcsClient } from "./gcp/storage.js";

function checkNames(...names: string[]): void {
  for (const name of names) {
    if (!/^[A-Za-z0-9_.-]+$/.test(name) || name === "." || name === "..") {
      throw new Error(`refusing to purge state for unsafe project/stack name ${JSON.stringify(name)}`);
    }
  }
}

/**
 * `pulumi stack rm` on a DIY backend keeps the stack's history, backups, `.bak` checkpoint and lock
 * folder. A deleted tenant must leave nothing behind, so after a successful `removeStack` these go too.
 * Refuses while the stack's checkpoint still exists: purging must never lose a live stack's state.
 */
export async function purgeRemovedStackState(
  backendUrl: string,
  project: string,
  stack: string,
): Promise<string[]> {
  const dir = fileBackendDir(backendUrl);
  if (dir === undefined) {
    throw new Error(`purging stack state is only implemented for file:// backends, not ${backendUrl}`);
  }
  checkNames(project, stack);
  const layout = fileStateLayout(dir, project, stack);
  const checkpoint = layout.checkpoint;
  if (existsSync(checkpoint) || existsSync(`${checkpoint}.gz`)) {
    throw new Error(
      `stack ${project}/${stack} still exists in ${backendUrl}; remove it before purging its state`,
    );
  }
  const leftovers = [
    `${checkpoint}.bak`,
    `${checkpoint}.bak.attrs`,
    `${checkpoint}.attrs`,
    layout.history,
    layout.backups,
    layout.locks,
  ].filter((entry) => existsSync(entry));
  // The file backend writes a checkpoint (or its `.bak`) to `<name>.<random>.tmp` and renames it; a write
  // cut short leaves the temporary file (such as `tenant-<id>.json.bak.<hex>.tmp`). A stack made without the
  // CLI (runtime/tenants/stack-init.ts) writes its checkpoint and `.attrs` as `writeFileAtomic` does.
  const { stacksDir } = layout;
  const temporary = (await fs.readdir(stacksDir).catch(() => [] as string[]))
    .filter(
      (file) =>
        (file.startsWith(`${stack}.json.`) && file.endsWith(".tmp")) ||
        isAtomicTemp(file, checkpoint) ||
        isAtomicTemp(file, `${checkpoint}.attrs`),
    )
    .map((file) => path.join(stacksDir, file));
  leftovers.push(...temporary);
  await Promise.all(leftovers.map((entry) => fs.rm(entry, { recursive: true, force: true })));
  return leftovers;
}

/**
 * {@link purgeRemovedStackState} for a `gs://<bucket>/<path>` backend: the same leftovers, as objects.
 * Refuses while the stack's checkpoint is still there.
 */
export async function purgeRemovedGcsStackState(
  client: GcsClient,
  backendUrl: string,
  project: string,
  stack: string,
): Promise<string[]> {
  checkNames(project, stack);
  const match = /^gs:\/\/([^/?]+)\/?([^?]*)$/.exec(backendUrl);
  if (!match) throw new Error(`not a gs:// backend URL: ${backendUrl}`);
  const [, bucket, base] = match as unknown as [string, string, string];
  const root = `${base.replace(/\/+$/, "")}${base ? "/" : ""}.pulumi/`;
  const checkpoint = `${root}stacks/${project}/${stack}.json`;
  const siblings = await client.list(bucket, checkpoint);
  if (siblings.includes(checkpoint) || siblings.includes(`${checkpoint}.gz`)) {
    throw new Error(
      `stack ${project}/${stack} still exists in ${backendUrl}; remove it before purging its state`,
    );
  }
  const leftovers = siblings.filter((name) => /\.json(\.gz)?(\.bak)?(\.attrs)?$/.test(name));
  for (const dir of [
    `history/${project}/${stack}/`,
    `backups/${project}/${stack}/`,
    `locks/organization/${project}/${stack}/`,
  ])
    leftovers.push(...(await client.list(bucket, `${root}${dir}`)));
  for (const name of leftovers) await client.delete(bucket, name);
  return leftovers.map((name) => `gs://${bucket}/${name}`);
}

/**
 * Free bytes below which a file state backend counts as full: an update writes its lock, the checkpoint
 * (about 40 KB for a tenant) beside its `.bak`, a backup and a history copy, each before the old is gone.
 */
export const STATE_BACKEND_MIN_FREE = 1024 * 1024;

/** The directory of a `file://` state backend; undefined for any other backend. */
export function fileBackendDir(backendUrl: string): string | undefined {
  return backendUrl.startsWith("file://") ? backendUrl.slice("file://".length) : undefined;
}

/**
 * Where a `file://` backend in `dir` keeps project `project`'s stacks (`<stack>.json`, its `.bak`, their
 * `.attrs` metadata) and stack `stack`'s history, backups and locks: the one place that knows the layout
 * (the engine's diy backend, `.pulumi/` under the backend's directory).
 */
export function fileStateLayout(dir: string, project: string, stack: string) {
  const root = path.join(dir, ".pulumi");
  const stacksDir = path.join(root, "stacks", project);
  return {
    stacksDir,
    checkpoint: path.join(stacksDir, `${stack}.json`),
    history: path.join(root, "history", project, stack),
    backups: path.join(root, "backups", project, stack),
    locks: path.join(root, "locks", "organization", project, stack),
  };
}

/** Free and total bytes of the filesystem a `file://` backend's directory is on. */
export async function stateBackendSpace(dir: string): Promise<{ free: number; size: number }> {
  const stats = await fs.statfs(dir);
  return { free: stats.bavail * stats.bsize, size: stats.blocks * stats.bsize };
}

const mib = (bytes: number) => `${(bytes / 1024 / 1024).toFixed(1)} MiB`;

/** What `/healthz` and an operation say of a backend's space: `<free> free of <size>`. */
export function describeSpace(space: { free: number; size: number }): string {
  return `${mib(space.free)} free of ${mib(space.size)}`;
}

/**
 * When an engine's error is a `file://` state backend out of space: "no space left on device"
 * (or a quota) on a path in it, or while its filesystem has less than {@link STATE_BACKEND_MIN_FREE}
 * free. The message names the backend; undefined for any other error or backend.
 */
export async function stateBackendFullError(
  message: string,
  backendUrl: string,
): Promise<string | undefined> {
  const dir = fileBackendDir(backendUrl);
  if (!dir || !/no space left on device|disk quota exceeded/i.test(message)) return undefined;
  const space = await stateBackendSpace(dir).catch(() => undefined);
  if (!message.includes(`${dir}/`) && !(space && space.free < STATE_BACKEND_MIN_FREE)) return undefined;
  return `no space left on the state backend ${dir}${space ? ` (${describeSpace(space)})` : ""}: ${message}`;
}
