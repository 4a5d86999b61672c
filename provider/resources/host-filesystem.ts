import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { promises as fs } from "node:fs";
import * as path from "node:path";
import { promisify } from "node:util";
import { z } from "zod";
import { mountAt } from "../../lib/host/filesystem-copy.js";
import { changedKeys, type ResourceHandler } from "../handler.js";

const run = promisify(execFile);

/** Below this an ext4 filesystem is mostly its own metadata and journal; nothing a sandbox can live in. */
export const MIN_FILESYSTEM_BYTES = 64 * 1024 * 1024;
const MIB = 1024 * 1024;

const hostPath = z
  .string()
  .refine((p) => path.isAbsolute(p) && path.normalize(p) === p && p.split("/").length > 2, {
    message: "must be an absolute, normalized path at least two levels deep",
  });

/**
 * A size-limited filesystem on the host, so a tenant's home cannot fill its disk: a sparse ext4 image file,
 * loop-mounted (`nodev,nosuid`) at `mountpoint`, with a `data` directory owned by `uid:gid` that is what
 * gets used (the filesystem's root holds root's `lost+found`). What is written there can fill the image and
 * nothing else. The same image shape as a microVM's home disk (lib/microvm/).
 */
export const HostFilesystemInputs = z
  .object({
    imagePath: hostPath,
    mountpoint: hostPath,
    sizeBytes: z
      .number()
      .int()
      .min(MIN_FILESYSTEM_BYTES, { message: `must be at least ${MIN_FILESYSTEM_BYTES} (64 MiB)` })
      .max(2 ** 44, { message: "must be at most 16 TiB" })
      .refine((n) => n % MIB === 0, { message: "must be a whole number of MiB" }),
    uid: z.number().int().min(0),
    gid: z.number().int().min(0),
    mode: z
      .string()
      .regex(/^0?[0-7]{3}$/, { message: "must be an octal mode such as 0700" })
      .transform((m) => m.padStart(4, "0")),
    /**
     * Create only: an image to start from instead of an empty filesystem (a fork's consistent copy of
     * another tenant's home, staged by the runtime), moved into place and given this resource's UUID.
     * Ignored once the image exists (a later change is no change).
     */
    copyFrom: hostPath.optional(),
  })
  .refine((i) => !isWithin(i.imagePath, i.mountpoint) && !isWithin(i.mountpoint, i.imagePath), {
    message: "the image must not be inside the mountpoint, nor the mountpoint inside the image",
    path: ["mountpoint"],
  });
export type HostFilesystemInputs = z.infer<typeof HostFilesystemInputs>;
export type HostFilesystemOutputs = HostFilesystemInputs & {
  /** The filesystem's UUID (derived from the image path): only an image carrying it is ever adopted. */
  uuid: string;
  /** `<mountpoint>/data`: the directory to hand out. */
  dataPath: string;
  /** Read: whether the image is mounted at the mountpoint (false after a host reboot; an update mounts it). */
  mounted: boolean;
};

function isWithin(child: string, parent: string): boolean {
  return child === parent || child.startsWith(`${parent}/`);
}

/**
 * The filesystem's UUID, a name-based one of its image path: a create killed after `mkfs` and run again
 * recognises its own image, while an image made by anything else (another path's, a copy, a foreign file)
 * carries another UUID and is never formatted over or adopted.
 */
