import { createHash } from "node:crypto";
import { promises as fs } from "node:fs";
import * as path from "node:path";
import { livePid, run, startDaemon, waitFor } from "../process.js";
import { nestedCpuModel, type NestedCpuFlag } from "./nested.js";
import { QEMU_BINARY, tcgTimingParameters } from "./probe.js";
import { qmpExecute } from "./qmp.js";
import { exists, writeFileAtomic } from "../files.js";

/** One microVM: what it boots, its size and where it sits on the network. */
export interface MicroVmSpec {
  /** Its own directory: overlay, home disk, console log, pidfile, QMP socket, state file. */
  readonly stateDir: string;
  readonly kernel: string;
  readonly initrd: string;
  /** The sandbox image's raw ext4 root (lib/microvm/rootfs.ts); the VM writes to a qcow2 overlay of it. */
  readonly rootfs: string;
  readonly accelerator: "kvm" | "tcg";
  /**
   * Nested virtualisation (lib/microvm/nested.ts): the guest gets the host's CPU with this flag, and with the
   * nested initramfs as its `initrd` it loads KVM and lets the agent open /dev/kvm. Under KVM only.
   */
  readonly nested?: NestedCpuFlag;
  readonly vcpus: number;
  readonly memoryMiB: number;
  readonly homeSizeMiB: number;
  /**
   * A fork's home (runtime/tenants/fork.ts): its source's home disk, copied at one point and staged by the
   * runtime, which the first boot takes over (moved into place, its journal replayed) instead of an empty
   * disk. Ignored once the home disk exists; a first boot that fails puts it back where it was staged.
   */
  readonly homeCopyFrom?: string;
  /** The Linux bridge its tap device joins (a tenant's Docker network bridge). */
  readonly bridge: string;
  /** `ADDR/PREFIX` in the bridge's subnet, and that subnet's gateway. */
  readonly address: string;
  readonly gateway: string;
  /** OpenSSH public keys that may log in as the agent (the project's and the platform's). */
  readonly authorizedKeys: readonly string[];
  /**
   * OpenSSH public keys that may log in as root, each held to the guest's forced command
   * (/usr/local/sbin/sandbox-platform-command: the platform's final backup, nothing else). The platform's.
   */
  readonly rootKeys?: readonly string[];
  /** The sandbox entrypoint's environment (proxy, project id, backup schedule), as a container's. */
  readonly env?: Readonly<Record<string, string>>;
  /**
   * Files for `/run/secrets` (the project's secrets and their `agent.env`), root-owned and readable, as a
   * container's read-only mount of its secrets directory. Rewritten at each boot.
   */
  readonly files?: Readonly<Record<string, string>>;
  /**
   * Paths under /home/agent the agent may not change (a repository's `.git/hooks`): bind-mounted read-only
   * over themselves at boot, as a container gets read-only bind mounts of them. Each must exist then.
   */
  readonly protectedPaths?: readonly string[];
  /** A third disk of this size, mounted at /mnt/backup (the local backup location), kept by `stop`. */
  readonly backupSizeMiB?: number;
  /**
   * The host port that reaches the guest's sshd (2222), on every address as a container's published port:
   * a forwarder process beside qemu, started and stopped with it.
   */
  readonly sshHostPort?: number;
}

export interface MicroVmState {
  readonly spec: MicroVmSpec;
  readonly tap: string;
  readonly pid: number | undefined;
  readonly running: boolean;
  /** Whether the SSH port forwarder runs (true when the VM has no `sshHostPort`). */
  readonly forwarding: boolean;
  /** Stopped with its memory kept (lib/microvm/suspend.ts): the next start may resume it. */
  readonly suspended: boolean;
  readonly disks: { readonly root: boolean; readonly home: boolean; readonly backup: boolean };
}

/** TCG's translation block cache per VM, in MiB (QEMU's default is 1024). */
export const TCG_TB_CACHE_MIB = 128;

