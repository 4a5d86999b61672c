// A fault the chaos loops found (issue 18): a delete whose engine's checkpoint write was cut short left the
// file backend's temporary file (`tenant-<id>.json.bak.<hex>.tmp`) after the stack was removed. The purge
// after `stack rm` removes it, and nothing of another stack whose name starts the same. And one the state
// backend's disk full found (state-disk-full.test.ts): a lock write cut short is no one's lock.
import { mkdtempSync, promises as fs, rmSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { purgeRemovedStackState } from "../../runtime/stack-state.js";
import { deadEngineLock, recoverStack } from "../../runtime/reconciler/reconciler.js";
import { destroyTenant } from "../../runtime/tenants/stack.js";

const root = mkdtempSync(path.join(os.tmpdir(), "stack-state-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe("purgeRemovedStackState", () => {
  it("removes a removed stack's interrupted checkpoint writes, and only its own", async () => {
    const dir = path.join(root, ".pulumi", "stacks", "agent-sandbox-tenant");
    await fs.mkdir(dir, { recursive: true });
    const files = {
      bak: "tenant-a.json.bak",
      tmp: "tenant-a.json.bak.18eaa79aa6532d8f.tmp",
      checkpointTmp: "tenant-a.json.0123abcd.tmp",
      other: "tenant-ab.json",
      otherTmp: "tenant-ab.json.bak.99.tmp",
    };
    for (const file of Object.values(files)) await fs.writeFile(path.join(dir, file), "{}");
    const purged = await purgeRemovedStackState(`file://${root}`, "agent-sandbox-tenant", "tenant-a");
    expect(purged.map((entry) => path.basename(entry)).sort()).toEqual(
      [files.bak, files.checkpointTmp, files.tmp].sort(),
    );
    expect((await fs.readdir(dir)).sort()).toEqual([files.other, files.otherTmp].sort());
  });

  it("a delete cut short between `stack rm` and the purge is finished by the next one: the backend's leftovers go", async () => {
    // What the chaos loop found after a runtime killed mid-delete (the retry saw no stack and stopped).
    const backend = path.join(root, "cut-short");
    const pulumi = path.join(backend, ".pulumi");
    const kept = [
      path.join(pulumi, "stacks", "agent-sandbox-tenant", "tenant-p1.json.bak"),
      path.join(pulumi, "stacks", "agent-sandbox-tenant", "tenant-p1.json.bak.attrs"),
      path.join(pulumi, "history", "agent-sandbox-tenant", "tenant-p1", "tenant-p1-1.history.json"),
      path.join(pulumi, "backups", "agent-sandbox-tenant", "tenant-p1", "tenant-p1.1.json"),
      path.join(pulumi, "locks", "organization", "agent-sandbox-tenant", "tenant-p1", "lock.json"),
    ];
    const other = path.join(pulumi, "stacks", "agent-sandbox-tenant", "tenant-p10.json");
    for (const file of [...kept, other]) {
      await fs.mkdir(path.dirname(file), { recursive: true });
      await fs.writeFile(file, "{}");
    }
    const outcome = await destroyTenant("p1", {
      backendUrl: `file://${backend}`,
      workRoot: path.join(root, "work"),
      passphrase: "test",
    });
    expect(outcome).toBe("absent");
    const left = await Promise.all(
      kept.map((file) =>
        fs.stat(file).then(
          () => file,
          () => undefined,
        ),
      ),
    );
    expect(left.filter(Boolean)).toEqual([]);
    for (const dir of ["history", "backups"])
      expect(await fs.readdir(path.join(pulumi, dir, "agent-sandbox-tenant"))).toEqual([]);
    expect(await fs.readFile(other, "utf8")).toBe("{}");
  });

  it("a lock write cut short (a full disk) is no one's lock: the next operation's recovery removes it, a live engine's stays", async () => {
    const backend = path.join(root, "lock-cut-short");
    const options = {
      backendUrl: `file://${backend}`,
      workRoot: path.join(root, "work"),
      passphrase: "test",
    };
    const locks = path.join(backend, ".pulumi", "locks", "organization", "agent-sandbox-tenant", "tenant-p2");
    await fs.mkdir(locks, { recursive: true });
    // What the engine left when its lock's write found no space: empty, never renamed into place.
    const interrupted = path.join(locks, "0eac84d9-7a63-4d6e-bdff-5a3232d361ba.json.18eac47f1d67b948.tmp");
    await fs.writeFile(interrupted, "");
    expect(await deadEngineLock("p2", options)).toBe(true);
    await recoverStack("p2", options, () => undefined, false);
    expect(await fs.readdir(locks)).toEqual([]);

    const live = path.join(locks, "1f2e3d4c-5b6a-4789-8abc-def012345678.json");
    await fs.writeFile(live, JSON.stringify({ pid: process.pid, hostname: os.hostname() }));
    expect(await deadEngineLock("p2", options)).toBe(false);
    await recoverStack("p2", options, () => undefined, false);
    expect(await fs.readdir(locks)).toEqual([path.basename(live)]);
  });
});
