import { spawn } from "node:child_process";
import { promises as fs } from "node:fs";
import * as path from "node:path";
import { writeFileAtomic } from "../files.js";
import { run } from "../process.js";
import { microvmCacheDir } from "./rootfs.js";

/** How the microVM backend runs guests on this host (seed FR-018..FR-020). */
export type Accelerator = "kvm" | "tcg" | "none";

export interface AcceleratorDecision {
  readonly accelerator: Accelerator;
  /** Why: "kvm ran the test guest", "kvm did not answer within 3000 ms (nested virtualisation?)", ... */
  readonly reason: string;
  readonly qemuPath?: string;
  readonly qemuVersion?: string;
  /** The host boot the decision was made in (a reboot can change what KVM does). */
  readonly bootId: string;
  readonly probedAt: string;
  readonly probeMs: number;
}

export interface ProbeOptions {
  /** How long KVM gets to run the test guest; it is killed (SIGKILL) when it does not finish. */
  readonly kvmTimeoutMs?: number;
  readonly qemu?: string;
  readonly kvmDevice?: string;
  /** The guest kernel (scripts/microvm-kernel.sh's vmlinuz), booted as the test guest. */
  readonly kernel: string;
  /** Where the decision is cached per host boot; `null` skips the cache. */
  readonly cacheDir?: string | null;
}

export const QEMU_BINARY = "qemu-system-x86_64";
const DEFAULT_KVM_TIMEOUT_MS = 10_000;
/**
 * The test guest is the guest kernel itself, booted with no root disk: it runs through early boot (long
 * mode, paging, interrupts, the console) and panics at the root mount; `panic=-1 -no-reboot` turns that
 * into qemu exiting 0. A trivial real-mode test is not enough: nested KVM here runs one (in ~70 ms) yet
 * hangs as soon as the kernel leaves real mode (ENVIRONMENT.md), so only a kernel boot is trusted.
 */
const PANIC_LINE = /Kernel panic|VFS: Unable to mount root/;

/**
 * Under TCG the guest's TSC is the host's, but the kernel calibrates it against the PIT, and that races the
 * emulator's timing: on a busy host it fails ("tsc: Unable to calibrate against PIT"), and with neither HPET
 * nor ACPI PM timer on the microvm machine the fallback never finishes: the guest hangs before init with an
 * empty console (about 1 boot in 12 here, the flake the microVM tests once had, the probe's TCG test guest included). Giving the kernel the host's
 * TSC frequency skips the calibration (`tsc_early_khz`), and the delay loop's value from it (`lpj`, at the
 * Debian kernel's HZ=250) skips the jiffies wait. KVM guests learn the frequency from the hypervisor.
 *
 * `tsc=reliable` keeps the TSC as the guest's clock. Without it the kernel's clocksource watchdog checks the
 * TSC against the jiffies, which an emulated CPU that a busy host does not schedule loses: on such a host it
 * marks the TSC unstable a second into the boot ("the skew is too large") and switches to `refined-jiffies`,
 * and the guest's clock then falls behind the host's for the VM's life (1 s in 30 with two busy cores here;
 * 40 s by the time a VM of the suite stopped, so its final backup looked older than the stop).
 */
export async function tcgTimingParameters(): Promise<string[]> {
  const cpuinfo = await fs.readFile("/proc/cpuinfo", "utf8").catch(() => "");
  const mhz = Number(/^cpu MHz\s*:\s*([0-9.]+)$/m.exec(cpuinfo)?.[1]);
  if (!Number.isFinite(mhz) || mhz < 100) return [];
  const khz = Math.round(mhz * 1000);
  return [`tsc_early_khz=${khz}`, `lpj=${khz * 4}`, "tsc=reliable"];
}

export interface TestGuestResult {
  readonly exitStatus: number | null;
  readonly timedOut: boolean;
  readonly output: string;
  readonly ms: number;
}

/** Runs the test guest under `accel` and kills it after `timeoutMs`; never waits longer than that + 1 s. */
export async function runTestGuest(
  qemu: string,
  accel: "kvm" | "tcg",
  kernel: string,
  timeoutMs: number,
): Promise<TestGuestResult> {
  const timing = accel === "tcg" ? await tcgTimingParameters() : [];
  const started = Date.now();
  const args = [
    "-M",
    "microvm",
    "-accel",
    accel,
    "-nodefaults",
    "-no-user-config",
    "-display",
    "none",
    "-m",
    "128",
    "-serial",
    "stdio",
    "-no-reboot",
    "-kernel",
    kernel,
    "-append",
    ["console=ttyS0 panic=-1 root=/dev/nonexistent quiet loglevel=1", ...timing].join(" "),
  ];
  const child = spawn(qemu, args, { stdio: ["ignore", "pipe", "pipe"] });
  let output = "";
  return await new Promise<TestGuestResult>((resolve) => {
    let settled = false;
    let killed = false;
    const finish = (exitStatus: number | null, timedOut: boolean): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve({ exitStatus, timedOut, output: output.trim(), ms: Date.now() - started });
    };
    // The panic line is the proof: decide on it at once. After it the guest's reboot path can take several
    // seconds under TCG (1.4-8.3 s measured here), which a loaded machine stretches past any budget.
    const seen = (chunk: Buffer) => {
      output += chunk.toString();
      if (!settled && PANIC_LINE.test(output)) {
        child.kill("SIGKILL");
        finish(0, false);
      }
    };
    child.stdout.on("data", seen);
    child.stderr.on("data", seen);
    const timer = setTimeout(() => {
      killed = true;
      child.kill("SIGKILL");
      // A process stuck in the kernel (a KVM ioctl) may take a while to die: do not wait for it.
      setTimeout(() => finish(null, true), 1_000).unref();
    }, timeoutMs);
    child.once("error", (error) => {
      output += error.message;
      finish(null, false);
    });
    // "close", not "exit": the console lines (the panic that proves the boot) may still be in the pipe at exit.
    child.once("close", (code) => finish(code, killed));
  });
}