/** The files of a VM's state directory. */
export const microVmFiles = (dir: string) => ({
  overlay: path.join(dir, "root.qcow2"),
  home: path.join(dir, "home.ext4"),
  backup: path.join(dir, "backup.ext4"),
  config: path.join(dir, "config.raw"),
  console: path.join(dir, "console.log"),
  qemuLog: path.join(dir, "qemu.log"),
  pid: path.join(dir, "qemu.pid"),
  qmp: path.join(dir, "qmp.sock"),
  state: path.join(dir, "state.json"),
  forwardPid: path.join(dir, "ssh-forward.pid"),
  forwardLog: path.join(dir, "ssh-forward.log"),
  /** A suspended VM's memory and device state (qemu's migration stream), and what it was saved from. */
  memory: path.join(dir, "memory.state"),
  memoryInfo: path.join(dir, "memory.json"),
  /** How its latest start went (lib/microvm/suspend.ts `recordBoot`): resumed, or cold and why. */
  boot: path.join(dir, "boot.json"),
});

/** The forwarder's process name (`/proc/<pid>/comm`), so its pidfile is never taken for another process. */
const FORWARDER_NAME = "sbx-ssh-forward";

/**
 * A TCP forwarder from `0.0.0.0:<port>` to the guest's sshd, run by node as a daemon (no socat here):
 * argv is the port, the guest's address and port.
 */
const FORWARDER = `
process.title = ${JSON.stringify(FORWARDER_NAME)};
const net = require("node:net");
const [port, host, target] = process.argv.slice(1).map((a, i) => (i === 1 ? a : Number(a)));
const server = net.createServer((client) => {
  const upstream = net.connect({ host, port: target });
  const close = () => { client.destroy(); upstream.destroy(); };
  for (const s of [client, upstream]) { s.on("error", close); s.on("close", close); }
  client.pipe(upstream).pipe(client);
});
server.on("error", (error) => { console.error(error.message); process.exit(1); });
server.listen(port, "0.0.0.0", () => console.log("forwarding " + port + " to " + host + ":" + target));
`;

/** Starts the SSH port forwarder when the VM has a port and none runs; throws when the port is taken. */
export async function ensureForwarder(stateDir: string): Promise<void> {
  const f = microVmFiles(stateDir);
  const spec = JSON.parse(await fs.readFile(f.state, "utf8")) as MicroVmSpec;
  if (spec.sshHostPort === undefined || (await livePid(f.forwardPid, FORWARDER_NAME)) !== undefined) return;
  await fs.rm(f.forwardLog, { force: true });
  const guest = spec.address.split("/")[0]!;
  await startDaemon(
    process.execPath,
    ["-e", FORWARDER, String(spec.sshHostPort), guest, "2222"],
    f.forwardLog,
    f.forwardPid,
  );
  await waitFor(`the SSH forwarder on port ${spec.sshHostPort}`, 10_000, async () => {
    const log = await fs.readFile(f.forwardLog, "utf8").catch(() => "");
    if (log.includes("forwarding")) return true;
    if ((await livePid(f.forwardPid)) === undefined)
      throw new Error(
        `port ${spec.sshHostPort} cannot be forwarded to the guest's sshd: ${log.trim() || "the forwarder exited"}`,
      );
    return undefined;
  });
}

async function stopForwarder(stateDir: string): Promise<void> {
  const f = microVmFiles(stateDir);
  const pid = await livePid(f.forwardPid, FORWARDER_NAME);
  if (pid !== undefined) {
    process.kill(pid, "SIGKILL");
    await waitFor("the SSH forwarder's exit", 5_000, async () =>
      (await livePid(f.forwardPid, FORWARDER_NAME)) === undefined ? true : undefined,
    );
  }
  await fs.rm(f.forwardPid, { force: true });
}

/** The tap device's name: at most 15 bytes (IFNAMSIZ), derived from the state directory. */
export function tapName(stateDir: string): string {
  return `mvt${createHash("sha256").update(path.resolve(stateDir)).digest("hex").slice(0, 10)}`;
}

