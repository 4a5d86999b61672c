// withFileLock (lib/process.ts): one holder at a time of a lock file, in this process and across processes,
// released when its holder dies, and a wait that gives up naming the lock. What Squid's reconfigures are
// serialized by (lib/host/squid.ts), where callers queued at once share one.
import { spawn } from "node:child_process";
import { once } from "node:events";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { REPO_ROOT } from "../../lib/toolchain.js";
import { reconfigureSquid } from "../../lib/host/squid.js";
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

describe("reconfigureSquid", () => {
  /** A config without a cache log (nothing to wait for); `send` takes `ms` and counts its calls. */
  const squid = (name: string, ms: number, fail = () => false) => {
    const config = path.join(dir, `${name}.conf`);
    writeFileSync(config, "http_port 3128\n");
    const sent: number[] = [];
    const send = async () => {
      sent.push(Date.now());
      await sleep(ms);
      if (fail()) throw new Error("the reconfigure failed");
    };
    return { config, sent, reconfigure: () => reconfigureSquid(config, send) };
  };

  it("callers that queue at once share one reconfigure begun after they asked; a later caller gets its own", async () => {
    const { sent, reconfigure } = squid("shared", 300);
    const first = reconfigure();
    // The first has begun (its lock taken: a flock child, slower on a loaded host than any fixed wait): the
    // rest ask after its start, so it is not theirs.
    while (sent.length === 0) await sleep(10);
    await Promise.all([first, reconfigure(), reconfigure(), reconfigure(), reconfigure()]);
    expect(sent).toHaveLength(2);
    await reconfigure();
    expect(sent).toHaveLength(3);
  });

  it("a reconfigure that failed is nobody's: the next caller sends its own", async () => {
    let failing = true;
    const { sent, reconfigure } = squid("failed", 200, () => failing);
    const first = reconfigure().catch((e: Error) => e.message);
    while (sent.length === 0) await sleep(10);
    const second = reconfigure(); // asked during the first: it waits, then finds no good reconfigure since
    expect(await first).toBe("the reconfigure failed");
    failing = false; // before the second's send ends (200 ms after it begins)
    await second;
    expect(sent).toHaveLength(2);
  });
});