/**
 * KVM when it runs a guest here, else TCG, else "none" with the reason (no QEMU). Bounded: at most
 * `kvmTimeoutMs` + about 1 s, and cached per host boot so the runtime's start-up and /healthz pay it once.
 */
export async function probeAccelerator(options: ProbeOptions): Promise<AcceleratorDecision> {
  const started = Date.now();
  const bootId = (await fs.readFile("/proc/sys/kernel/random/boot_id", "utf8")).trim();
  const qemu = options.qemu ?? QEMU_BINARY;
  const cacheDir = options.cacheDir === undefined ? microvmCacheDir() : options.cacheDir;
  const decide = (
    accelerator: Accelerator,
    reason: string,
    qemuPath?: string,
    qemuVersion?: string,
  ): AcceleratorDecision => ({
    accelerator,
    reason,
    ...(qemuPath === undefined ? {} : { qemuPath, qemuVersion }),
    bootId,
    probedAt: new Date().toISOString(),
    probeMs: Date.now() - started,
  });

  const qemuPath = await resolveCommand(qemu);
  if (qemuPath === undefined) {
    return decide("none", `QEMU is not installed: no ${qemu} on PATH (Debian package qemu-system-x86)`);
  }
  const qemuVersion = (await run(qemuPath, ["--version"], 10_000)).stdout.split("\n")[0]!.trim();

  const cacheFile = cacheDir === null ? undefined : path.join(cacheDir, `accelerator-${bootId}.json`);
  if (cacheFile !== undefined) {
    const cached = await readCached(cacheFile);
    if (cached?.qemuPath === qemuPath && cached.qemuVersion === qemuVersion) return cached;
  }

  await fs.access(options.kernel).catch(() => {
    throw new Error(`the guest kernel ${options.kernel} does not exist (run scripts/microvm-kernel.sh)`);
  });
  const decision = await decideWithKernel(
    qemuPath,
    qemuVersion,
    options.kernel,
    options.kvmDevice ?? "/dev/kvm",
    options.kvmTimeoutMs ?? DEFAULT_KVM_TIMEOUT_MS,
    decide,
  );
  if (cacheFile !== undefined && decision.accelerator !== "none") {
    await writeFileAtomic(cacheFile, `${JSON.stringify(decision)}\n`, "0644");
  }
  return decision;
}

async function decideWithKernel(
  qemuPath: string,
  qemuVersion: string,
  kernel: string,
  kvmDevice: string,
  kvmTimeoutMs: number,
  decide: (a: Accelerator, reason: string, p?: string, v?: string) => AcceleratorDecision,
): Promise<AcceleratorDecision> {
  let kvmReason: string;
  try {
    await fs.access(kvmDevice, fs.constants.R_OK | fs.constants.W_OK);
    const kvm = await runTestGuest(qemuPath, "kvm", kernel, kvmTimeoutMs);
    if (booted(kvm)) {
      return decide("kvm", `kvm ran the test guest in ${kvm.ms} ms`, qemuPath, qemuVersion);
    }
    kvmReason = kvm.timedOut
      ? `kvm did not run the test guest within ${kvmTimeoutMs} ms (nested virtualisation?); killed it`
      : `kvm failed (exit ${kvm.exitStatus}): ${tail(kvm.output)}`;
  } catch {
    kvmReason = `${kvmDevice} is missing or not usable by this user`;
  }
  const tcg = await runTestGuest(qemuPath, "tcg", kernel, 30_000);
  if (!booted(tcg)) {
    return decide(
      "none",
      `${kvmReason}, and tcg did not run the test guest either (exit ${tcg.exitStatus}): ${tail(tcg.output)}`,
      qemuPath,
      qemuVersion,
    );
  }
  return decide("tcg", `${kvmReason}; tcg ran the test guest in ${tcg.ms} ms`, qemuPath, qemuVersion);
}

async function resolveCommand(command: string): Promise<string | undefined> {
  const candidates = command.includes("/")
    ? [command]
    : (process.env.PATH ?? "").split(path.delimiter).map((dir) => path.join(dir, command));
  for (const candidate of candidates) {
    try {
      await fs.access(candidate, fs.constants.X_OK);
      return candidate;
    } catch {
      // keep looking
    }
  }
  return undefined;
}

async function readCached(file: string): Promise<AcceleratorDecision | undefined> {
  try {
    return JSON.parse(await fs.readFile(file, "utf8")) as AcceleratorDecision;
  } catch {
    return undefined;
  }
}

const booted = (result: TestGuestResult): boolean =>
  result.exitStatus === 0 && PANIC_LINE.test(result.output);
const tail = (text: string): string => text.split("\n").slice(-3).join(" | ") || "(no output)";