export function filesystemUuid(imagePath: string): string {
  const hex = createHash("sha256").update(`sandbox:host:Filesystem:${imagePath}`).digest("hex");
  const variant = ((parseInt(hex[16]!, 16) & 0x3) | 0x8).toString(16);
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-5${hex.slice(13, 16)}-${variant}${hex.slice(17, 20)}-${hex.slice(20, 32)}`;
}

const partialPath = (imagePath: string) => `${imagePath}.partial`;
const dataPathOf = (mountpoint: string) => path.join(mountpoint, "data");

async function exists(file: string): Promise<boolean> {
  return fs.stat(file).then(
    () => true,
    (error: NodeJS.ErrnoException) => {
      if (error.code === "ENOENT") return false;
      throw error;
    },
  );
}

async function command(file: string, args: string[]): Promise<string> {
  try {
    return (await run(file, args, { timeout: 300_000 })).stdout;
  } catch (error) {
    const stderr = `${(error as { stderr?: string }).stderr ?? ""}`.trim();
    throw new Error(`${file} ${args.join(" ")} failed: ${stderr || (error as Error).message}`);
  }
}

/** The UUID of the ext4 filesystem in an image, or `undefined` when it holds none (an empty or cut file). */
async function imageUuid(imagePath: string): Promise<string | undefined> {
  try {
    const { stdout } = await run("blkid", ["-p", "-o", "export", imagePath], { timeout: 30_000 });
    const fields = Object.fromEntries(
      stdout
        .split("\n")
        .filter((line) => line.includes("="))
        .map((line) => [line.slice(0, line.indexOf("=")), line.slice(line.indexOf("=") + 1)]),
    );
    if (fields.TYPE === undefined) return undefined;
    return fields.TYPE === "ext4" ? (fields.UUID ?? "") : `(${fields.TYPE}, not ext4)`;
  } catch (error) {
    // blkid -p exits 2 when it finds no filesystem at all.
    if ((error as { code?: number }).code === 2) return undefined;
    throw error;
  }
}

/** Loop devices attached to the image (`losetup -j`), mounted or not. */
async function loopDevicesOf(imagePath: string): Promise<string[]> {
  const out = await command("losetup", ["-n", "-O", "NAME", "-j", imagePath]);
  return out
    .split("\n")
    .map((line) => line.trim())
    .filter(Boolean);
}

/** Whether the image is what is mounted there; an error when something else is. */
async function mountedHere(
  inputs: Pick<HostFilesystemInputs, "imagePath" | "mountpoint">,
): Promise<string | undefined> {
  const mount = await mountAt(inputs.mountpoint);
  if (!mount) return undefined;
  if (mount.backingFile !== inputs.imagePath)
    throw new Error(
      `${inputs.mountpoint} is already a mount of ${mount.backingFile ?? mount.source}, not of ${inputs.imagePath}; refusing to use someone else's mount`,
    );
  return mount.source;
}

/**
 * The image, made if missing: a sparse file formatted as `<image>.partial` and renamed into place, so a
 * create killed half-way leaves either no image (and a partial one the next create formats again) or a
 * whole filesystem. An image of another UUID is refused. Answers whether it formatted a new one here (of
 * `sizeBytes` exactly, so there is no size to check).
 */
async function ensureImage(inputs: HostFilesystemInputs, uuid: string): Promise<boolean> {
  await fs.mkdir(path.dirname(inputs.imagePath), { recursive: true, mode: 0o700 });
  if (await exists(inputs.imagePath)) {
    const found = await imageUuid(inputs.imagePath);
    if (found !== uuid)
      throw new Error(
        `${inputs.imagePath} already exists and holds ${found === undefined ? "no filesystem" : `filesystem ${found}`}, not this resource's (${uuid}); refusing to format over it or adopt it`,
      );
    return false;
  }
  if (inputs.copyFrom !== undefined) {
    await adoptCopy(inputs.copyFrom, inputs.imagePath, uuid);
    return false;
  }
  const partial = partialPath(inputs.imagePath);
  await fs.rm(partial, { force: true });
  const handle = await fs.open(partial, "wx", 0o600);
  try {
    await handle.truncate(inputs.sizeBytes);
  } finally {
    await handle.close();
  }
  // 4 KiB blocks whatever the size (mke2fs picks 1 KiB for small ones, which limits growth); no blocks
  // reserved for root (the user of the data directory is never root); nothing discarded or zeroed: a
  // fresh sparse file reads as zeros, so tables and journal can start lazily (a 10 GiB image takes 4 MiB).
  await command("mkfs.ext4", [
    "-q",
    "-F",
    "-b",
    "4096",
    "-m",
    "0",
    "-U",
    uuid,
    "-E",
    "nodiscard,lazy_itable_init=1,lazy_journal_init=1",
    partial,
  ]);
  await fs.rename(partial, inputs.imagePath);
  return true;
}

/**
 * The image made from a staged copy (`copyFrom`): moved to `<image>.partial` (a rename on the same
 * filesystem; across filesystems a sparse copy, copy-on-write where the host allows, then the staged file
 * removed), checked, given this resource's UUID and renamed into place. A create killed after the move finds
 * the whole partial image and finishes it; one killed during a copy copies again. A staged copy that is gone
 * with nothing partial left is an error, never an empty filesystem in its place.
 */
