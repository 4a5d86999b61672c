// withFileLock (lib/process.ts): one holder at a time of a lock file, in this process and across processes,
// released when its holder dies, and a wait that gives up naming the lock. What Squid's reconfigures are
// serialized by (lib/host/squid.ts).
import { spawn } from "node:child_process";
import { once } from "node:events";
import { mkdtempSync, rmSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { REPO_ROOT } from "../../lib/toolchain.js";
import { withFileLock } from "../../lib/process.js";

const dir = mkdtempSync(path.join(os.tmpdir(), "file-lock-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe("withFileLock", () => {
  it("lets one of this process's callers in at a time, and a failing one lets the next in", async () => {
    const lock = path.join(dir, "in-process.lock");
    const events: string[] = [];
    const holder = (name: string, ms: number) =>
      withFileLock(lock, async () => {
        events.push(`${name} in`);
        await sleep(ms);
        events.push(`${name} out`);
        return name;
      });
    const failing = () =>
      withFileLock(lock, async () => {
        events.push("failing in");
        await sleep(50);
        events.push("failing out");
        throw new Error("the work failed");
      });
    const results = [holder("a", 150), failing().catch((e: Error) => e.message), holder("b", 100)];
    expect(await Promise.all(results)).toEqual(["a", "the work failed", "b"]);
    // Each caller's way out comes before the next one's way in, whatever order they were let in.
    expect(events).toHaveLength(6);
    for (let i = 0; i < events.length; i += 2) expect(events[i + 1]).toBe(events[i]!.replace(/ in$/, " out"));
  });

  it("waits for another process's hold, and takes the lock once that process dies (SIGKILL)", async () => {
    const lock = path.join(dir, "cross-process.lock");
    // Another process holding it through the same helper, until it is killed.
    const other = spawn(
      process.execPath,
      [
        "--import",
        "tsx",
        "-e",
        `import("./lib/process.ts").then(({ withFileLock }) => withFileLock(${JSON.stringify(lock)}, async () => { console.log("holding"); await new Promise(() => {}); }))`,
      ],
      { cwd: REPO_ROOT, stdio: ["ignore", "pipe", "inherit"] },
    );
    await once(other.stdout!, "data");
    let took = 0;
    const waiting = withFileLock(lock, async () => (took = Date.now()));
    await sleep(700);
    expect(took).toBe(0);
    const killedAt = Date.now();
    other.kill("SIGKILL");
    await waiting;
    expect(took).toBeGreaterThanOrEqual(killedAt);
  });

  it("gives up after its timeout, naming the lock, while another process holds it", async () => {
    const lock = path.join(dir, "held.lock");
    // Its own process group: flock and the sleep it runs end together.
    const other = spawn("flock", ["-x", lock, "sh", "-c", "echo held; exec sleep 30"], {
      stdio: ["ignore", "pipe", "inherit"],
      detached: true,
    });
    await once(other.stdout!, "data");
    try {
      let ran = false;
      await expect(withFileLock(lock, async () => (ran = true), 1_000)).rejects.toThrow(
        `the lock ${lock} was held by another holder for 1 s`,
      );
      expect(ran).toBe(false);
    } finally {
      process.kill(-other.pid!, "SIGKILL");
    }
  });
});
