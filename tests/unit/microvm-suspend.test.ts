// Which kept memory image a microVM's start may resume from (lib/microvm/suspend.ts, keptMemory): one that
// fits the machine and is whole; a cut image, a lost or unreadable description and a changed machine or
// configuration are named, so the start boots cold and says why. The resume itself, with real QEMU:
// tests/integration/microvm.test.ts.
import { promises as fs } from "node:fs";
import { tmpdir } from "node:os";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { microVmFiles, type MicroVmSpec } from "../../lib/microvm/launcher.js";
import { keptMemory, machineFingerprint } from "../../lib/microvm/suspend.js";

let dir: string;
let spec: MicroVmSpec;
const files = () => microVmFiles(spec.stateDir);

/** An image of `bytes` bytes and a description saying `described` bytes, for `forSpec`'s machine. */
async function keep(bytes: number, described = bytes, forSpec: MicroVmSpec = spec): Promise<void> {
  await fs.writeFile(files().memory, Buffer.alloc(bytes, 7));
  const info = {
    fingerprint: machineFingerprint(forSpec),
    bytes: described,
    savedAt: new Date().toISOString(),
  };
  await fs.writeFile(files().memoryInfo, JSON.stringify(info));
}

beforeAll(async () => {
  dir = await fs.mkdtemp(path.join(tmpdir(), "microvm-suspend-"));
  spec = {
    stateDir: path.join(dir, "vm"),
    kernel: "/k/vmlinuz",
    initrd: "/k/initrd.img",
    rootfs: "/r/root.ext4",
    accelerator: "tcg",
    vcpus: 1,
    memoryMiB: 384,
    homeSizeMiB: 256,
    bridge: "sbx-test",
    address: "10.9.0.2/24",
    gateway: "10.9.0.1",
    authorizedKeys: ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE1 agent"],
    env: { HTTP_PROXY: "http://10.9.0.1:3128" },
  };
  await fs.mkdir(spec.stateDir, { recursive: true });
});

afterAll(async () => {
  await fs.rm(dir, { recursive: true, force: true });
});

describe("a kept memory image", () => {
  it("none at all: undefined (a cold boot with nothing to say)", async () => {
    expect(await keptMemory(spec)).toBeUndefined();
  });

  it("whole and for this machine: usable", async () => {
    await keep(4096);
    expect(await keptMemory(spec)).toEqual({ usable: true, savedAt: expect.any(Date) });
  });

  it("cut short, or its description lost or unreadable: not used, naming why", async () => {
    await keep(4096, 8192);
    expect(await keptMemory(spec)).toEqual({
      usable: false,
      why: "it is 4096 bytes where 8192 were written",
    });
    await keep(4096);
    await fs.rm(files().memoryInfo);
    expect(await keptMemory(spec)).toMatchObject({
      usable: false,
      why: expect.stringMatching(/memory\.json/),
    });
    await fs.writeFile(files().memoryInfo, "{not json");
    expect(await keptMemory(spec)).toMatchObject({ usable: false, why: expect.stringMatching(/unreadable/) });
  });

  it("saved for another machine or configuration: not used (memory, vCPUs, root, address, keys, environment)", async () => {
    for (const changed of [
      { memoryMiB: 512 },
      { vcpus: 2 },
      { rootfs: "/r/snapshot.qcow2" },
      { address: "10.9.0.3/24" },
      { authorizedKeys: ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE2 other"] },
      { env: { HTTP_PROXY: "http://10.9.0.1:3129" } },
    ]) {
      await keep(4096, 4096, { ...spec, ...changed });
      expect(await keptMemory(spec), JSON.stringify(changed)).toEqual({
        usable: false,
        why: "the VM's machine or configuration changed since it was saved",
      });
    }
    // What does not reach the guest's memory (the host's forwarded SSH port) does not matter.
    await keep(4096, 4096, { ...spec, sshHostPort: 30000 });
    expect(await keptMemory(spec)).toEqual({ usable: true, savedAt: expect.any(Date) });
  });
});