/**
 * A sparse file reads as zeros, so the inode tables and journal need not be written now: a 10 GiB disk costs
 * a few MiB of the host's until it is used (as sandbox:host:Filesystem's images).
 */
const LAZY = ["-E", "nodiscard,lazy_itable_init=1,lazy_journal_init=1"] as const;

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
const FILE_NAME = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$/;
/** A path under /home/agent: relative, no `..`, plain characters (the tenant spec's `protectedPaths`). */
export const PROTECTED_PATH = /^(?!\/)(?!.*(^|\/)\.\.(\/|$))[A-Za-z0-9._/-]{1,1024}$/;

/**
 * The guest's configuration disk (/dev/vdc): one line per item, values base64 so nothing needs quoting —
 * `env NAME VALUE` for the entrypoint's environment, `key VALUE` per authorized key, `rootkey VALUE` per key
 * root's forced command allows, `file NAME VALUE` per file of /run/secrets, `protect PATH` per protected
 * path — padded with NULs to whole 4 KiB blocks. Written at every start, so a changed key or environment
 * holds from the next boot.
 * Kept off the kernel command line: that is readable by every process in the guest (/proc/cmdline) and
 * limited to 2 KiB.
 */
export function configDisk(
  spec: Pick<MicroVmSpec, "env" | "authorizedKeys" | "rootKeys" | "files" | "protectedPaths">,
): Buffer {
  const b64 = (text: string) => Buffer.from(text).toString("base64");
  const lines = [
    ...Object.entries(spec.env ?? {}).map(([name, value]) => `env ${name} ${b64(value)}`),
    ...spec.authorizedKeys.map((key) => `key ${b64(key.trim())}`),
    ...(spec.rootKeys ?? []).map((key) => `rootkey ${b64(key.trim())}`),
    ...Object.entries(spec.files ?? {}).map(([name, content]) => `file ${name} ${b64(content)}`),
    ...(spec.protectedPaths ?? []).map((relative) => `protect ${b64(relative)}`),
  ];
  const text = Buffer.from(`${lines.join("\n")}\n`);
  const padded = Buffer.alloc(Math.ceil(text.length / 4096) * 4096);
  text.copy(padded);
  return padded;
}

