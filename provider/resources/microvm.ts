import { promises as fs } from "node:fs";
import * as net from "node:net";
import * as path from "node:path";
import { z } from "zod";
import { parseIPv4 } from "../../lib/ipv4.js";
import { exists } from "../../lib/files.js";
import { run } from "../../lib/process.js";
import {
  PROTECTED_PATH,
  consoleTail,
  deleteMicroVm,
  discardFirstBoot,
  dropMemory,
  ensureForwarder,
  guestStatus,
  type MicroVmSpec,
  microVmFiles,
  readMicroVm,
  startMicroVm,
  stopMicroVm,
} from "../../lib/microvm/launcher.js";
import { ensureRootfs } from "../../lib/microvm/rootfs.js";
import { recordBoot, resumeMicroVm, suspendMicroVm } from "../../lib/microvm/suspend.js";
import { changedKeys, type ResourceHandler } from "../handler.js";

const absolute = z.string().refine((p) => path.isAbsolute(p) && path.normalize(p) === p, {
  message: "must be an absolute, normalized path",
});

/**
 * A sandbox as a microVM: QEMU `-M microvm` booting the guest kernel with the sandbox image as
 * its root (a copy-on-write overlay of an ext4 export, lib/microvm/rootfs.ts), a home disk and a backup disk
 * kept across stop/start, a tap device on the tenant's bridge with the tenant's sandbox address. Ready when
 * the guest's sshd answers on `address:sshPort` from the host.
 */
export const MicroVmInputs = z
  .object({
    /** The VM's own directory (disks, console, pidfile, QMP socket): its identity. */
    stateDir: absolute.refine((p) => p.split("/").length > 3, {
      message: "must be at least three levels deep",
    }),
    /** The sandbox image (a local Docker image): its filesystem is the VM's root. */
    image: z.string().min(1),
    kernel: absolute,
    initrd: absolute,
    accelerator: z.enum(["kvm", "tcg"]),
    /** Nested virtualisation: the guest gets the host's CPU with this flag (`-cpu host,+vmx`); KVM only. */
    nested: z.enum(["vmx", "svm"]).optional(),
    vcpus: z.number().int().min(1).max(64),
    memoryMiB: z.number().int().min(128),
    homeSizeMiB: z.number().int().min(64),
    /**
     * A fork's home: its source's home disk, copied at one point and staged by the runtime in this VM's
     * directory (runtime/tenants/fork.ts), that the first boot takes over instead of an empty disk. Ignored
     * once the home disk exists (a later change is no change).
     */
    homeCopyFrom: absolute.optional(),
    backupSizeMiB: z.number().int().min(64).optional(),
    bridge: z.string().regex(/^[A-Za-z0-9_.-]{1,15}$/, { message: "must be a network interface name" }),
    address: z.string().refine(
      (a) => {
        const [ip, prefix] = a.split("/");
        return parseIPv4(ip ?? "") !== undefined && /^\d+$/.test(prefix ?? "") && Number(prefix) <= 32;
      },
      { message: "must be ADDR/PREFIX, an IPv4 address in the bridge's subnet" },
    ),
    gateway: z.string().refine((ip) => parseIPv4(ip) !== undefined, { message: "must be an IPv4 address" }),
    authorizedKeys: z
      .array(
        z.string().regex(/^ssh-[a-z0-9-]+ [A-Za-z0-9+/=]+( [^\n]*)?\n?$/, {
          message: "must be an OpenSSH public key",
        }),
      )
      .min(1, { message: "at least one key must be able to log in" }),
    /** Keys root may log in with, held to the guest's forced command (the platform's final backup). */
    rootKeys: z
      .array(
        z.string().regex(/^ssh-[a-z0-9-]+ [A-Za-z0-9+/=]+( [^\n]*)?\n?$/, {
          message: "must be an OpenSSH public key",
        }),
      )
      .default([]),
    env: z.record(z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/), z.string()).default({}),
    /** Files for the guest's /run/secrets (secret values: the resource marks them so). */
    files: z
      .record(
        z.string().regex(/^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$/, { message: "must be a file name" }),
        z.string(),
      )
      .default({}),
    /** Paths under /home/agent bind-mounted read-only over themselves at boot (the spec's protectedPaths). */
    protectedPaths: z
      .array(
        z.string().regex(PROTECTED_PATH, { message: "must be a path relative to /home/agent, without '..'" }),
      )
      .default([]),
    sshPort: z.number().int().min(1).max(65535).default(2222),
    /** The host port forwarded to the guest's sshd (as a container's published SSH port). */
    sshHostPort: z.number().int().min(1024).max(65535).optional(),
    running: z.boolean().default(true),
    /**
     * A stop keeps the VM's memory (lib/microvm/suspend.ts) and the next start resumes it where it was; a
     * start that cannot (a changed machine, a replaced root, a lost image) boots cold. Off: a stop is quit.
     */
    keepMemory: z.boolean().default(false),
    /** How long a boot may take to reach the guest's sshd (TCG on a loaded host is slow). */
    bootTimeoutMs: z.number().int().min(5_000).default(180_000),
  })
  .strict()
  .refine((inputs) => inputs.nested === undefined || inputs.accelerator === "kvm", {
    message: "needs accelerator kvm: TCG has no host CPU to hand on",
    path: ["nested"],
  });
