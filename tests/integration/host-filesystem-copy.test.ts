// A fork's home on its own (no engine): copies of a mounted, in-use sandbox:host:Filesystem taken at one
// point under fsfreeze (lib/host/filesystem-copy.ts), and a new filesystem made from a staged copy
// (`copyFrom`): the source's files at that point and none of its later writes, a UUID of its own, the
// source left writable; a copy killed half-way never used; a mountpoint that is not the image's refused.
import { execFile, spawn } from "node:child_process";
import { createReadStream, promises as fs, mkdtempSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { copyImageConsistently, FREEZE_DEADLINE_SECONDS, mountAt } from "../../lib/host/filesystem-copy.js";
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
const root = mkdtempSync(path.join(os.tmpdir(), "sbx-hostfs-copy-"));
const made: HostFilesystemOutputs[] = [];

function inputs(name: string, extra: Partial<Record<string, unknown>> = {}) {
  return HostFilesystemInputs.parse({
    imagePath: path.join(root, name, "home.img"),
    mountpoint: path.join(root, name, "home"),
    sizeBytes: 128 * MIB,
    uid: 1000,
    gid: 1000,
    mode: "0755",
    ...extra,
  });
}

const blkidUuid = async (image: string) =>
  (await run("blkid", ["-p", "-s", "UUID", "-o", "value", image])).stdout.trim();

let source: HostFilesystemOutputs;

beforeAll(async () => {
  source = (await hostFilesystemHandler.create(inputs("source"))).outs;
  made.push(source);
  await fs.writeFile(path.join(source.dataPath, "before.txt"), "at the fork point\n");
  await fs.writeFile(path.join(source.dataPath, "big.bin"), Buffer.alloc(8 * MIB, 7));
});

afterAll(async () => {
  for (const outs of made) await hostFilesystemHandler.delete(outs.imagePath, outs).catch(() => undefined);
  await fs.rm(root, { recursive: true, force: true });
});

describe("a consistent copy of a filesystem in use, and a filesystem made from it", () => {
  const copies = ["a", "b", "c"].map((name) => inputs(`copy-${name}`));
  const staged = copies.map((c) => `${c.imagePath}.fork`);

  it("copies a mounted image three times at one point; the source stays writable", async () => {
    for (const c of copies) await fs.mkdir(path.dirname(c.imagePath), { recursive: true });
    // A writer that keeps appending through the copy: the freeze holds it, never fails it.
    let writes = 0;
    let writing = true;
    const writer = (async () => {
      while (writing) {
        await fs.appendFile(path.join(source.dataPath, "log.txt"), `${writes++}\n`);
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
    })();
    const copied = await copyImageConsistently(source.imagePath, source.mountpoint, staged);
    writing = false;
    await writer;
    console.log(
      `3 copies of a ${source.sizeBytes / MIB} MiB image: frozen ${copied.frozenMs} ms, total ${copied.totalMs} ms, ${copied.bytesAllocated} bytes allocated`,
    );
    expect(copied.frozen).toBe(true);
    expect(copied.bytesAllocated).toBeGreaterThanOrEqual(3 * 8 * MIB);
    for (const file of staged) await expect(fs.stat(file)).resolves.toBeTruthy();
    // Nothing partial is left, and the source is thawed: a write returns.
    expect((await fs.readdir(path.dirname(staged[0]!))).filter((n) => n.endsWith(".partial"))).toEqual([]);
    await fs.writeFile(path.join(source.dataPath, "after.txt"), "written after the fork\n");
    expect(writes).toBeGreaterThan(0);
  });

  it("makes each new filesystem from its staged copy: the files of the point, its own UUID", async () => {
    const sourceLog = await fs.readFile(path.join(source.dataPath, "log.txt"), "utf8");
    const logs: string[] = [];
    for (const [index, c] of copies.entries()) {
      const outs = (await hostFilesystemHandler.create({ ...c, copyFrom: staged[index] })).outs;
      made.push(outs);
      expect(outs.uuid).toBe(filesystemUuid(c.imagePath));
      expect(await blkidUuid(c.imagePath)).toBe(filesystemUuid(c.imagePath));
      expect((await mountAt(c.mountpoint))?.backingFile).toBe(c.imagePath);
      expect(await fs.readFile(path.join(outs.dataPath, "before.txt"), "utf8")).toBe("at the fork point\n");
      expect((await fs.readFile(path.join(outs.dataPath, "big.bin"))).equals(Buffer.alloc(8 * MIB, 7))).toBe(
        true,
      );
      // The source's later writes are not there.
      await expect(fs.stat(path.join(outs.dataPath, "after.txt"))).rejects.toThrow(/ENOENT/);
      logs.push(await fs.readFile(path.join(outs.dataPath, "log.txt"), "utf8"));
      // The staged copy was taken over (moved), nothing partial is left.
      await expect(fs.stat(staged[index]!)).rejects.toThrow(/ENOENT/);
      await expect(fs.stat(`${c.imagePath}.partial`)).rejects.toThrow(/ENOENT/);
    }
    // One point for all three: the same log, a prefix of the source's (which went on after it).
    expect(new Set(logs).size).toBe(1);
    expect(sourceLog.startsWith(logs[0]!)).toBe(true);
    expect(await blkidUuid(source.imagePath)).toBe(filesystemUuid(source.imagePath));
    // Each copy is its own: a write in one is in no other, nor in the source.
    const [first, second] = made.slice(1);
    await fs.writeFile(path.join(first!.dataPath, "mine.txt"), "only in the first copy\n");
    await expect(fs.stat(path.join(second!.dataPath, "mine.txt"))).rejects.toThrow(/ENOENT/);
    await expect(fs.stat(path.join(source.dataPath, "mine.txt"))).rejects.toThrow(/ENOENT/);
  });

  it("a create run again after the copy was moved finishes it; a copy later changed is no change", async () => {
    const c = inputs("copy-d");
    await fs.mkdir(path.dirname(c.imagePath), { recursive: true });
    await copyImageConsistently(source.imagePath, source.mountpoint, [`${c.imagePath}.fork`]);
    // As a create killed right after its move left it: the whole copy under the partial name.
    await fs.rename(`${c.imagePath}.fork`, `${c.imagePath}.partial`);
    const outs = (await hostFilesystemHandler.create({ ...c, copyFrom: `${c.imagePath}.fork` })).outs;
    made.push(outs);
    expect(await fs.readFile(path.join(outs.dataPath, "after.txt"), "utf8")).toBe("written after the fork\n");
    const diff = await hostFilesystemHandler.diff(c.imagePath, outs, { ...c, copyFrom: "/elsewhere/x.img" });
    expect(diff.changes).toBe(false);
  });

  it("refuses a staged copy that is gone, one that holds no filesystem, and a mountpoint not the image's", async () => {
    const gone = inputs("copy-gone");
    await expect(
      hostFilesystemHandler.create({ ...gone, copyFrom: `${gone.imagePath}.fork` }),
    ).rejects.toThrow(/is gone and no partial copy is left; refusing to make an empty filesystem/);
    await expect(fs.stat(gone.imagePath)).rejects.toThrow(/ENOENT/);

    const junk = inputs("copy-junk");
    await fs.mkdir(path.dirname(junk.imagePath), { recursive: true });
    await fs.writeFile(`${junk.imagePath}.fork`, Buffer.alloc(MIB, 1));
    await expect(
      hostFilesystemHandler.create({ ...junk, copyFrom: `${junk.imagePath}.fork` }),
    ).rejects.toThrow(/holds no filesystem; only an ext4 image can be copied/);
    await expect(fs.stat(junk.imagePath)).rejects.toThrow(/ENOENT/);

    // The source's image with another's mountpoint: never a freeze of whatever is mounted there.
    const other = made[1]!;
    await expect(
      copyImageConsistently(source.imagePath, other.mountpoint, [path.join(root, "nowhere.img")]),
    ).rejects.toThrow(/is a mount of .* not of .*refusing to freeze or copy it/);
    await expect(fs.stat(path.join(root, "nowhere.img"))).rejects.toThrow(/ENOENT/);
  });

  it("a copy that outlasts the freeze's deadline is discarded, and the source thawed by the watchdog", async () => {
    const dir = path.join(root, "stuck");
    await fs.mkdir(dir);
    // A destination nobody reads: cp blocks on it, inside the freeze, until its own timeout.
    await run("mkfifo", [path.join(dir, "one.img.partial")]);
    const started = Date.now();
    const writeDuring = (async () => {
      await new Promise((resolve) => setTimeout(resolve, 500));
      await fs.writeFile(path.join(source.dataPath, "during.txt"), "held, then written\n");
      return Date.now() - started;
    })();
    await expect(
      copyImageConsistently(source.imagePath, source.mountpoint, [path.join(dir, "one.img")], {
        timeoutMs: 6_000,
        freezeDeadlineSeconds: 2,
      }),
    ).rejects.toThrow(/cp .* failed/);
    // The write was held by the freeze and let through by the watchdog at 2 s, before cp's 6 s timeout.
    const writtenAt = await writeDuring;
    console.log(`a write held by the freeze went through after ${writtenAt} ms (watchdog at 2000 ms)`);
    expect(writtenAt).toBeGreaterThanOrEqual(1_900);
    expect(writtenAt).toBeLessThan(5_500);
    expect(await fs.readdir(dir)).toEqual([]);
  });

  it("a runtime killed (-9) while the source is frozen: the watchdog thaws it at once, not at its deadline", async () => {
    const dir = path.join(root, "killed");
    await fs.mkdir(dir);
    const fifo = path.join(dir, "one.img.partial");
    await run("mkfifo", [fifo]);
    const script = path.join(dir, "copy.mts");
    await fs.writeFile(
      script,
      `import { copyImageConsistently } from ${JSON.stringify(path.resolve("lib/host/filesystem-copy.ts"))};\n` +
        `await copyImageConsistently(${JSON.stringify(source.imagePath)}, ${JSON.stringify(source.mountpoint)}, ` +
        `[${JSON.stringify(path.join(dir, "one.img"))}]);\n`,
    );
    const child = spawn(process.execPath, ["--import", "tsx", script], { stdio: "ignore" });
    // Frozen once its cp (started only after the freeze) is there, blocked on the pipe: found by its
    // arguments in /proc, read only.
    const copying = async () => {
      for (const pid of await fs.readdir("/proc")) {
        if (!/^\d+$/.test(pid)) continue;
        const cmdline = await fs.readFile(`/proc/${pid}/cmdline`, "utf8").catch(() => "");
        if (cmdline.startsWith("cp\0") && cmdline.includes(fifo)) return true;
      }
      return false;
    };
    const deadline = Date.now() + 30_000;
    while (!(await copying())) {
      if (Date.now() > deadline) throw new Error("the child never froze the source and started its copy");
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    const killedAt = Date.now();
    child.kill("SIGKILL");
    await fs.writeFile(path.join(source.dataPath, "after-kill.txt"), "thawed\n");
    const heldMs = Date.now() - killedAt;
    console.log(
      `runtime killed mid-freeze: the source thawed ${heldMs} ms later (the freeze's deadline: ${FREEZE_DEADLINE_SECONDS} s)`,
    );
    // The watchdog saw its pipe end with the process: far inside the deadline it would otherwise wait for.
    expect(heldMs).toBeLessThan(10_000);
    // The cp the killed runtime left, blocked on the pipe: drained, so it ends; then the pipe goes.
    for await (const chunk of createReadStream(fifo)) void chunk;
    await fs.rm(dir, { recursive: true, force: true });
  }, 60_000);

  it("a staged copy no create took over (a runtime killed before recording its forks) is the orphan sweep's", async () => {
    const disksRoot = path.join(root, "sweep", "disks");
    const state = path.join(root, "sweep", "state");
    await fs.mkdir(path.join(disksRoot, "p-fork"), { recursive: true });
    await fs.mkdir(state, { recursive: true });
    await copyImageConsistently(source.imagePath, source.mountpoint, [
      path.join(disksRoot, "p-fork", "home.img.fork"),
    ]);
    await fs.writeFile(path.join(disksRoot, "p-fork", "home.img.fork.partial"), "");
    const options = (extra: Partial<OrphanSweepOptions>): OrphanSweepOptions => ({
      instance: "hostfs-copy-test",
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
    expect((await sweepOrphans(options({ graceSeconds: 600 }))).orphans).toEqual([]);
    const report = await sweepOrphans(options({ remove: true }));
    expect(report.orphans.map((o) => [path.relative(disksRoot, o.name), o.why, o.removed]).sort()).toEqual([
      ["p-fork/home.img.fork", "project p-fork has no tenant stack", true],
      ["p-fork/home.img.fork.partial", "project p-fork has no tenant stack", true],
    ]);
    await expect(fs.stat(path.join(disksRoot, "p-fork"))).rejects.toThrow(/ENOENT/);
  });

  it("a copy that fails half-way leaves nothing under any name", async () => {
    const dir = path.join(root, "half");
    await fs.mkdir(dir);
    // The second destination's directory does not exist: its copy fails after the first was whole.
    const destinations = [path.join(dir, "one.img"), path.join(root, "missing-dir", "two.img")];
    await expect(copyImageConsistently(source.imagePath, source.mountpoint, destinations)).rejects.toThrow(
      /cp .* failed/,
    );
    expect(await fs.readdir(dir)).toEqual([]);
    // And the source was thawed.
    await fs.writeFile(path.join(source.dataPath, "thawed.txt"), "yes\n");
  });
});
