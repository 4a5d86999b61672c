// A microVM suspended with its memory: its vCPUs stopped (disks drained and flushed), its RAM and device
// state written by qemu's own migration to a file beside its disks, then qemu quit. A resume starts qemu
// waiting for that stream (`-incoming`), and the guest goes on where it stopped: its processes, their
// memory, its open files and terminals. A memory image is used once, only with the disks it was saved
// with and the same machine; anything else (a changed size, a missing or cut file) boots cold from the disks,
// and the answer says so.
import { createHash } from "node:crypto";
import { promises as fs } from "node:fs";
import { exists, writeFileAtomic } from "../files.js";
import { livePid, waitFor } from "../process.js";
import {
  configDisk,
  consoleTail,
  dropMemory,
  ensureForwarder,
  guestStatus,
  launchQemu,
  microVmFiles,
  readMicroVm,
  startMicroVm,
  stopMicroVm,
  validateMicroVmSpec,
  type MicroVmSpec,
  type MicroVmState,
} from "./launcher.js";
import { QEMU_BINARY } from "./probe.js";
import { qmpExecute } from "./qmp.js";

/** What memory.json says of a memory image: the machine it fits, its size, when it was written. */
interface MemoryInfo {
  readonly fingerprint: string;
  readonly bytes: number;
  readonly savedAt: string;
}

/**
 * What a memory image must be restored into: the same kernel, initrd, root image, accelerator, CPU, vCPUs,
 * memory, disks and configuration disk (keys, environment, secrets): a change to any of them boots cold.
 */
export function machineFingerprint(spec: MicroVmSpec): string {
  return createHash("sha256")
    .update(
      JSON.stringify({
        kernel: spec.kernel,
        initrd: spec.initrd,
        rootfs: spec.rootfs,
        accelerator: spec.accelerator,
        // Only when set, so the images of VMs without it still fit them.
        ...(spec.nested === undefined ? {} : { nested: spec.nested }),
        vcpus: spec.vcpus,
        memoryMiB: spec.memoryMiB,
        homeSizeMiB: spec.homeSizeMiB,
        // The guest's network is configured in its memory: the same address, gateway and bridge.
        address: spec.address,
        gateway: spec.gateway,
        bridge: spec.bridge,
        backup: spec.backupSizeMiB !== undefined,
        config: createHash("sha256").update(configDisk(spec)).digest("hex"),
      }),
    )
    .digest("hex");
}

/** A path as one word of `exec:`'s shell command (state directories hold no quote). */
const quoted = (file: string) => `'${file.replace(/'/g, "'\\''")}'`;

/** Until qemu's migration reports an end: completed returns; failed or cancelled throws. */
async function migrationEnded(socket: string, what: string, timeoutMs: number): Promise<void> {
  await waitFor(what, timeoutMs, async () => {
    const info = (await qmpExecute(socket, "query-migrate")) as { status?: string; "error-desc"?: string };
    if (info.status === "completed") return true;
    if (info.status === "failed" || info.status === "cancelled")
      throw new Error(`${what} ${info.status}${info["error-desc"] ? `: ${info["error-desc"]}` : ""}`);
    return undefined;
  });
}

/**
 * Suspends a running VM with its memory: stopped, its state written to memory.state (through a partial
 * file: a cut one is never taken for whole), then quit. Returns the image's size and how long it took. When
 * the save fails the VM is resumed where it was and the error thrown: nothing is lost.
 */
export async function suspendMicroVm(
  stateDir: string,
  timeoutMs = 300_000,
): Promise<{ bytes: number; ms: number }> {
  const started = Date.now();
  const f = microVmFiles(stateDir);
  const { spec, running } = await readMicroVm(stateDir);
  if (!running) throw new Error(`the microVM in ${stateDir} is not running: there is no memory to keep`);
  const partial = `${f.memory}.partial`;
  await fs.rm(partial, { force: true });
  // A guest a cut suspend left paused (its migration completed: qemu has let go of its disks) or a cut resume
  // left waiting: it runs on a moment first, so that this save is of a guest that owns its disks again.
  const status = await guestStatus(stateDir);
  if (status && status !== "running") await qmpExecute(f.qmp, "cont").catch(() => undefined);
  await qmpExecute(f.qmp, "stop");
  try {
    await qmpExecute(f.qmp, "migrate", { uri: `exec:cat > ${quoted(partial)}` });
    await migrationEnded(f.qmp, "the memory's save", timeoutMs);
  } catch (error) {
    await fs.rm(partial, { force: true });
    await qmpExecute(f.qmp, "cont").catch(() => undefined);
    throw error;
  }
  const { size } = await fs.stat(partial);
  const info: MemoryInfo = {
    fingerprint: machineFingerprint(spec),
    bytes: size,
    savedAt: new Date().toISOString(),
  };
  await writeFileAtomic(f.memoryInfo, `${JSON.stringify(info, null, 2)}\n`, "0600");
  // qemu quits before the image counts: a VM that ran on after its save (its disks moving on) never leaves
  // one behind. Cut here, the partial file is ignored and the next start boots cold from the disks.
  await stopMicroVm(stateDir);
  await fs.rename(partial, f.memory);
  return { bytes: size, ms: Date.now() - started };
}

/**
 * The memory image in `stateDir` as written (its size and save time), whatever machine it fits; undefined
 * when there is none whole: no image, no description, or a size other than the one written.
 */
export async function savedMemory(stateDir: string): Promise<{ bytes: number; savedAt: Date } | undefined> {
  const f = microVmFiles(stateDir);
  const [info, stat] = await Promise.all([
    readMemoryInfo(f.memoryInfo),
    fs.stat(f.memory).catch(() => undefined),
  ]);
  return info && stat?.size === info.bytes
    ? { bytes: info.bytes, savedAt: new Date(info.savedAt) }
    : undefined;
}

