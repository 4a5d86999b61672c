// sandbox:host:Filesystem on its own (no engine): a real sparse ext4 image, loop-mounted on this host.
// Create and a create run again, a reboot (an umount from outside) seen by read and undone by an update,
// online growth with the data kept, a shrink refused, a foreign image or mount refused, delete leaving no
// image, mount or loop device.
import { execFile, spawn } from "node:child_process";
import { promises as fs, mkdtempSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { promisify } from "node:util";
import { afterAll, describe, expect, it } from "vitest";
import {
  filesystemUuid,
  hostFilesystemHandler,
  HostFilesystemInputs,
  type HostFilesystemOutputs,
} from "../../provider/resources/host-filesystem.js";
import { dockerClient } from "../../lib/docker-client.js";
import { sweepOrphans, type OrphanSweepOptions } from "../../runtime/tenants/orphans.js";

const run = promisify(execFile);
const MIB = 1024 * 1024;
const root = mkdtempSync(path.join(os.tmpdir(), "sbx-hostfs-"));
const made: HostFilesystemOutputs[] = [];

async function loopDevices(image: string): Promise<string> {
  return (await run("losetup", ["-n", "-O", "NAME", "-j", image])).stdout.trim();
}

async function isMountpoint(dir: string): Promise<boolean> {
  return run("findmnt", ["-n", "--mountpoint", dir]).then(
    () => true,
    () => false,
  );
}

/** `df` of a directory, in bytes: what a process writing there sees. */
async function df(dir: string): Promise<{ size: number; avail: number }> {
  const { stdout } = await run("df", ["-B1", "--output=size,avail", dir]);
  const [size, avail] = stdout.trim().split("\n")[1]!.trim().split(/\s+/).map(Number);
  return { size: size!, avail: avail! };
}

function inputs(name: string, sizeMiB: number, extra: Partial<Record<string, unknown>> = {}) {
  return HostFilesystemInputs.parse({
    imagePath: path.join(root, "disks", `${name}.img`),
    mountpoint: path.join(root, "mnt", name),
    sizeBytes: sizeMiB * MIB,
    uid: 1000,
    gid: 1000,
    mode: "0700",
    ...extra,
  });
}

async function waitFor(condition: () => Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error("timed out waiting");
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

afterAll(async () => {
  for (const outs of made) await hostFilesystemHandler.delete(outs.imagePath, outs).catch(() => undefined);
  await fs.rm(root, { recursive: true, force: true });
});

describe("sandbox:host:Filesystem", () => {
  const declared = inputs("home", 96);
  let outs: HostFilesystemOutputs;

  it("makes a sparse image of the declared size, mounted nodev,nosuid, with its data directory owned as asked", async () => {
    const started = Date.now();
    const created = await hostFilesystemHandler.create(declared);
    console.log(`create of a ${declared.sizeBytes / MIB} MiB filesystem: ${Date.now() - started} ms`);
    outs = created.outs;
    made.push(outs);
    expect(created.id).toBe(declared.imagePath);
    expect(outs.uuid).toBe(filesystemUuid(declared.imagePath));
    expect(outs.dataPath).toBe(path.join(declared.mountpoint, "data"));
    const image = await fs.stat(declared.imagePath);
    expect(image.size).toBe(96 * MIB);
    expect(image.blocks * 512).toBeLessThan(16 * MIB); // sparse: the host pays for what is written
    const { stdout: options } = await run("findmnt", [
      "-n",
      "-o",
      "FSTYPE,OPTIONS",
      "--mountpoint",
      declared.mountpoint,
    ]);
    expect(options).toMatch(/^ext4\s/);
    expect(options).toMatch(/nodev/);
    expect(options).toMatch(/nosuid/);
    const data = await fs.stat(outs.dataPath);
    expect([data.uid, data.gid, (data.mode & 0o777).toString(8)]).toEqual([1000, 1000, "700"]);
    expect((await df(outs.dataPath)).size).toBeGreaterThan(80 * MIB);
    expect((await df(outs.dataPath)).size).toBeLessThanOrEqual(96 * MIB);
    expect(await hostFilesystemHandler.read(created.id, outs)).toEqual(outs);
  });

  it("a tenant's default size (10 GiB) costs the host a few MiB at creation", async () => {
    const big = inputs("big", 10 * 1024);
    const started = Date.now();
    const created = await hostFilesystemHandler.create(big);
    const ms = Date.now() - started;
    made.push(created.outs);
    const image = await fs.stat(big.imagePath);
    console.log(
      `create of a 10 GiB filesystem: ${ms} ms, ${(image.blocks * 512) / MIB} MiB of the host's disk`,
    );
    expect(image.size).toBe(10 * 1024 * MIB);
    expect(image.blocks * 512).toBeLessThan(32 * MIB);
    expect((await df(created.outs.dataPath)).size).toBeGreaterThan(9.5 * 1024 * MIB);
    await hostFilesystemHandler.delete(created.id, created.outs);
    made.pop();
    await expect(fs.stat(big.imagePath)).rejects.toThrow(/ENOENT/);
  });

  it("a create run again (a kill after mkfs or after the mount) adopts its own image and keeps its files", async () => {
    await fs.writeFile(path.join(outs.dataPath, "kept"), "before the retry");
    const again = await hostFilesystemHandler.create(declared);
    expect(again.outs).toEqual(outs);
    expect(await fs.readFile(path.join(outs.dataPath, "kept"), "utf8")).toBe("before the retry");
    // Killed between mkfs and the rename: the partial image is formatted again, the real one untouched.
    await fs.writeFile(`${declared.imagePath}.partial`, "cut short");
    expect((await hostFilesystemHandler.create(declared)).outs).toEqual(outs);
    expect((await loopDevices(declared.imagePath)).split("\n")).toHaveLength(1);
  });

  it("a reboot (unmounted from outside) reads as not mounted; the next update mounts it again with its files", async () => {
    await run("umount", [declared.mountpoint]);
    // Freed with the mount; a moment later where a process in another mount namespace (made while it was
    // mounted, on this host whose `/` is private) held a copy of it and has just ended.
    await waitFor(async () => (await loopDevices(declared.imagePath)) === "", 30_000);
    const observed = await hostFilesystemHandler.read(declared.imagePath, outs);
    expect(observed).toMatchObject({ mounted: false, uuid: outs.uuid, sizeBytes: 96 * MIB });
    expect((await hostFilesystemHandler.diff(declared.imagePath, observed!, declared)).changes).toBe(true);
    // Unmounted, there is no data directory for a sandbox's volume to bind: it cannot start on the host's disk.
    expect(await fs.readdir(declared.mountpoint)).toEqual([]);
    outs = await hostFilesystemHandler.update(declared.imagePath, observed!, declared);
    expect(outs.mounted).toBe(true);
    expect(await fs.readFile(path.join(outs.dataPath, "kept"), "utf8")).toBe("before the retry");
    expect((await hostFilesystemHandler.diff(declared.imagePath, outs, declared)).changes).toBe(false);
  });

  it("grows with the files kept (online where the kernel allows it, else once nothing holds it); refuses to shrink", async () => {
    const before = await df(outs.dataPath);
    const grown = { ...declared, sizeBytes: 160 * MIB };
    expect(await hostFilesystemHandler.diff(declared.imagePath, outs, grown)).toMatchObject({
      changes: true,
      replaces: [],
    });
    // A process in another mount namespace holds the filesystem, as a running sandbox's container does.
    const holder = spawn("unshare", ["-m", "--propagation", "private", "sleep", "120"], { stdio: "ignore" });
    await waitFor(
      async () =>
        (await run("findmnt", ["-N", String(holder.pid), "-n", declared.mountpoint]).catch(
          () => undefined,
        )) !== undefined,
    );
    const held = await hostFilesystemHandler.update(declared.imagePath, outs, grown).then(
      (grownOuts) => ({ grownOuts }),
      (error: Error) => ({ error }),
    );
    if ("error" in held) {
      console.log(`growth while held elsewhere: refused (${held.error.message})`);
      expect(held.error.message).toContain(
        `cannot grow to ${160 * MIB} bytes while in use (a running sandbox?): this host does not allow online growth (no CAP_SYS_RESOURCE)`,
      );
      expect(await isMountpoint(declared.mountpoint)).toBe(true);
      expect((await df(outs.dataPath)).size).toBe(before.size);
      expect((await loopDevices(declared.imagePath)).split("\n")).toHaveLength(1);
      const exited = new Promise((resolve) => holder.once("exit", resolve));
      holder.kill("SIGKILL");
      await exited;
      outs = await hostFilesystemHandler.update(declared.imagePath, outs, grown);
    } else {
      console.log("growth while held elsewhere: done online");
      const exited = new Promise((resolve) => holder.once("exit", resolve));
      holder.kill("SIGKILL");
      await exited;
      outs = held.grownOuts;
    }
    const after = await df(outs.dataPath);
    console.log(`grown: df size ${Math.round(before.size / MIB)} MiB -> ${Math.round(after.size / MIB)} MiB`);
    expect(after.size - before.size).toBeGreaterThan(50 * MIB); // 64 MiB, less the new groups' metadata
    expect((await fs.stat(declared.imagePath)).size).toBe(160 * MIB);
    expect(await fs.readFile(path.join(outs.dataPath, "kept"), "utf8")).toBe("before the retry");
    await expect(
      hostFilesystemHandler.update(declared.imagePath, outs, { ...declared, sizeBytes: 128 * MIB }),
    ).rejects.toThrow(`is ${160 * MIB} bytes and cannot shrink to ${128 * MIB}`);
    expect((await df(outs.dataPath)).size).toBe(after.size);
  });

  it("a full filesystem stops the writer with ENOSPC and leaves the host's free space alone", async () => {
    const fill = await run("dd", [
      "if=/dev/zero",
      `of=${path.join(outs.dataPath, "fill")}`,
      "bs=1M",
      "count=400",
    ]).then(
      () => "completed",
      (error: { stderr?: string }) => `${error.stderr}`,
    );
    expect(fill).toMatch(/No space left on device/);
    const written = (await fs.stat(path.join(outs.dataPath, "fill"))).size;
    expect(written).toBeLessThanOrEqual(160 * MIB);
    expect((await df(outs.dataPath)).avail).toBeLessThan(MIB);
    // The host lost at most the image's size (it is sparse: what was written), never more: measured as the
    // blocks the image file holds, since the host's free space also moves with the files that run beside this.
    expect((await fs.stat(declared.imagePath)).blocks * 512).toBeLessThanOrEqual(160 * MIB);
    await fs.rm(path.join(outs.dataPath, "fill"));
  });

  it("refuses bad input, someone else's image or mount, and a non-empty mountpoint", async () => {
    const bad = (extra: Record<string, unknown>) =>
      HostFilesystemInputs.safeParse({ ...declared, ...extra }).error?.issues.map(
        (i) => `${i.path}: ${i.message}`,
      );
    expect(bad({ imagePath: "disks/home.img" })).toEqual([
      "imagePath: must be an absolute, normalized path at least two levels deep",
    ]);
    expect(bad({ mountpoint: "/srv/../etc" })).toEqual([
      "mountpoint: must be an absolute, normalized path at least two levels deep",
    ]);
    expect(bad({ sizeBytes: 32 * MIB })).toEqual(["sizeBytes: must be at least 67108864 (64 MiB)"]);
    expect(bad({ sizeBytes: 100 * MIB + 1 })).toEqual(["sizeBytes: must be a whole number of MiB"]);
    expect(bad({ mode: "rwx" })).toEqual(["mode: must be an octal mode such as 0700"]);
    expect(bad({ mountpoint: path.join(declared.imagePath, "mnt") })).toEqual([
      "mountpoint: the image must not be inside the mountpoint, nor the mountpoint inside the image",
    ]);

    // Another resource's mount at the mountpoint: refused before anything is made.
    const other = inputs("other", 64, { mountpoint: declared.mountpoint });
    await expect(hostFilesystemHandler.create(other)).rejects.toThrow(
      `${declared.mountpoint} is already a mount of ${declared.imagePath}, not of ${other.imagePath}`,
    );
    await expect(fs.stat(other.imagePath)).rejects.toThrow(/ENOENT/);

    // An image of another filesystem at the path is neither formatted over nor adopted.
    const foreign = inputs("foreign", 64);
    await fs.mkdir(path.dirname(foreign.imagePath), { recursive: true });
    await fs.writeFile(foreign.imagePath, "");
    await fs.truncate(foreign.imagePath, 64 * MIB);
    await run("mkfs.ext4", ["-q", "-F", foreign.imagePath]);
    const { stdout: foreignUuid } = await run("blkid", [
      "-p",
      "-s",
      "UUID",
      "-o",
      "value",
      foreign.imagePath,
    ]);
    await expect(hostFilesystemHandler.create(foreign)).rejects.toThrow(
      `${foreign.imagePath} already exists and holds filesystem ${foreignUuid.trim()}, not this resource's`,
    );
    expect(await isMountpoint(foreign.mountpoint)).toBe(false);
    await fs.rm(foreign.imagePath);

    // A mountpoint with files in it is never hidden under a mount.
    const crowded = inputs("crowded", 64);
    await fs.mkdir(crowded.mountpoint, { recursive: true });
    await fs.writeFile(path.join(crowded.mountpoint, "someone's"), "");
    await expect(hostFilesystemHandler.create(crowded)).rejects.toThrow(
      `${crowded.mountpoint} is not empty (someone's); refusing to mount ${crowded.imagePath} over it`,
    );
    await hostFilesystemHandler
      .delete(crowded.imagePath, { ...crowded, uuid: "", dataPath: "", mounted: false })
      .catch(() => undefined);
    expect(await isMountpoint(crowded.mountpoint)).toBe(false);
    expect(await loopDevices(crowded.imagePath)).toBe("");
  });

  it("delete unmounts, frees the loop device and removes image and mountpoint; again is a no-op; read says gone", async () => {
    const device = await loopDevices(declared.imagePath);
    expect(device).toMatch(/^\/dev\/loop\d+$/);
    await hostFilesystemHandler.delete(declared.imagePath, outs);
    expect(await isMountpoint(declared.mountpoint)).toBe(false);
    expect(await loopDevices(declared.imagePath)).toBe("");
    const { stdout: attached } = await run("losetup", ["-a"]);
    expect(attached).not.toContain(declared.imagePath);
    await expect(fs.stat(declared.imagePath)).rejects.toThrow(/ENOENT/);
    await expect(fs.stat(declared.mountpoint)).rejects.toThrow(/ENOENT/);
    await hostFilesystemHandler.delete(declared.imagePath, outs);
    expect(await hostFilesystemHandler.read(declared.imagePath, outs)).toBeUndefined();
    made.length = 0;
  });
});

describe("the orphan sweep and the disks root", () => {
  it("reports a tenant's image and mount that no stack owns, past the grace period; removes them", async () => {
    const disksRoot = path.join(root, "sweep", "disks");
    const state = path.join(root, "sweep", "state");
    await fs.mkdir(state, { recursive: true });
    const declared = HostFilesystemInputs.parse({
      imagePath: path.join(disksRoot, "p-orphan", "home.img"),
      mountpoint: path.join(disksRoot, "p-orphan", "home"),
      sizeBytes: 64 * MIB,
      uid: 1000,
      gid: 1000,
      mode: "0755",
    });
    const { outs } = await hostFilesystemHandler.create(declared);
    made.push(outs);
    // A create killed between formatting and the rename leaves a partial image: no stack's either.
    await fs.writeFile(path.join(disksRoot, "p-orphan", "backup.img.partial"), "");
    const options = (extra: Partial<OrphanSweepOptions>): OrphanSweepOptions => ({
      instance: "hostfs-test",
      backendUrl: `file://${state}`,
      docker: dockerClient(),
      squid: {
        configFile: path.join(root, "sweep", "squid.conf"),
        fragmentsDir: path.join(root, "sweep", "none"),
      },
      disksRoot,
      snapshotRepository: "127.0.0.1:1/sandboxes",
      sweepRegistry: false,
      graceSeconds: 0,
      ...extra,
    });
    const young = await sweepOrphans(options({ graceSeconds: 600 }));
    expect(young.orphans).toEqual([]);
    expect(young.skipped.map((s) => s.kind).sort()).toEqual(["disk-image", "disk-image", "disk-mount"]);

    const report = await sweepOrphans(options({ remove: true }));
    expect(
      report.orphans
        .map((o) => [o.kind, path.relative(disksRoot, o.name), o.tenant, o.why, o.removed])
        .sort(),
    ).toEqual([
      ["disk-image", "p-orphan/backup.img.partial", "p-orphan", "project p-orphan has no tenant stack", true],
      ["disk-image", "p-orphan/home.img", "p-orphan", "project p-orphan has no tenant stack", true],
      ["disk-mount", "p-orphan/home", "p-orphan", "project p-orphan has no tenant stack", true],
    ]);
    expect(await isMountpoint(declared.mountpoint)).toBe(false);
    expect(await loopDevices(declared.imagePath).catch(() => "")).toBe("");
    await expect(fs.stat(path.join(disksRoot, "p-orphan"))).rejects.toThrow(/ENOENT/);
    expect((await sweepOrphans(options({}))).orphans).toEqual([]);
    made.length = 0;
  });
});
