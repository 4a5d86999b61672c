// A fault the chaos loops found (issue 18): a delete whose engine's checkpoint write was cut short left the
// file backend's temporary file (`tenant-<id>.json.bak.<hex>.tmp`) after the stack was removed. The purge
// after `stack rm` removes it, and nothing of another stack whose name starts the same. And one the state
// backend's disk full found (state-disk-full.test.ts): a lock write cut short is no one's lock.
import { mkdtempSync, promises as fs, rmSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { afterAll, describe, expect, it } from "vitest";
import { purgeRemovedStackState } from "../../runtime/stack-state.js";
import { deadEngineLock, recoverStack, removeTornSidecars } from "../../runtime/tenants/stack-recovery.js";
import { toolchain } from "../../lib/toolchain.js";
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
      // A stack made without the CLI (runtime/tenants/stack-init.ts) writes as lib/files.ts writeFileAtomic.
      ownCheckpointTmp: ".tenant-a.json.0123456789ab.tmp",
      ownAttrsTmp: ".tenant-a.json.attrs.0123456789ab.tmp",
      other: "tenant-ab.json",
      otherTmp: "tenant-ab.json.bak.99.tmp",
      otherOwnTmp: ".tenant-ab.json.0123456789ab.tmp",
    };
    for (const file of Object.values(files)) await fs.writeFile(path.join(dir, file), "{}");
    const purged = await purgeRemovedStackState(`file://${root}`, "agent-sandbox-tenant", "tenant-a");
    expect(purged.map((entry) => path.basename(entry)).sort()).toEqual(
      [files.bak, files.checkpointTmp, files.tmp, files.ownCheckpointTmp, files.ownAttrsTmp].sort(),
    );
    expect((await fs.readdir(dir)).sort()).toEqual([files.other, files.otherTmp, files.otherOwnTmp].sort());
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

  it("a metadata file an engine killed mid-write left torn (an empty `<stack>.json.attrs`) is removed by the next operation's recovery", async () => {
    // What the chaos loop found: every later operation of the tenant failed with "failed to load checkpoint:
    // EOF". The file backend truncates a file's `.attrs` sidecar, writes it, then renames the new file into
    // place; an engine killed between the two leaves it empty. The real engine, on a real file backend:
    const backend = path.join(root, "torn-attrs");
    const options = {
      backendUrl: `file://${backend}`,
      workRoot: path.join(root, "work"),
      passphrase: "test",
    };
    const project = path.join(root, "torn-attrs-project");
    await fs.mkdir(project, { recursive: true });
    await fs.mkdir(backend, { recursive: true });
    await fs.writeFile(path.join(project, "Pulumi.yaml"), "name: agent-sandbox-tenant\nruntime: nodejs\n");
    const { pulumiBin, env } = toolchain();
    const pulumi = (...args: string[]) =>
      promisify(execFile)(pulumiBin, [...args, "--non-interactive"], {
        cwd: project,
        env: {
          ...process.env,
          ...env,
          PULUMI_BACKEND_URL: options.backendUrl,
          PULUMI_CONFIG_PASSPHRASE: "test",
        },
      });
    await pulumi("stack", "init", "tenant-p3");
    await pulumi("stack", "export", "--stack", "tenant-p3");
    const sidecar = path.join(backend, ".pulumi", "stacks", "agent-sandbox-tenant", "tenant-p3.json.attrs");
    const intact = await fs.readFile(sidecar, "utf8");
    expect(await removeTornSidecars("p3", options, () => undefined)).toEqual([]); // an intact one stays
    await fs.writeFile(sidecar, "");
    await expect(pulumi("stack", "export", "--stack", "tenant-p3")).rejects.toThrow(
      /failed to load checkpoint: EOF/,
    );
    const lines: string[] = [];
    expect(await removeTornSidecars("p3", options, (line) => lines.push(line))).toEqual([sidecar]);
    expect(lines).toEqual([
      "removing the torn metadata file tenant-p3.json.attrs of tenant-p3 (0 bytes) left by a killed engine",
    ]);
    const exported = JSON.parse((await pulumi("stack", "export", "--stack", "tenant-p3")).stdout);
    expect(exported.version).toBe(3);
    // Half-written is torn too; the checkpoint itself is never touched.
    await fs.writeFile(sidecar, intact.slice(0, 10));
    await recoverStack("p3", options, () => undefined, false);
    await expect(fs.stat(sidecar)).rejects.toThrow(/ENOENT/);
    await pulumi("stack", "export", "--stack", "tenant-p3");
  }, 60_000);

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