/** Bad input named before anything is made. */
export async function validateMicroVmSpec(spec: MicroVmSpec): Promise<void> {
  for (const [field, file] of [
    ["kernel", spec.kernel],
    ["initrd", spec.initrd],
    ["rootfs", spec.rootfs],
  ] as const) {
    await fs.access(file).catch(() => {
      throw new Error(`${field}: ${file} does not exist`);
    });
  }
  const meminfo = await fs.readFile("/proc/meminfo", "utf8");
  const hostMiB = Math.floor(Number(/^MemTotal:\s+(\d+) kB/m.exec(meminfo)?.[1] ?? 0) / 1024);
  if (!Number.isInteger(spec.memoryMiB) || spec.memoryMiB < 128 || spec.memoryMiB > hostMiB) {
    throw new Error(`memoryMiB: ${spec.memoryMiB} MiB is outside 128..${hostMiB} (the host's memory)`);
  }
  if (!Number.isInteger(spec.vcpus) || spec.vcpus < 1) throw new Error(`vcpus: ${spec.vcpus} is not ≥ 1`);
  if (spec.nested !== undefined && spec.accelerator !== "kvm")
    throw new Error(`nested: ${spec.nested} needs accelerator kvm (TCG has no host CPU to hand on)`);
  if (!/^\d+\.\d+\.\d+\.\d+\/\d+$/.test(spec.address))
    throw new Error(`address: ${spec.address} is not ADDR/PREFIX`);
  if (
    spec.sshHostPort !== undefined &&
    (!Number.isInteger(spec.sshHostPort) || spec.sshHostPort < 1024 || spec.sshHostPort > 65535)
  )
    throw new Error(`sshHostPort: ${spec.sshHostPort} is outside 1024-65535`);
  if (spec.authorizedKeys.length === 0) throw new Error("authorizedKeys: none given");
  for (const [field, keys] of [
    ["authorizedKeys", spec.authorizedKeys],
    ["rootKeys", spec.rootKeys ?? []],
  ] as const)
    for (const key of keys)
      if (!/^ssh-[a-z0-9-]+ [A-Za-z0-9+/=]+( [^\n]*)?\n?$/.test(key))
        throw new Error(`${field}: ${JSON.stringify(key.slice(0, 40))} is not an OpenSSH public key`);
  for (const name of Object.keys(spec.files ?? {}))
    if (!FILE_NAME.test(name)) throw new Error(`files: ${JSON.stringify(name)} is not a file name`);
  for (const relative of spec.protectedPaths ?? [])
    if (!PROTECTED_PATH.test(relative))
      throw new Error(`protectedPaths: ${JSON.stringify(relative)} is not a path relative to /home/agent`);
  for (const name of Object.keys(spec.env ?? {}))
    if (!ENV_NAME.test(name)) throw new Error(`env: ${JSON.stringify(name)} is not a variable name`);
  if (!Number.isInteger(spec.homeSizeMiB) || spec.homeSizeMiB < 64)
    throw new Error(`homeSizeMiB: ${spec.homeSizeMiB} is not a whole number ≥ 64`);
  if (spec.homeCopyFrom !== undefined && !path.isAbsolute(spec.homeCopyFrom))
    throw new Error(`homeCopyFrom: ${spec.homeCopyFrom} is not an absolute path`);
  if (spec.backupSizeMiB !== undefined && (!Number.isInteger(spec.backupSizeMiB) || spec.backupSizeMiB < 64))
    throw new Error(`backupSizeMiB: ${spec.backupSizeMiB} is not a whole number ≥ 64`);
  await fs.access(`/sys/class/net/${spec.bridge}/bridge`).catch(() => {
    throw new Error(`bridge: ${spec.bridge} is not a Linux bridge on this host`);
  });
}

/**
 * Boots the VM and waits until its init handed over to the sandbox entrypoint (the caller then waits for
 * sshd on `address`). A VM that does not get there is torn down (process, tap, overlay, files) and the
 * error carries the console's tail. The home disk is made on first boot and kept by `stop`.
 */
export async function startMicroVm(spec: MicroVmSpec, bootTimeoutMs = 120_000): Promise<MicroVmState> {
  await validateMicroVmSpec(spec);
  const f = microVmFiles(spec.stateDir);
  const firstBoot = !(await exists(f.state));
  await fs.mkdir(spec.stateDir, { recursive: true, mode: 0o700 });
  // A cold boot moves the disks on: a memory image kept from before would not fit them again.
  await dropMemory(spec.stateDir);
  try {
    if (!(await exists(f.overlay))) {
      // A snapshot's root (a qcow2 of its changes over the image's ext4) or the image's own ext4.
      const format = spec.rootfs.endsWith(".qcow2") ? "qcow2" : "raw";
      await run("qemu-img", ["create", "-q", "-f", "qcow2", "-b", spec.rootfs, "-F", format, f.overlay]);
    }
    if (!(await exists(f.home))) {
      if (spec.homeCopyFrom !== undefined) await adoptHomeCopy(spec.homeCopyFrom, f.home);
      else {
        const partial = `${f.home}.partial`;
        await run("mkfs.ext4", ["-q", "-F", "-L", "sandbox-home", ...LAZY, partial, `${spec.homeSizeMiB}M`]);
        await fs.rename(partial, f.home);
      }
    }
    if (spec.backupSizeMiB !== undefined && !(await exists(f.backup))) {
      const partial = `${f.backup}.partial`;
      // The agent's (uid 1000): sandbox-backup runs rclone as the agent.
      await run("mkfs.ext4", [
        ...["-q", "-F", "-L", "sandbox-backup", "-E", `root_owner=1000:1000,${LAZY[1]}`],
        ...[partial, `${spec.backupSizeMiB}M`],
      ]);
      await fs.rename(partial, f.backup);
    }
    await fs.writeFile(f.config, configDisk(spec), { mode: 0o600 });
    await writeFileAtomic(f.state, `${JSON.stringify(spec, null, 2)}\n`, "0600");
    await launchQemu(spec);
    await untilBooted(f, bootTimeoutMs);
    await ensureForwarder(spec.stateDir);
  } catch (error) {
    const tail = await consoleTail(spec.stateDir);
    if (firstBoot) await discardFirstBoot(spec);
    else await stopMicroVm(spec.stateDir, 0);
    throw new Error(`the microVM did not boot (${(error as Error).message}); console tail:\n${tail}`);
  }
  return await readMicroVm(spec.stateDir);
}

