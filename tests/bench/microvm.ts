// Benchmark (issue 19): a microVM tenant's create-to-running (its whole tenant stack's first `up` through the
// Automation API: keypair, bridge, firewall rules, Squid allowlist, the sandbox:vm:MicroVM up to its sshd
// answering) and boot-to-sshd of the platform's microVM alone (lib/microvm/launcher.ts: overlay, disks, tap
// on a bridge, the sandbox entrypoint up to sshd), beside a bare `qemu-system-x86_64 -M microvm` boot of the
// same kernel, initramfs and root filesystem to the hand-over to init, measured in the same run; the
// accelerator is named (the probe's decision); the memory of an idle VM's qemu (RSS and PSS); and (issue 44)
// each VM suspended with its memory and resumed to an answering sshd, beside its own cold boot.
// Prints figures; asserts nothing (npm run bench).
import { execFile, spawn } from "node:child_process";
import { promises as fs } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { promisify } from "node:util";
import {
  configDisk,
  deleteMicroVm,
  readMicroVm,
  startMicroVm,
  type MicroVmSpec,
} from "../../lib/microvm/launcher.js";
import { squidPaths } from "../../lib/host/squid.js";
import { createTenant, destroyTenant } from "../../runtime/tenants/stack.js";
import { isolatedSquidHost } from "../helpers/host.js";
import { probeAccelerator, tcgTimingParameters } from "../../lib/microvm/probe.js";
import { resumeMicroVm, suspendMicroVm } from "../../lib/microvm/suspend.js";
import { ensureRootfs } from "../../lib/microvm/rootfs.js";
import { waitFor } from "../../lib/process.js";
import { buildSandboxImage } from "../../sandbox-image/build.js";
import { testBridge } from "../helpers/bridge.js";
import { sshOptions } from "../helpers/containers.js";
import { percentile, report, type Figure } from "./report.js";

const exec = promisify(execFile);
const ROUNDS = Number(process.env.BENCH_MICROVM_ROUNDS ?? 3);
const MEMORY_MIB = 384;

async function bareBootMs(
  kernelDir: string,
  rootfs: string,
  accelerator: "kvm" | "tcg",
  config: string,
): Promise<number> {
  const timing = accelerator === "tcg" ? await tcgTimingParameters() : [];
  const started = performance.now();
  const child = spawn(
    "qemu-system-x86_64",
    [
      ...["-M", "microvm", "-accel", accelerator, "-m", String(MEMORY_MIB), "-nodefaults", "-no-user-config"],
      ...["-display", "none", "-serial", "stdio", "-no-reboot", "-snapshot"],
      ...["-kernel", path.join(kernelDir, "vmlinuz"), "-initrd", path.join(kernelDir, "initrd.img")],
      ...["-append", ["console=ttyS0 panic=-1 quiet", ...timing].join(" ")],
      ...["-drive", `id=root,file=${rootfs},format=raw,if=none`, "-device", "virtio-blk-device,drive=root"],
      ...["-drive", `id=home,file=${rootfs},format=raw,if=none`, "-device", "virtio-blk-device,drive=home"],
      // The configuration disk the guest's init reads (one authorized key; no environment).
      ...["-drive", `id=config,file=${config},format=raw,if=none,readonly=on`],
      ...["-device", "virtio-blk-device,drive=config"],
    ],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  let output = "";
  try {
    return await new Promise<number>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`bare boot: no init after 120 s:\n${output}`)),
        120_000,
      );
      child.stdout.on("data", (chunk: Buffer) => {
        output += chunk.toString();
        if (output.includes("starting the sandbox entrypoint")) {
          clearTimeout(timer);
          resolve(performance.now() - started);
        }
      });
      child.once("exit", () => reject(new Error(`bare boot: qemu exited:\n${output}`)));
    });
  } finally {
    child.kill("SIGKILL");
  }
}

async function memoryKiB(pid: number): Promise<{ rss: number; pss: number }> {
  const rollup = await fs.readFile(`/proc/${pid}/smaps_rollup`, "utf8");
  const field = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, "m").exec(rollup)?.[1] ?? NaN);
  return { rss: field("Rss"), pss: field("Pss") };
}