const readMemoryInfo = (file: string): Promise<MemoryInfo | undefined> =>
  fs
    .readFile(file, "utf8")
    .then((text) => JSON.parse(text) as MemoryInfo)
    .catch(() => undefined);

/** The memory image kept for `spec`, if there is one it fits; otherwise why not (undefined: none at all). */
export async function keptMemory(
  spec: MicroVmSpec,
): Promise<{ usable: boolean; why?: string; savedAt?: Date } | undefined> {
  const f = microVmFiles(spec.stateDir);
  if (!(await exists(f.memory))) return undefined;
  const info = await readMemoryInfo(f.memoryInfo);
  if (!info) return { usable: false, why: "its description (memory.json) is missing or unreadable" };
  const { size } = await fs.stat(f.memory);
  if (size !== info.bytes)
    return { usable: false, why: `it is ${size} bytes where ${info.bytes} were written` };
  if (info.fingerprint !== machineFingerprint(spec))
    return { usable: false, why: "the VM's machine or configuration changed since it was saved" };
  return { usable: true, savedAt: new Date(info.savedAt) };
}

/**
 * A resumed guest's clock is behind the host's by as long as it slept, until its clock keeper (the initramfs
 * init's sandbox-clock) steps it to the RTC, which it does when they part by more than 2 s: after a longer
 * sleep than this, the resume waits for the keeper's line on the console.
 */
export const CLOCK_STEP_AFTER_MS = 3_000;
const CLOCK_STEP_TIMEOUT_MS = 20_000;

/**
 * Starts the VM: from its kept memory when it has one that fits (`resumed: true`), else by booting from its
 * disks (`resumed: false`, and `coldReason` when there was an image that could not be used). The image is
 * removed either way, before the guest runs: the disks move on from there, and it would not fit them again.
 */
export async function resumeMicroVm(
  spec: MicroVmSpec,
  bootTimeoutMs = 120_000,
): Promise<MicroVmState & { resumed: boolean; coldReason?: string }> {
  await validateMicroVmSpec(spec);
  const f = microVmFiles(spec.stateDir);
  const kept = await keptMemory(spec);
  let coldReason = kept?.why;
  if (kept?.usable) {
    try {
      await writeFileAtomic(f.state, `${JSON.stringify(spec, null, 2)}\n`, "0600");
      await launchQemu(spec, ["-S", "-incoming", `exec:cat ${quoted(f.memory)}`]);
      await waitFor("the memory's restore", bootTimeoutMs, async () => {
        if ((await livePid(f.pid, QEMU_BINARY)) === undefined) throw new Error("qemu exited");
        const status = (await qmpExecute(f.qmp, "query-status").catch(() => undefined)) as
          { status?: string } | undefined;
        if (!status?.status || status.status === "inmigrate") return undefined;
        if (status.status !== "paused" && status.status !== "prelaunch")
          throw new Error(`qemu is ${status.status} after the restore`);
        return true;
      });
      // The image is in qemu now; it goes before the guest runs, so a running guest never has an image
      // beside it that its disks will move past (a resume cut between here and `cont` leaves a frozen qemu
      // and no image: the provider's next update boots it cold).
      await dropMemory(spec.stateDir);
      // Nothing is written to the console before `cont`: what the guest says from here on is after it.
      const consoleFrom = await fs.stat(f.console).then(
        (stat) => stat.size,
        () => 0,
      );
      await qmpExecute(f.qmp, "cont");
      if (kept.savedAt && Date.now() - kept.savedAt.getTime() > CLOCK_STEP_AFTER_MS)
        await waitFor(
          "the guest's clock set to the host's after the restore",
          CLOCK_STEP_TIMEOUT_MS,
          async () =>
            /sandbox-clock: stepped/.test(await textFrom(f.console, consoleFrom)) ? true : undefined,
        );
      await ensureForwarder(spec.stateDir);
      return { ...(await readMicroVm(spec.stateDir)), resumed: true };
    } catch (error) {
      coldReason = `the restore failed (${(error as Error).message}); console tail:\n${await consoleTail(spec.stateDir, 5)}`;
      await stopMicroVm(spec.stateDir, 0);
    }
  }
  // A cold boot drops the image that could not be used.
  const state = await startMicroVm(spec, bootTimeoutMs);
  return { ...state, resumed: false, ...(coldReason ? { coldReason } : {}) };
}

/** How the VM's latest start went: from its kept memory, or from its disks (and why, when an image was there). */
export interface BootRecord {
  readonly resumed: boolean;
  readonly coldReason?: string;
  readonly at: string;
}

/** Records how the VM just started, for the project's view (`last_start`). */
export async function recordBoot(
  stateDir: string,
  boot: { resumed: boolean; coldReason?: string },
): Promise<void> {
  const record: BootRecord = { ...boot, at: new Date().toISOString() };
  await writeFileAtomic(microVmFiles(stateDir).boot, `${JSON.stringify(record)}\n`, "0600");
}

/** How the VM's latest start went, or undefined (none recorded, or unreadable). */
export async function lastBoot(stateDir: string): Promise<BootRecord | undefined> {
  return fs
    .readFile(microVmFiles(stateDir).boot, "utf8")
    .then((text) => JSON.parse(text) as BootRecord)
    .catch(() => undefined);
}

/** A file's text from byte `offset` on (all of it when it is shorter: written anew). */
async function textFrom(file: string, offset: number): Promise<string> {
  const text = await fs.readFile(file).catch(() => Buffer.alloc(0));
  return text.subarray(text.length < offset ? 0 : offset).toString("utf8");
}