async function adoptCopy(copyFrom: string, imagePath: string, uuid: string): Promise<void> {
  const partial = partialPath(imagePath);
  if (await exists(copyFrom)) {
    await fs.rm(partial, { force: true });
    try {
      await fs.rename(copyFrom, partial);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EXDEV") throw error;
      await command("cp", ["--reflink=auto", "--sparse=always", copyFrom, partial]);
      await fs.rm(copyFrom);
    }
  } else if (!(await exists(partial)))
    throw new Error(
      `${copyFrom}, the copy to make ${imagePath} from, is gone and no partial copy is left; refusing to make an empty filesystem in its place`,
    );
  const found = await imageUuid(partial);
  if (found === undefined || found.startsWith("("))
    throw new Error(
      `${copyFrom} holds ${found === undefined ? "no filesystem" : `filesystem ${found}`}; only an ext4 image can be copied`,
    );
  // A copy taken under fsfreeze is clean; anything else is repaired (exit 1) or refused (above 1) here.
  await run("e2fsck", ["-f", "-p", partial], { timeout: 300_000 }).catch(
    (error: { code?: number; stderr?: string }) => {
      if (error.code !== 1)
        throw new Error(`e2fsck of ${copyFrom}'s copy failed (exit ${error.code}): ${error.stderr ?? ""}`);
    },
  );
  // The copy carries its source's UUID: this resource's instead, so that only it ever adopts the image.
  // With metadata_csum_seed the checksums keep their seed, so only the superblocks are rewritten.
  if (found !== uuid) await command("tune2fs", ["-O", "metadata_csum_seed", "-U", uuid, partial]);
  await fs.rename(partial, imagePath);
}

/**
 * Whether the image is mounted at the mountpoint already; an error when something else is mounted there or
 * the unmounted mountpoint holds anything (never hidden under a mount). Checked before anything is made.
 */
async function checkMountpoint(inputs: HostFilesystemInputs): Promise<boolean> {
  if (await mountedHere(inputs)) return true;
  const entries = await fs.readdir(inputs.mountpoint).catch((error: NodeJS.ErrnoException) => {
    if (error.code === "ENOENT") return [] as string[];
    throw error;
  });
  // An unmounted mountpoint is empty: the data directory is inside the image.
  if (entries.length > 0)
    throw new Error(
      `${inputs.mountpoint} is not empty (${entries.slice(0, 3).join(", ")}); refusing to mount ${inputs.imagePath} over it`,
    );
  return false;
}

/** Mounts the image at its (checked, empty or missing) mountpoint. */
async function mount(inputs: HostFilesystemInputs): Promise<void> {
  await fs.mkdir(inputs.mountpoint, { recursive: true, mode: 0o755 });
  await command("mount", ["-t", "ext4", "-o", "loop,nodev,nosuid", inputs.imagePath, inputs.mountpoint]);
}

