// processAlive and livePid against real processes: a running one, one gone, and a zombie (exited, not yet
// reaped), which `kill(pid, 0)` alone takes for alive. A killed daemon is a zombie until init reaps it, which
// on some hosts takes seconds: the watchdog then left a dead Squid alone for a sweep, and Squid refused to
// start over its pid file.
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { livePid, processAlive, waitFor } from "../../lib/process.js";

const dir = mkdtempSync(path.join(os.tmpdir(), "process-alive-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("processAlive", () => {
  it("a running process is alive; an exited and reaped one is not; nor are nonsense pids", async () => {
    const child = spawn("sleep", ["30"], { stdio: "ignore" });
    expect(processAlive(child.pid!)).toBe(true);
    child.kill("SIGKILL");
    await new Promise((resolve) => child.once("exit", resolve));
    await waitFor("the child reaped", 5_000, async () => (processAlive(child.pid!) ? undefined : true));
    for (const pid of [0, -1, 1.5, Number.NaN]) expect(processAlive(pid)).toBe(false);
  });

  it("a zombie is not alive, though a signal still reaches it", async () => {
    // `sleep 0.1` exits at once; its parent became `sleep 30` (exec), which never reaps it: a zombie.
    const pidFile = path.join(dir, "zombie.pid");
    const parent = spawn("bash", ["-c", `sleep 0.1 & echo $! > ${pidFile}; exec sleep 30`], {
      stdio: "ignore",
    });
    try {
      const pid = await waitFor("the zombie", 5_000, async () => {
        const text = (() => {
          try {
            return readFileSync(pidFile, "utf8").trim();
          } catch {
            return "";
          }
        })();
        if (!text) return undefined;
        const stat = readFileSync(`/proc/${text}/stat`, "utf8");
        return stat.slice(stat.lastIndexOf(")") + 2).startsWith("Z") ? Number(text) : undefined;
      });
      expect(() => process.kill(pid, 0)).not.toThrow(); // what the old check saw
      expect(processAlive(pid)).toBe(false);
      expect(await livePid(pidFile, "sleep")).toBeUndefined();
    } finally {
      parent.kill("SIGKILL");
    }
  });

  it("livePid: the pid file's process when it runs the named program", async () => {
    const child = spawn("sleep", ["30"], { stdio: "ignore" });
    try {
      const pidFile = path.join(dir, "sleep.pid");
      writeFileSync(pidFile, `${child.pid}\n`);
      expect(await livePid(pidFile, "sleep")).toBe(child.pid);
      expect(await livePid(pidFile, "squid")).toBeUndefined();
      expect(await livePid(path.join(dir, "missing.pid"))).toBeUndefined();
    } finally {
      child.kill("SIGKILL");
    }
  });
});

describe("waitFor", () => {
  it("polls quickly at first, then at most twice a second; names what it waited for and the last error", async () => {
    let probes = 0;
    const started = Date.now();
    const waited = waitFor("the thing", 3_000, async () => {
      probes += 1;
      throw new Error(`not yet (${probes})`);
    });
    await expect(waited).rejects.toThrow(/^the thing not ready after 3000 ms: not yet \(\d+\)$/);
    expect(Date.now() - started).toBeGreaterThanOrEqual(3_000);
    // A pause of 100 ms throughout would be 30 probes; growing by half to 500 ms, about 10 (a slow machine
    // makes fewer, never more).
    expect(probes).toBeLessThanOrEqual(12);
    // A value ends the wait at once.
    let calls = 0;
    expect(await waitFor("a value", 5_000, async () => (++calls === 3 ? "ready" : undefined))).toBe("ready");
    expect(calls).toBe(3);
  });
});