export type MicroVmInputs = z.infer<typeof MicroVmInputs>;
export type MicroVmOutputs = MicroVmInputs & {
  /** The root filesystem the overlay is made over (one per image id, cached). */
  rootfs: string;
  tap: string;
  pid?: number;
  /** Read: which of its disks are there (a missing one is drift: the next update makes it again). */
  disks: { root: boolean; home: boolean; backup: boolean };
  /** Stopped with its memory kept: the next start resumes it (`keepMemory`). */
  suspended?: boolean;
  /** Read: qemu alive with its guest paused (a suspend or resume cut by a kill): the next update mends it. */
  frozen?: boolean;
};

/** What a boot takes: a change of any of these restarts the VM (its home and backup disks kept). */
const RESTART_ON_CHANGE = [
  "image",
  "kernel",
  "initrd",
  "accelerator",
  "nested",
  "vcpus",
  "memoryMiB",
  "homeSizeMiB",
  "backupSizeMiB",
  "bridge",
  "address",
  "gateway",
  "authorizedKeys",
  "rootKeys",
  "env",
  "sshPort",
  "sshHostPort",
  "files",
  "protectedPaths",
] as const;

/** The launcher's spec of the VM the inputs describe, over the root filesystem `rootfs`. */
export function launcherSpec(inputs: MicroVmInputs, rootfs: string): MicroVmSpec {
  return {
    stateDir: inputs.stateDir,
    kernel: inputs.kernel,
    initrd: inputs.initrd,
    rootfs,
    accelerator: inputs.accelerator,
    ...(inputs.nested === undefined ? {} : { nested: inputs.nested }),
    vcpus: inputs.vcpus,
    memoryMiB: inputs.memoryMiB,
    homeSizeMiB: inputs.homeSizeMiB,
    ...(inputs.homeCopyFrom === undefined ? {} : { homeCopyFrom: inputs.homeCopyFrom }),
    ...(inputs.backupSizeMiB === undefined ? {} : { backupSizeMiB: inputs.backupSizeMiB }),
    bridge: inputs.bridge,
    address: inputs.address,
    gateway: inputs.gateway,
    authorizedKeys: inputs.authorizedKeys,
    rootKeys: inputs.rootKeys,
    env: inputs.env,
    files: inputs.files,
    protectedPaths: inputs.protectedPaths,
    ...(inputs.sshHostPort === undefined ? {} : { sshHostPort: inputs.sshHostPort }),
  };
}

/** Until the guest's sshd sends its banner on `host:port`, as seen from the host. */
export async function waitForSshd(host: string, port: number, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = "";
  while (Date.now() < deadline) {
    last = await new Promise<string>((resolve) => {
      const socket = net.createConnection({ host, port });
      socket.setTimeout(3_000, () => socket.destroy(new Error("no banner within 3 s")));
      socket.once("data", (chunk) => {
        socket.destroy();
        resolve(
          chunk.toString().startsWith("SSH-") ? "" : `not an SSH banner: ${chunk.toString().slice(0, 40)}`,
        );
      });
      socket.once("error", (error) => resolve(error.message));
    });
    if (last === "") return;
    await new Promise((r) => setTimeout(r, 500));
  }
  throw new Error(`the guest's sshd did not answer on ${host}:${port} within ${timeoutMs} ms (${last})`);
}

