// A fault the chaos loops found (issue 18): a delete whose engine's checkpoint write was cut short left the
// file backend's temporary file (`tenant-<id>.json.bak.<hex>.tmp`) after the stack was removed. The purge
// after `stack rm` removes it, and nothing of another stack whose name starts the same.
import { mkdtempSync, promises as fs, rmSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { purgeRemovedStackState } from "../../runtime/stack-state.js";

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
});
