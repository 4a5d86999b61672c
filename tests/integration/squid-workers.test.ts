// The host's Squid runs two workers and their coordinator (host-config/squid/squid.conf), so a kill of its
// master alone (`kill -9` of the pid file's process, an OOM kill) leaves the kids behind, serving the port
// with the config they last read and answering to nobody: `-k reconfigure` finds no master, and a new Squid
// cannot bind the port. The repair (the watchdog's, `npm run local`'s) kills them and starts a whole Squid;
// a stop kills them too. A real Squid of the test's own.
import { execFile } from "node:child_process";
import { promises as fs } from "node:fs";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tcpReachable } from "../../lib/host/net.js";
import { livePid, processAlive, run, waitFor } from "../../lib/process.js";
import {
  reconfigureSquid,
  squidKids,
  squidPaths,
  squidWorkers,
  stopSquid,
  workersReconfigured,
} from "../../lib/host/squid.js";
import { isolatedSquidHost } from "../helpers/host.js";

const exec = promisify(execFile);
let squid: Awaited<ReturnType<typeof isolatedSquidHost>>;
let paths: ReturnType<typeof squidPaths>;

beforeAll(async () => {
  squid = await isolatedSquidHost();
  paths = squidPaths(squid.host);
}, 120_000);

afterAll(async () => {
  await squid?.stop();
}, 60_000);

/** The proxy's HTTP status for a GET of `url` through it (`000`: no answer). */
async function through(url: string): Promise<string> {
  return exec("curl", [
    ...["-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10"],
    ...["-x", `http://127.0.0.1:${squid.host.squidPort}`, url],
  ]).then(
    ({ stdout }) => stdout,
    (error: { stdout?: string }) => error.stdout || "000",
  );
}

/** Kills the pid file's master alone and waits until it is dead; returns its pid. */
async function killMaster(): Promise<number> {
  const master = (await livePid(paths.pidFile, "squid"))!;
  process.kill(master, "SIGKILL");
  await waitFor("the master to die", 10_000, async () => (processAlive(master) ? undefined : true));
  return master;
}

/** The children of `pid` with their command lines, as ps shows them (a kid's helper: `(pinger)`). */
async function childrenOf(pid: number): Promise<string[]> {
  const { stdout } = await exec("ps", ["-o", "args=", "--ppid", String(pid)]).catch(() => ({ stdout: "" }));
  return stdout.split("\n").filter(Boolean);
}

describe("a Squid started", () => {
  it("is ready once every worker accepts, not the first: a reconfigure meanwhile would kill one still starting", async () => {
    // The port answers once one worker accepts; a full run's reconfigure right after found kid1 still
    // starting, and Squid's own log said "FATAL: Unable to open HTTP Socket" as it replaced it.
    const log = await fs.readFile(`${paths.logDir}/cache.log`, "utf8");
    expect(workersReconfigured(log, 2)).toBe(true);
    expect(log).not.toMatch(/FATAL/);
  });
});

describe("the host's Squid sends nothing of its own", () => {
  it("runs no ICMP pinger: an allowed request would have the host ping the tenant's chosen address", async () => {
    const kids = await squidKids(paths.config);
    expect(kids).toHaveLength(3);
    // Asked something first: a worker's pinger, where enabled, starts with the worker and pings on requests.
    expect(await through("http://nobody-allowed.example.test/")).toBe("403");
    const helpers = (await Promise.all(kids.map(childrenOf))).flat();
    expect(helpers.filter((args) => args.includes("pinger"))).toEqual([]);
  }, 60_000);
});

/** The pid of worker N. */
async function kid(n: number): Promise<number> {
  const pid = (await squidWorkers(paths.config)).get(n);
  if (pid === undefined) throw new Error(`no kid ${n} of ${paths.config}`);
  return pid;
}

describe("a worker that never finishes a reconfigure", () => {
  it("is killed once the wait's bound has passed, its master starts it again, and the reconfigure succeeds", async () => {
    const [first, second] = [await kid(1), await kid(2)];
    // Stopped, kid 2 cannot re-read the config or accept again: what a full run saw of Squid 5.7's kid2.
    process.kill(second, "SIGSTOP");
    const started = performance.now();
    await reconfigureSquid(
      paths.config,
      () => run("squid", ["-k", "reconfigure", "-f", paths.config]),
      5_000,
    );
    expect(performance.now() - started).toBeGreaterThanOrEqual(5_000);
    expect(processAlive(second)).toBe(false);
    expect(await kid(1)).toBe(first);
    expect(await kid(2)).not.toBe(second);
    // Said in Squid's own log, where its account of the reconfigure is.
    expect(await fs.readFile(`${paths.logDir}/cache.log`, "utf8")).toContain(
      `agent-sandbox| killed kid2 (pid ${second}): not listening 5000 ms after a reconfigure`,
    );
    expect(await through("http://nobody-allowed.example.test/")).toBe("403");
  }, 60_000);
});

describe("a Squid whose master was killed alone", () => {
  it("is started whole again: the kids it left, still holding the port, are killed first", async () => {
    const kids = await squidKids(paths.config);
    expect(kids).toHaveLength(3); // two workers and the coordinator
    await killMaster();
    // The hazard: the port is still served, by kids nothing can reload.
    await tcpReachable("127.0.0.1", squid.host.squidPort, 2_000);
    expect(kids.filter(processAlive)).toEqual(kids);

    await squid.ensureSquid();
    expect(kids.filter(processAlive)).toEqual([]);
    const master = await livePid(paths.pidFile, "squid");
    expect(master).toBeDefined();
    const newKids = await squidKids(paths.config);
    expect(newKids).toHaveLength(3);
    expect(newKids.filter((pid) => kids.includes(pid))).toEqual([]);
    expect(await through("http://nobody-allowed.example.test/")).toBe("403");
  }, 120_000);

  it("is stopped whole: the kids go too, and the port is free", async () => {
    const kids = await squidKids(paths.config);
    expect(kids).toHaveLength(3);
    await killMaster();
    await stopSquid({ port: squid.host.squidPort, ...paths });
    expect(kids.filter(processAlive)).toEqual([]);
    await expect(tcpReachable("127.0.0.1", squid.host.squidPort, 1_000)).rejects.toThrow(/nothing accepts/);
    await squid.ensureSquid(); // for afterAll's stop, as a host would be left
  }, 120_000);
});