/**
 * The root an image boots: a snapshot's qcow2 (runtime/tenants/microvm-snapshots.ts) is a file, named by its
 * absolute path; anything else is a local Docker image, exported once per image id.
 */
async function rootfsFor(image: string): Promise<string> {
  if (!path.isAbsolute(image)) return ensureRootfs(image);
  if (!image.endsWith(".qcow2") || !(await exists(image)))
    throw new Error(`image ${image}: no such microVM snapshot (a .qcow2 file of this host)`);
  return image;
}

/** Grows a stopped VM's ext4 disk to `sizeMiB`; a shrink is refused. */
async function growDisk(file: string, sizeMiB: number, what: string): Promise<void> {
  if (!(await exists(file))) return;
  const bytes = (await fs.stat(file)).size;
  const wanted = sizeMiB * 1024 * 1024;
  if (wanted < bytes)
    throw new Error(
      `${what} is ${bytes >> 20} MiB and cannot shrink to ${sizeMiB} MiB: a disk in use is only ever grown`,
    );
  if (wanted === bytes) return;
  await fs.truncate(file, wanted);
  // resize2fs wants a freshly checked filesystem; e2fsck exits 1 when it corrected something, which is fine.
  await run("bash", ["-c", 'e2fsck -f -y "$1" >/dev/null; [ $? -le 1 ]', "e2fsck", file]);
  await run("resize2fs", [file]);
}

/**
 * Boots the VM and waits for its sshd. The error of either carries the guest's console tail, on one line
 * (` | ` between lines): the engine reports a provider's error line by line, and the operation's error keeps
 * the first.
 */
async function boot(inputs: MicroVmInputs, rootfs: string, firstBoot: boolean): Promise<void> {
  const spec = launcherSpec(inputs, rootfs);
  try {
    const { resumed, coldReason }: { resumed: boolean; coldReason?: string } =
      inputs.keepMemory && !firstBoot
        ? await resumeMicroVm(spec, inputs.bootTimeoutMs)
        : { ...(await startMicroVm(spec, inputs.bootTimeoutMs)), resumed: false };
    // What the project's view says of this start: resumed, or booted from the disks and why (an image that
    // could not be used).
    await recordBoot(inputs.stateDir, { resumed, ...(coldReason ? { coldReason } : {}) });
    try {
      await waitForSshd(inputs.address.split("/")[0]!, inputs.sshPort, inputs.bootTimeoutMs);
    } catch (error) {
      const tail = await consoleTail(inputs.stateDir);
      if (firstBoot) await discardFirstBoot(spec);
      else await stopMicroVm(inputs.stateDir, 0);
      throw new Error(`the microVM booted but ${(error as Error).message}; console tail:\n${tail}`);
    }
  } catch (error) {
    throw new Error((error as Error).message.replace(/\s*\n\s*/g, " | "));
  }
}

/** Whether a VM whose qemu is alive has its guest paused (`guestStatus`): a suspend or resume a kill cut. */
async function frozen(stateDir: string, running: boolean): Promise<boolean> {
  if (!running) return false;
  const status = await guestStatus(stateDir);
  return status !== undefined && status !== "running";
}

async function observe(inputs: MicroVmInputs, rootfs: string): Promise<MicroVmOutputs> {
  const state = await readMicroVm(inputs.stateDir);
  const isFrozen = await frozen(inputs.stateDir, state.running);
  return {
    ...inputs,
    // A VM whose SSH port forwarder died is not wholly running: refresh reports it, and an update restarts it.
    // Nor is a frozen one (a suspend or resume cut by a kill): an update boots it again.
    running: state.running && state.forwarding && !isFrozen,
    rootfs,
    tap: state.tap,
    ...(state.pid === undefined ? {} : { pid: state.pid }),
    disks: { ...state.disks },
    ...(state.suspended ? { suspended: true } : {}),
    ...(isFrozen ? { frozen: true } : {}),
  };
}