/**
 * The home disk made from a fork's staged copy: moved to `<home>.partial` (a rename: it is staged beside it),
 * checked (`e2fsck -p` replays the journal of a copy taken from a running guest; exit 1 is "corrected") and
 * renamed into place. A boot killed after the move finds the partial disk and finishes it. A staged copy gone
 * with nothing partial left is an error, never an empty home in its place.
 */
async function adoptHomeCopy(copyFrom: string, home: string): Promise<void> {
  const partial = `${home}.partial`;
  if (await exists(copyFrom)) {
    await fs.rm(partial, { force: true });
    await fs.rename(copyFrom, partial);
  } else if (!(await exists(partial)))
    throw new Error(
      `${copyFrom}, the copy to make the home disk from, is gone and no partial copy is left; refusing to make an empty home in its place`,
    );
  await run("bash", ["-c", 'e2fsck -f -p "$1" >&2; [ $? -le 1 ]', "e2fsck", partial], 300_000).catch(
    (error: Error) => {
      throw new Error(
        `the home disk copied from ${copyFrom} is not a sound ext4 filesystem: ${error.message}`,
      );
    },
  );
  await fs.rename(partial, home);
}

/**
 * A first boot that failed, undone: the VM's process, tap and files removed, except that a fork's home (its
 * `homeCopyFrom`, taken over or half taken over) goes back where it was staged, for the create's next try.
 */
export async function discardFirstBoot(spec: MicroVmSpec): Promise<void> {
  if (spec.homeCopyFrom === undefined) return deleteMicroVm(spec.stateDir);
  const f = microVmFiles(spec.stateDir);
  await stopMicroVm(spec.stateDir, 0);
  for (const taken of [f.home, `${f.home}.partial`])
    if ((await exists(taken)) && !(await exists(spec.homeCopyFrom)))
      await fs.rename(taken, spec.homeCopyFrom);
  await deleteMicroVm(spec.stateDir, spec.homeCopyFrom);
}

/**
 * Its tap device joined to the bridge, then qemu started as a daemon (its pidfile written) with `extra`
 * arguments after the VM's own (`-incoming` for a resume). Its console and qemu's log start empty.
 */
export async function launchQemu(spec: MicroVmSpec, extra: readonly string[] = []): Promise<void> {
  const f = microVmFiles(spec.stateDir);
  const tap = tapName(spec.stateDir);
  await run("ip", ["tuntap", "add", "dev", tap, "mode", "tap"]).catch(async (error: Error) => {
    if (!(await exists(`/sys/class/net/${tap}`))) throw error;
  });
  await run("ip", ["link", "set", tap, "master", spec.bridge, "up"]);
  await fs.rm(f.console, { force: true });
  await fs.rm(f.qemuLog, { force: true });
  const timing = spec.accelerator === "tcg" ? await tcgTimingParameters() : [];
  await startDaemon(QEMU_BINARY, [...qemuArgs(spec, tap, timing), ...extra], f.qemuLog, f.pid);
}

/** Removes a kept memory image (lib/microvm/suspend.ts): its disks are about to change, or it is not wanted. */
export async function dropMemory(stateDir: string): Promise<void> {
  const f = microVmFiles(stateDir);
  await fs.rm(f.memory, { force: true });
  await fs.rm(f.memoryInfo, { force: true });
  // A suspend's partial image, left by one that was cut (never used: only a whole one is renamed in place).
  await fs.rm(`${f.memory}.partial`, { force: true });
}

