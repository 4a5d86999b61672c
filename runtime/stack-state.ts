import { existsSync, promises as fs } from "node:fs";
import * as path from "node:path";

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
  for (const name of [project, stack]) {
    if (!/^[A-Za-z0-9_.-]+$/.test(name) || name === "." || name === "..") {
      throw new Error(`refusing to purge state for unsafe project/stack name ${JSON.stringify(name)}`);
    }
  }
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
  await Promise.all(leftovers.map((entry) => fs.rm(entry, { recursive: true, force: true })));
  return leftovers;
}