async function main(): Promise<void> {
  const { stdout } = await exec("bash", ["scripts/microvm-kernel.sh"], { timeout: 300_000 });
  const kernelDir = stdout.trim().split("\n").at(-1)!;
  const decision = await probeAccelerator({ kernel: path.join(kernelDir, "vmlinuz") });
  if (decision.accelerator === "none") throw new Error(decision.reason);
  const accelerator = decision.accelerator;
  console.log(`accelerator: ${accelerator} (${decision.reason})`);
  const image = (await buildSandboxImage({ base: "local", log: () => undefined })).tag;
  const rootfs = await ensureRootfs(image);

  const work = await fs.mkdtemp(path.join(os.tmpdir(), "bench-microvm-"));
  const keyFile = path.join(work, "id_ed25519");
  await exec("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", keyFile]);
  const { name: bridge, remove: removeBridge } = await testBridge("10.251.78.1/24");
  const bare: number[] = [];
  const platform: number[] = [];
  const tenant: number[] = [];
  const config = path.join(work, "config.raw");
  const publicKey = (await fs.readFile(`${keyFile}.pub`, "utf8")).trim();
  await fs.writeFile(config, configDisk({ authorizedKeys: [publicKey] }));
  const rss: number[] = [];
  const pss: number[] = [];
  const suspend: number[] = [];
  const resume: number[] = [];
  const imageMiB: number[] = [];
  try {
    for (let round = 0; round < ROUNDS; round++) {
      bare.push(await bareBootMs(kernelDir, rootfs, accelerator, config));
      const spec: MicroVmSpec = {
        stateDir: path.join(work, `vm-${round}`),
        kernel: path.join(kernelDir, "vmlinuz"),
        initrd: path.join(kernelDir, "initrd.img"),
        rootfs,
        accelerator,
        vcpus: 1,
        memoryMiB: MEMORY_MIB,
        homeSizeMiB: 256,
        bridge,
        address: "10.251.78.10/24",
        gateway: "10.251.78.1",
        authorizedKeys: [await fs.readFile(`${keyFile}.pub`, "utf8")],
      };
      const started = performance.now();
      try {
        await startMicroVm(spec);
        await waitFor("sshd", 180_000, async () => {
          await exec("ssh", [...sshOptions(3), "-i", keyFile, "-p", "2222", "agent@10.251.78.10", "true"]);
          return true;
        });
        platform.push(performance.now() - started);
        await new Promise((resolve) => setTimeout(resolve, 5_000)); // idle
        const memory = await memoryKiB((await readMicroVm(spec.stateDir)).pid!);
        rss.push(memory.rss / 1024);
        pss.push(memory.pss / 1024);
        // Suspended with its memory, then resumed to an answering sshd (issue 44): beside the cold boot above.
        const saved = await suspendMicroVm(spec.stateDir);
        suspend.push(saved.ms);
        imageMiB.push(saved.bytes / (1024 * 1024));
        const resumeStarted = performance.now();
        const resumed = await resumeMicroVm(spec);
        if (!resumed.resumed) throw new Error(`the resume booted cold: ${resumed.coldReason}`);
        await waitFor("sshd after the resume", 180_000, async () => {
          await exec("ssh", [...sshOptions(3), "-i", keyFile, "-p", "2222", "agent@10.251.78.10", "true"]);
          return true;
        });
        resume.push(performance.now() - resumeStarted);
      } finally {
        await deleteMicroVm(spec.stateDir);
      }
      console.log(
        `round ${round + 1}: bare boot to init ${bare.at(-1)!.toFixed(0)} ms, platform boot to sshd ` +
          `${platform.at(-1)!.toFixed(0)} ms, idle qemu RSS ${rss.at(-1)!.toFixed(0)} MiB PSS ${pss.at(-1)!.toFixed(0)} MiB, ` +
          `suspend ${suspend.at(-1)!.toFixed(0)} ms (${imageMiB.at(-1)!.toFixed(0)} MiB image, the RSS freed), ` +
          `resume to sshd ${resume.at(-1)!.toFixed(0)} ms`,
      );
    }
  } finally {
    await removeBridge();
    await fs.rm(work, { recursive: true, force: true });
  }
  tenant.push(...(await tenantCreates(image, kernelDir, accelerator, publicKey)));
  const figures: Figure[] = [
    {
      figure: `microVM tenant create → running (${accelerator}, whole tenant stack, 1024 MiB, 1 vCPU)`,
      unit: "ms",
      p50: percentile(tenant, 50),
      tail: { label: "max", value: Math.max(...tenant) },
      baseline: { label: "bare qemu -M microvm boot to init", p50: percentile(bare, 50) },
      samples: tenant.length,
    },
    {
      figure: `microVM boot to sshd (${accelerator}, ${MEMORY_MIB} MiB, 1 vCPU)`,
      unit: "ms",
      p50: percentile(platform, 50),
      tail: { label: "max", value: Math.max(...platform) },
      baseline: { label: "bare qemu -M microvm boot to init", p50: percentile(bare, 50) },
      samples: platform.length,
    },
    {
      figure: `microVM resume with its memory to sshd (${accelerator}, ${MEMORY_MIB} MiB)`,
      unit: "ms",
      p50: percentile(resume, 50),
      tail: { label: "max", value: Math.max(...resume) },
      baseline: { label: "its cold boot to sshd", p50: percentile(platform, 50) },
      goal: accelerator === "tcg" ? "≤ 1500 ms (TCG)" : "≤ 1000 ms",
      samples: resume.length,
    },
    {
      figure: `microVM suspend with its memory (image p50 ${percentile(imageMiB, 50).toFixed(0)} MiB; qemu's RSS freed)`,
      unit: "ms",
      p50: percentile(suspend, 50),
      tail: { label: "max", value: Math.max(...suspend) },
      samples: suspend.length,
    },
    {
      figure: `idle microVM qemu RSS (${MEMORY_MIB} MiB guest; PSS p50 ${percentile(pss, 50).toFixed(0)} MiB)`,
      unit: "MiB",
      p50: percentile(rss, 50),
      samples: rss.length,
    },
  ];
  report("microvm", figures);
}