/** Until the guest's init hands over to the entrypoint; throws at once when the VM stops or its init fails. */
async function untilBooted(f: ReturnType<typeof microVmFiles>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const console = await fs.readFile(f.console, "utf8").catch(() => "");
    if (console.includes("starting the sandbox entrypoint")) return;
    if (/sandbox-init: ERROR|Kernel panic/.test(console)) throw new Error("its init failed");
    if ((await livePid(f.pid, QEMU_BINARY)) === undefined) throw new Error("qemu exited");
    if (Date.now() > deadline) throw new Error(`no hand-over to the entrypoint within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

/** qemu's arguments for the VM on tap device `tap`, with TCG's timing parameters on its command line. */
export function qemuArgs(spec: MicroVmSpec, tap: string, timing: readonly string[]): string[] {
  const f = microVmFiles(spec.stateDir);
  const mac = `52:54:00:${createHash("sha256").update(tap).digest("hex").slice(0, 6).match(/../g)!.join(":")}`;
  const cmdline = [
    "console=ttyS0",
    "panic=-1",
    "quiet",
    // No IPv6 in the guest, as none in a container (its Docker network has IPv6 off): nothing but the
    // tenant's IPv4 address reaches the bridge.
    "ipv6.disable=1",
    `sandbox.ip=${spec.address}`,
    `sandbox.gw=${spec.gateway}`,
    ...(spec.backupSizeMiB === undefined ? [] : ["sandbox.backup=1"]),
    ...timing,
  ].join(" ");
  return [
    ...[
      "-M",
      "microvm",
      "-accel",
      // TCG's translation cache defaults to 1 GiB, filled by whatever code the guest runs over its life: an
      // emulated VM's host memory would reach its own size plus that. Bounded, it is retranslated instead.
      spec.accelerator === "tcg" ? `tcg,tb-size=${TCG_TB_CACHE_MIB}` : spec.accelerator,
      ...(spec.nested === undefined ? [] : ["-cpu", nestedCpuModel(spec.nested)]),
      "-smp",
      String(spec.vcpus),
      "-m",
      String(spec.memoryMiB),
    ],
    ...["-nodefaults", "-no-user-config", "-display", "none", "-no-reboot"],
    ...["-serial", `file:${f.console}`, "-qmp", `unix:${f.qmp},server=on,wait=off`],
    ...["-kernel", spec.kernel, "-initrd", spec.initrd, "-append", cmdline],
    // In this order the guest sees them as /dev/vda (root), vdb (home), vdc (configuration), vdd (backup).
    ...[
      "-drive",
      `id=root,file=${f.overlay},format=qcow2,if=none`,
      "-device",
      "virtio-blk-device,drive=root",
    ],
    ...["-drive", `id=home,file=${f.home},format=raw,if=none`, "-device", "virtio-blk-device,drive=home"],
    ...[
      "-drive",
      `id=config,file=${f.config},format=raw,if=none,readonly=on`,
      "-device",
      "virtio-blk-device,drive=config",
    ],
    ...(spec.backupSizeMiB === undefined
      ? []
      : [
          "-drive",
          `id=backup,file=${f.backup},format=raw,if=none`,
          "-device",
          "virtio-blk-device,drive=backup",
        ]),
    ...["-netdev", `tap,id=net0,ifname=${tap},script=no,downscript=no`],
    ...["-device", `virtio-net-device,netdev=net0,mac=${mac}`],
  ];
}

/**
 * qemu's run state of the VM's guest (`running`, `paused`, `inmigrate`, `postmigrate`, ...), or undefined when
 * QMP does not answer (no qemu, or not at once: nothing is concluded from silence). A live qemu whose guest
 * is not `running` is frozen: a suspend or a resume cut by a kill left it paused.
 */
export async function guestStatus(stateDir: string): Promise<string | undefined> {
  const status = (await qmpExecute(microVmFiles(stateDir).qmp, "query-status", undefined, 2_000).catch(
    () => undefined,
  )) as { status?: string } | undefined;
  return status?.status;
}

/** What is there: the process (alive and qemu's), its recorded configuration, its disks. */
export async function readMicroVm(stateDir: string): Promise<MicroVmState> {
  const f = microVmFiles(stateDir);
  const spec = JSON.parse(await fs.readFile(f.state, "utf8")) as MicroVmSpec;
  const pid = await livePid(f.pid, QEMU_BINARY);
  return {
    spec,
    tap: tapName(stateDir),
    pid,
    running: pid !== undefined,
    forwarding: spec.sshHostPort === undefined || (await livePid(f.forwardPid, FORWARDER_NAME)) !== undefined,
    suspended: pid === undefined && (await exists(f.memory)),
    disks: {
      root: await exists(f.overlay),
      home: await exists(f.home),
      backup: spec.backupSizeMiB !== undefined && (await exists(f.backup)),
    },
  };
}

/**
 * QMP `quit`: qemu flushes and closes its disks and exits (a SIGKILL could lose the overlay's cached qcow2
 * metadata); SIGKILL after `graceMs`. The guest is not asked to shut down (its PID 1 is supervisord, with no
 * ACPI handler): what it had not written back is lost, which the home's `commit=1` mount bounds to about a
 * second. The disks stay.
 */
export async function stopMicroVm(stateDir: string, graceMs = 10_000): Promise<void> {
  const f = microVmFiles(stateDir);
  const pid = await livePid(f.pid, QEMU_BINARY);
  if (pid !== undefined && graceMs > 0) {
    await qmpExecute(f.qmp, "quit").catch(() => undefined);
    await waitFor("the microVM's exit on quit", graceMs, async () =>
      (await livePid(f.pid, QEMU_BINARY)) === undefined ? true : undefined,
    ).catch(() => undefined);
  }
  const left = await livePid(f.pid, QEMU_BINARY);
  if (left !== undefined) {
    process.kill(left, "SIGKILL");
    await waitFor("the microVM's exit", 10_000, async () =>
      (await livePid(f.pid, QEMU_BINARY)) === undefined ? true : undefined,
    );
  }
  await fs.rm(f.pid, { force: true });
  await fs.rm(f.qmp, { force: true });
  await stopForwarder(stateDir);
}

/**
 * Stops it and removes everything it had: tap device, overlay, home disk, log, pidfile, state; all but `keep`
 * where that is a file of its directory.
 */
export async function deleteMicroVm(stateDir: string, keep?: string): Promise<void> {
  await stopMicroVm(stateDir, 0);
  const tap = tapName(stateDir);
  if (await exists(`/sys/class/net/${tap}`)) await run("ip", ["link", "del", tap]);
  if (keep === undefined || path.dirname(keep) !== stateDir || !(await exists(keep))) {
    await fs.rm(stateDir, { recursive: true, force: true });
    return;
  }
  // Everything but `keep` (a fork's staged home, for its create's next try).
  for (const entry of await fs.readdir(stateDir))
    if (path.join(stateDir, entry) !== keep)
      await fs.rm(path.join(stateDir, entry), { recursive: true, force: true });
}

/** The last lines of the guest's serial console, then of qemu's own output (its errors land there). */
export async function consoleTail(stateDir: string, lines = 30): Promise<string> {
  const f = microVmFiles(stateDir);
  const console = await fs.readFile(f.console, "utf8").catch(() => "");
  const qemu = await fs.readFile(f.qemuLog, "utf8").catch(() => "");
  const tail = (text: string) => text.trimEnd().split("\n").slice(-lines).join("\n");
  return `${tail(console) || "(no console output)"}\n--- qemu:\n${tail(qemu) || "(nothing)"}`;
}

/** One QMP command to a running VM (`stop` pauses its vCPUs after draining and flushing its disks, `cont`). */
export async function qmpCommand(stateDir: string, command: "stop" | "cont" | "quit"): Promise<void> {
  await qmpExecute(microVmFiles(stateDir).qmp, command);
}
