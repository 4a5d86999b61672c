// A run killed mid-file (a worker, a session, a machine) leaves its test host behind: its own Squid and
// anything else started on its directories, mounts, a microVM's tap device. The next run clears it before it
// makes its own (tests/helpers/host.ts `clearKilledHosts`), and never touches a host a live file holds, even
// one running beside it.
import { spawn } from "node:child_process";
import { existsSync, promises as fs } from "node:fs";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { livePid, waitFor } from "../../lib/process.js";
import { squidPaths } from "../../lib/host/squid.js";
import { clearKilledHosts, isolatedSquidHost } from "../helpers/host.js";

/** A child process that makes a test host with its Squid running, says where, and waits to be killed. */
function hostOfAnotherRun(): Promise<{ pid: number; root: string; squidPid: number }> {
  const script = `
    import { isolatedSquidHost } from "./tests/helpers/host.ts";
    import { squidPaths } from "./lib/host/squid.ts";
    import { livePid } from "./lib/process.ts";
    import * as path from "node:path";
    const squid = await isolatedSquidHost();
    const squidPid = await livePid(squidPaths(squid.host).pidFile);
    console.log(JSON.stringify({ root: path.dirname(squid.host.configDir), squidPid }));
    setInterval(() => undefined, 1000);
  `;
  const child = spawn(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], {
    cwd: path.resolve(import.meta.dirname, "..", ".."),
    stdio: ["ignore", "pipe", "inherit"],
  });
  return new Promise((resolve, reject) => {
    let out = "";
    child.stdout.on("data", (chunk: Buffer) => {
      out += chunk.toString();
      if (out.includes("\n")) resolve({ pid: child.pid!, ...JSON.parse(out.split("\n")[0]!) });
    });
    child.once("exit", (code) => reject(new Error(`the other run exited ${code} before its host was up`)));
  });
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

describe("a killed run's test host", () => {
  it("is cleared by the next run, its Squid and directory gone; a live one beside it is left alone", async () => {
    const live = await isolatedSquidHost();
    const other = await hostOfAnotherRun();
    try {
      expect(alive(other.squidPid)).toBe(true);
      // While the other run lives, its host is its own.
      await fs.utimes(path.join(other.root, ".alive"), new Date(0), new Date(0));
      expect(await clearKilledHosts()).not.toContain(other.root);
      process.kill(other.pid, "SIGKILL");
      await waitFor("the other run to die", 10_000, async () => (alive(other.pid) ? undefined : true));
      // Killed: its Squid runs on, holding its port and directories, until the next run clears it.
      expect(alive(other.squidPid)).toBe(true);
      expect(await clearKilledHosts()).toEqual([other.root]);
      await waitFor("the killed run's Squid to be gone", 10_000, async () =>
        alive(other.squidPid) ? undefined : true,
      );
      expect(existsSync(other.root)).toBe(false);
      // This file's own host, made less than a minute ago and held, still runs.
      const ownRoot = path.dirname(live.host.configDir);
      await fs.utimes(path.join(ownRoot, ".alive"), new Date(0), new Date(0));
      expect(await clearKilledHosts()).toEqual([]);
      expect(await livePid(squidPaths(live.host).pidFile)).toBeDefined();
    } finally {
      if (alive(other.pid)) process.kill(other.pid, "SIGKILL");
      await live.stop();
    }
  });
});