/**
 * Creates of a microVM tenant's whole stack (the platform's tenant program through the Automation API, as the
 * reconciler runs it) until `createTenant` returns: the provider has seen the guest's sshd answer. Each is
 * destroyed after.
 */
async function tenantCreates(
  image: string,
  kernelDir: string,
  accelerator: "kvm" | "tcg",
  platformKey: string,
): Promise<number[]> {
  const squid = await isolatedSquidHost();
  const host = squid.host;
  const options = {
    backendUrl: `file://${path.join(host.dataDir, "state")}`,
    workRoot: path.join(host.dataDir, "work"),
    passphrase: "benchmark",
  };
  await fs.mkdir(path.join(host.dataDir, "state"), { recursive: true });
  const times: number[] = [];
  try {
    for (let round = 0; round < ROUNDS; round++) {
      const projectId = `bench-microvm-${round}`;
      const started = performance.now();
      try {
        await createTenant(
          {
            projectId,
            ownerId: "bench",
            mode: "local",
            image,
            subnet: `10.234.${240 + round}.0/24`,
            sshHostPort: 27740 + round,
            allowlist: ["example.test"],
            host: {
              squidPort: host.squidPort,
              squidConfigFile: squidPaths(host).config,
              squidFragmentsDir: squidPaths(host).fragmentsDir,
              backupRoot: path.join(host.dataDir, "backups"),
            },
            homeBytes: 256 << 20,
            backupBytes: 320 << 20,
            backend: "microvm",
            microvm: {
              kernel: path.join(kernelDir, "vmlinuz"),
              initrd: path.join(kernelDir, "initrd.img"),
              accelerator,
              stateRoot: path.join(host.dataDir, "microvm", "vms"),
              platformKey,
            },
          },
          options,
        );
        times.push(performance.now() - started);
        console.log(`tenant ${round + 1}: create → running ${times.at(-1)!.toFixed(0)} ms`);
      } finally {
        await destroyTenant(projectId, options).catch((error: Error) => console.log(error.message));
      }
    }
  } finally {
    await squid.stop();
  }
  return times;
}

await main();
