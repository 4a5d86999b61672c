import { randomBytes } from "node:crypto";
import { promises as fs } from "node:fs";
import * as path from "node:path";
import { run } from "../process.js";
import { exists } from "../files.js";

/**
 * Where the microVM backend keeps what it builds once per host (kernels, root filesystems), outside the
 * repository, as scripts/lib.sh's `cache_root` does.
 */
export function microvmCacheDir(env: NodeJS.ProcessEnv = process.env): string {
  const base =
    env.AGENT_SANDBOX_CACHE ??
    path.join(env.XDG_CACHE_HOME ?? path.join(env.HOME ?? "/root", ".cache"), "agent-sandbox");
  return path.join(base, "microvm");
}

/** Free space left in the root filesystem above the image's own files (the image file is sparse). */
const ROOTFS_HEADROOM_BYTES = 1 << 30;

/**
 * The sandbox image as a raw ext4 root filesystem, cached per image id: `docker export` of a created (never
 * started) container into a directory, then `mkfs.ext4 -d`, which fills the image without mounting it.
 * Built under a temporary name and renamed, so a crash never leaves a half-made image under the final name.
 */
export async function ensureRootfs(image: string, cacheDir = microvmCacheDir()): Promise<string> {
  const imageId = (await run("docker", ["image", "inspect", "--format", "{{.Id}}", image])).stdout.trim();
  const digest = imageId.replace(/^sha256:/, "");
  if (!/^[0-9a-f]{64}$/.test(digest)) throw new Error(`docker image inspect ${image} gave no image id`);
  const target = path.join(cacheDir, "rootfs", `${digest}.ext4`);
  if (await exists(target)) return target;

  await fs.mkdir(path.dirname(target), { recursive: true });
  const suffix = randomBytes(6).toString("hex");
  const tree = path.join(path.dirname(target), `.${digest}.${suffix}.d`);
  const partial = path.join(path.dirname(target), `.${digest}.${suffix}.ext4`);
  const container = `agent-sandbox-rootfs-${suffix}`;
  try {
    await run("docker", ["create", "--name", container, image, "true"]);
    await fs.mkdir(tree);
    await run(
      "bash",
      [
        "-c",
        'set -o pipefail; docker export "$1" | tar --numeric-owner -xpf - -C "$2"',
        "export",
        container,
        tree,
      ],
      600_000,
    );
    const used = Number.parseInt((await run("du", ["-sb", tree], 300_000)).stdout.split(/\s/)[0]!, 10);
    const size = Math.ceil((used * 1.2 + ROOTFS_HEADROOM_BYTES) / (1 << 20));
    await run(
      "mkfs.ext4",
      ["-q", "-F", "-L", "sandbox-root", "-E", "root_owner=0:0", "-d", tree, partial, `${size}M`],
      600_000,
    );
    await fs.rename(partial, target);
    return target;
  } finally {
    await run("docker", ["rm", "--force", container]).catch(() => undefined);
    await fs.rm(tree, { recursive: true, force: true });
    await fs.rm(partial, { force: true });
  }
}