/** The size of the ext4 filesystem on a device or image, from its superblock. */
async function filesystemBytes(deviceOrImage: string): Promise<number> {
  const header = await command("dumpe2fs", ["-h", deviceOrImage]);
  const field = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+)$`, "m").exec(header)?.[1]);
  return field("Block count") * field("Block size");
}

/**
 * Grows the image file, then the filesystem into it: online (mounted, in use) where the kernel lets this
 * process (it needs CAP_SYS_RESOURCE); where not, unmounted, only when nothing else holds it (a running
 * sandbox's mount namespace does): that is refused, naming why, and the filesystem is left as it was.
 * A shrink is refused: an ext4 filesystem in use is only ever grown.
 */
async function ensureSize(inputs: HostFilesystemInputs): Promise<void> {
  const fileBytes = (await fs.stat(inputs.imagePath)).size;
  if (inputs.sizeBytes < fileBytes)
    throw new Error(
      `${inputs.imagePath} is ${fileBytes} bytes and cannot shrink to ${inputs.sizeBytes}: an ext4 filesystem in use is only ever grown`,
    );
  const device = await mountedHere(inputs);
  if (!device)
    throw new Error(`${inputs.imagePath} must be mounted at ${inputs.mountpoint} to check its size`);
  if ((await filesystemBytes(device)) >= inputs.sizeBytes) return;
  if (fileBytes < inputs.sizeBytes) await fs.truncate(inputs.imagePath, inputs.sizeBytes);
  // The loop device takes the file's new size, then ext4 grows into it.
  await command("losetup", ["-c", device]);
  try {
    await command("resize2fs", [device]);
    return;
  } catch (error) {
    if (!/Permission denied to resize/.test((error as Error).message)) throw error;
  }
  await command("umount", [inputs.mountpoint]);
  const holders = await loopDevicesOf(inputs.imagePath);
  if (holders.length > 0) {
    // Still attached after the unmount: mounted elsewhere too. The same device again, never a second one.
    await command("mount", ["-o", "nodev,nosuid", holders[0]!, inputs.mountpoint]);
    throw new Error(
      `${inputs.imagePath} cannot grow to ${inputs.sizeBytes} bytes while in use (a running sandbox?): this host does not allow online growth (no CAP_SYS_RESOURCE); stop what uses it and apply again`,
    );
  }
  await command("e2fsck", ["-f", "-p", inputs.imagePath]);
  await command("resize2fs", [inputs.imagePath]);
  await command("mount", ["-t", "ext4", "-o", "loop,nodev,nosuid", inputs.imagePath, inputs.mountpoint]);
}

async function ensureData(inputs: HostFilesystemInputs): Promise<void> {
  const data = dataPathOf(inputs.mountpoint);
  await fs.mkdir(data, { recursive: true });
  await fs.chown(data, inputs.uid, inputs.gid);
  await fs.chmod(data, parseInt(inputs.mode, 8));
}

/**
 * The filesystem made, mounted, grown and its data directory set. A create's new image (the common case, on
 * the path of every cold create) has its size already: its superblock is not read back.
 */
async function apply(inputs: HostFilesystemInputs): Promise<HostFilesystemOutputs> {
  const uuid = filesystemUuid(inputs.imagePath);
  const mounted = await checkMountpoint(inputs);
  const formatted = await ensureImage(inputs, uuid);
  if (!mounted) await mount(inputs);
  if (!formatted) await ensureSize(inputs);
  await ensureData(inputs);
  return { ...inputs, uuid, dataPath: dataPathOf(inputs.mountpoint), mounted: true };
}

async function unmount(imagePath: string, mountpoint: string): Promise<void> {
  if (await mountedHere({ imagePath, mountpoint }).catch(() => undefined)) {
    try {
      await command("umount", [mountpoint]);
    } catch (error) {
      throw new Error(
        `${mountpoint} could not be unmounted (is a container still using it?): ${(error as Error).message}`,
      );
    }
  }
  // `mount -o loop` frees its device on unmount; a device left attached (a mount killed half-way) is freed here.
  // A device still listed may be freeing itself (the last holder of a copy of the mount, in another mount
  // namespace, just ended): already gone when detached is what was asked.
  for (const device of await loopDevicesOf(imagePath))
    await command("losetup", ["-d", device]).catch((error: Error) => {
      if (!/No such device or address/.test(error.message)) throw error;
    });
}

export const hostFilesystemHandler: ResourceHandler<HostFilesystemInputs, HostFilesystemOutputs> = {
  inputs: HostFilesystemInputs,

  async diff(_id, olds, news) {
    const changed = changedKeys(olds, news, ["imagePath", "mountpoint", "sizeBytes", "uid", "gid", "mode"]);
    return {
      changes: changed.length > 0 || olds.mounted === false,
      // A new image path is a new filesystem; everything else (a move, a larger size) is done in place.
      replaces: changedKeys(olds, news, ["imagePath"]),
    };
  },

  async create(inputs) {
    // A create run again after a kill finds its own image and finishes what is left.
    return { id: inputs.imagePath, outs: await apply(inputs) };
  },

  async read(id, olds) {
    const stat = await fs.stat(id).catch((error: NodeJS.ErrnoException) => {
      if (error.code === "ENOENT") return undefined;
      throw error;
    });
    if (!stat) return undefined;
    const uuid = (await imageUuid(id)) ?? "(none)";
    const mounted = (await mountAt(olds.mountpoint))?.backingFile === id;
    const data = mounted ? await fs.stat(dataPathOf(olds.mountpoint)).catch(() => undefined) : undefined;
    return {
      ...olds,
      uuid,
      sizeBytes: stat.size,
      mounted,
      // Unmounted, the data directory is not there to read: its owner and mode are the recorded ones.
      ...(data
        ? { uid: data.uid, gid: data.gid, mode: (data.mode & 0o777).toString(8).padStart(4, "0") }
        : {}),
    };
  },

  async update(id, olds, news) {
    if (olds.uuid !== filesystemUuid(id))
      throw new Error(
        `${id} holds filesystem ${olds.uuid}, not this resource's (${filesystemUuid(id)}); refusing to mount or resize it`,
      );
    if (news.sizeBytes < olds.sizeBytes)
      throw new Error(
        `${id} is ${olds.sizeBytes} bytes and cannot shrink to ${news.sizeBytes}: an ext4 filesystem in use is only ever grown`,
      );
    if (olds.mountpoint !== news.mountpoint) await unmount(id, olds.mountpoint);
    return apply(news);
  },

  async delete(id, olds) {
    await unmount(id, olds.mountpoint);
    await fs.rm(id, { force: true });
    await fs.rm(partialPath(id), { force: true });
    // A staged copy never taken over (a create that failed before it) goes with the image it was for.
    if (olds.copyFrom !== undefined && path.dirname(olds.copyFrom) === path.dirname(id))
      await fs.rm(olds.copyFrom, { force: true });
    await fs.rmdir(olds.mountpoint).catch((error: NodeJS.ErrnoException) => {
      if (error.code !== "ENOENT") throw error;
    });
    // The per-project directory goes with its last image.
    await fs.rmdir(path.dirname(id)).catch(() => undefined);
  },
};
