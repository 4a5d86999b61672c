// The microVM backend's host layer (issue 19), with real QEMU: the accelerator probe on this machine (nested
// KVM here hangs once a kernel leaves real mode: ENVIRONMENT.md) and the sandbox image as a root filesystem.
import { execFile } from "node:child_process";
import { promises as fs } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { probeAccelerator } from "../../lib/microvm/probe.js";

const exec = promisify(execFile);
const KVM_TIMEOUT_MS = 4_000;

let kernelDir: string;
let cacheDir: string;

beforeAll(async () => {
  const { stdout } = await exec("bash", [path.resolve("scripts/microvm-kernel.sh")], { timeout: 300_000 });
  kernelDir = stdout.trim().split("\n").at(-1)!;
  cacheDir = await fs.mkdtemp(path.join(os.tmpdir(), "microvm-test-"));
}, 300_000);

afterAll(async () => {
  if (cacheDir) await fs.rm(cacheDir, { recursive: true, force: true });
});

describe("the guest kernel from the package archive", () => {
  it("is Debian's cloud kernel with an initramfs, cached per package version", async () => {
    expect(path.basename(kernelDir)).toMatch(/^kernel-linux-image-[0-9.]+-\d+-cloud-amd64-/);
    const config = await fs.readFile(path.join(kernelDir, "config"), "utf8");
    // Why the initramfs exists: these are modules in this kernel, not built in.
    expect(config).toMatch(/^CONFIG_VIRTIO_BLK=m$/m);
    expect((await fs.stat(path.join(kernelDir, "initrd.img"))).size).toBeGreaterThan(100_000);
    const again = await exec("bash", [path.resolve("scripts/microvm-kernel.sh")]);
    expect(again.stdout.trim()).toBe(kernelDir);
  });
});

describe("the accelerator probe", () => {
  it("decides within a bounded time, says why, and caches the decision for this boot", async () => {
    const started = Date.now();
    const decision = await probeAccelerator({
      kernel: path.join(kernelDir, "vmlinuz"),
      kvmTimeoutMs: KVM_TIMEOUT_MS,
      cacheDir,
    });
    const elapsed = Date.now() - started;
    // KVM's budget, then at most TCG's own boot of the test kernel (about 2 s here) and qemu's start-up.
    expect(elapsed).toBeLessThan(KVM_TIMEOUT_MS + 30_000);
    expect(decision.qemuVersion).toMatch(/^QEMU emulator version \d+\.\d+/);
    expect(["kvm", "tcg"]).toContain(decision.accelerator);
    if (decision.accelerator === "tcg") {
      expect(decision.reason).toMatch(
        new RegExp(
          `kvm did not run the test guest within ${KVM_TIMEOUT_MS} ms|/dev/kvm is missing|kvm failed`,
        ),
      );
      expect(decision.reason).toMatch(/tcg ran the test guest in \d+ ms/);
    }
    const bootId = (await fs.readFile("/proc/sys/kernel/random/boot_id", "utf8")).trim();
    expect(decision.bootId).toBe(bootId);
    console.log(`probe: ${decision.accelerator} in ${elapsed} ms: ${decision.reason}`);

    const cachedStarted = Date.now();
    const cached = await probeAccelerator({ kernel: path.join(kernelDir, "vmlinuz"), cacheDir });
    expect(cached).toEqual(decision);
    expect(Date.now() - cachedStarted).toBeLessThan(2_000);
    const { stdout } = await exec("pgrep", ["-f", "root=/dev/nonexistent"]).catch(() => ({ stdout: "" }));
    expect(stdout.trim()).toBe("");
  }, 60_000);

  it("falls back to tcg, with the reason, when there is no KVM device", async () => {
    const decision = await probeAccelerator({
      kernel: path.join(kernelDir, "vmlinuz"),
      kvmDevice: "/dev/no-such-kvm",
      cacheDir: null,
    });
    expect(decision.accelerator).toBe("tcg");
    expect(decision.reason).toMatch(/^\/dev\/no-such-kvm is missing or not usable/);
  }, 60_000);

  it("refuses with a clear reason on a host without QEMU", async () => {
    const decision = await probeAccelerator({
      kernel: path.join(kernelDir, "vmlinuz"),
      qemu: "qemu-system-not-installed",
      cacheDir,
    });
    expect(decision.accelerator).toBe("none");
    expect(decision.reason).toBe(
      "QEMU is not installed: no qemu-system-not-installed on PATH (Debian package qemu-system-x86)",
    );
  });

  it("names a missing guest kernel", async () => {
    await expect(probeAccelerator({ kernel: "/nonexistent/vmlinuz", cacheDir: null })).rejects.toThrow(
      "the guest kernel /nonexistent/vmlinuz does not exist (run scripts/microvm-kernel.sh)",
    );
  });
});
