import { existsSync, promises as fs } from "node:fs";
import * as path from "node:path";
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
  if (!backendUrl.startsWith("file://")) {
    throw new Error(`purging stack state is only implemented for file:// backends, not ${backendUrl}`);
  }
  checkNames(project, stack);
  const root = path.join(backendUrl.slice("file://".length), ".pulumi");
  const checkpoint = path.join(root, "stacks", project, `${stack}.json`);
  if (existsSync(checkpoint) || existsSync(`${checkpoint}.gz`)) {
    throw new Error(
      `stack ${project}/${stack} still exists in ${backendUrl}; remove it before purging its state`,
    );
  }
  const leftovers = [
    path.join(root, "stacks", project, `${stack}.json.bak`),
    path.join(root, "stacks", project, `${stack}.json.bak.attrs`),
    path.join(root, "stacks", project, `${stack}.json.attrs`),
    path.join(root, "history", project, stack),
    path.join(root, "backups", project, stack),
    path.join(root, "locks", "organization", project, stack),
  ].filter((entry) => existsSync(entry));
  // The file backend writes a checkpoint (or its `.bak`) to `<name>.<random>.tmp` and renames it; a write
  // cut short leaves the temporary file (issue 18's fault loops found `tenant-<id>.json.bak.<hex>.tmp`).
  const stacksDir = path.join(root, "stacks", project);
  const temporary = (await fs.readdir(stacksDir).catch(() => [] as string[]))
    .filter((file) => file.startsWith(`${stack}.json.`) && file.endsWith(".tmp"))
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