export const microVmHandler: ResourceHandler<MicroVmInputs, MicroVmOutputs> = {
  inputs: MicroVmInputs,

  async diff(_id, olds, news) {
    const replaces = changedKeys(olds, news, ["stateDir"]);
    // keepMemory: a stopped VM's kept memory dropped (the platform's memory retention, a stop that drops it).
    const changed = changedKeys(olds, news, [...RESTART_ON_CHANGE, "running", "bootTimeoutMs", "keepMemory"]);
    // A disk that went missing (refresh saw it) is made again by the next update.
    const diskGone = olds.disks !== undefined && (!olds.disks.root || !olds.disks.home);
    return {
      changes: changed.length > 0 || replaces.length > 0 || diskGone || olds.frozen === true,
      replaces,
      deleteBeforeReplace: true,
    };
  },

  async create(inputs) {
    // The state directory is this resource's identity (one per project under the platform's root): a VM
    // already there is this resource's own, from a create killed before the engine recorded it. It is
    // stopped and booted again with these inputs, its disks kept, rather than refused forever or wiped.
    const adopted = await exists(microVmFiles(inputs.stateDir).state);
    if (adopted) {
      await stopMicroVm(inputs.stateDir, 0);
      // Its root may be over another image: made again from this one (a half-made VM's system state is
      // nobody's work); the home and backup disks stay.
      await dropMemory(inputs.stateDir);
      await fs.rm(microVmFiles(inputs.stateDir).overlay, { force: true });
    }
    const rootfs = await rootfsFor(inputs.image);
    await boot(inputs, rootfs, !adopted);
    if (!inputs.running) await stopMicroVm(inputs.stateDir);
    return { id: inputs.stateDir, outs: await observe(inputs, rootfs) };
  },

  async read(id, olds) {
    if (!(await exists(microVmFiles(id).state))) return undefined;
    return observe({ ...olds, stateDir: id }, olds.rootfs);
  },

  async update(id, olds, news) {
    // Refused before anything is stopped: a disk in use is only ever grown.
    for (const [what, from, to] of [
      ["the home disk", olds.homeSizeMiB, news.homeSizeMiB],
      ["the backup disk", olds.backupSizeMiB, news.backupSizeMiB],
    ] as const)
      if (from !== undefined && to !== undefined && to < from)
        throw new Error(
          `${what} is ${from} MiB and cannot shrink to ${to} MiB: a disk in use is only ever grown`,
        );
    const restart = changedKeys(olds, news, [...RESTART_ON_CHANGE]).length > 0;
    const diskGone = !olds.disks?.root || !olds.disks?.home;
    const state = await readMicroVm(id);
    let rootfs = olds.rootfs;
    // A frozen VM (a suspend or a resume a kill cut: qemu alive, its guest paused) that should run is quit
    // and booted again: from its image if one is whole (a cut resume dropped its own before the guest ran),
    // else cold. One that should stop is suspended again, the guest's memory as it was paused.
    const stop = state.running && (restart || diskGone || !news.running || (await frozen(id, true)));
    // A plain stop keeps the memory where asked; a stop for a change (or a lost disk) is a quit: the VM
    // comes back changed, which its memory would not fit. A failed save is a plain stop.
    if (stop && !restart && !diskGone && !news.running && news.keepMemory)
      await suspendMicroVm(id).catch(async () => await stopMicroVm(id));
    else if (stop) await stopMicroVm(id);
    if (restart || diskGone || !news.keepMemory) await dropMemory(id);
    if (news.image !== olds.image || !(await exists(rootfs))) {
      rootfs = await rootfsFor(news.image);
      // A new image is a new root (as a container is replaced on one); the home and backup disks are kept.
      await dropMemory(id);
      await fs.rm(microVmFiles(id).overlay, { force: true });
    }
    const files = microVmFiles(id);
    if (news.homeSizeMiB !== olds.homeSizeMiB) await growDisk(files.home, news.homeSizeMiB, "the home disk");
    if (news.backupSizeMiB !== undefined && news.backupSizeMiB !== olds.backupSizeMiB)
      await growDisk(files.backup, news.backupSizeMiB, "the backup disk");
    if (news.running && (stop || !state.running)) await boot({ ...news, stateDir: id }, rootfs, false);
    else if (news.running) {
      await ensureForwarder(id);
      // A VM left running may still be booting (one a killed provider started): running means its sshd answers.
      await waitForSshd(news.address.split("/")[0]!, news.sshPort, news.bootTimeoutMs);
    }
    return observe({ ...news, stateDir: id }, rootfs);
  },

  async delete(id) {
    await deleteMicroVm(id);
  },
};
