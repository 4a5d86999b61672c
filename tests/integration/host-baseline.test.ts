import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { promises as fs } from "node:fs";
import * as http from "node:http";
import * as path from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { firewallBaseline, removeFirewallRules } from "../../lib/host/iptables.js";
import { livePid, waitFor } from "../../lib/process.js";
import { imageRegistry } from "../../lib/host/registry.js";
import { squidPaths, squidProxy, squidServiceName } from "../../lib/host/squid.js";
import type { HostConfig } from "../../stacks/config.js";
import { isolatedHostConfig } from "../helpers/host.js";

const run = promisify(execFile);
const quiet = () => undefined;

async function rules(family: "iptables" | "ip6tables", table = "filter"): Promise<string[]> {
  return (await run(family, ["-w", "-t", table, "-S"])).stdout.trim().split("\n");
}
const notOurs = (lines: string[]) => lines.filter((line) => !line.includes("SANDBOX-"));

/** One request through a proxy; resolves with the proxy's status code. */
function viaProxy(port: number, method: "GET" | "CONNECT", target: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const request = http.request({ host: "127.0.0.1", port, method, path: target, timeout: 5_000 });
    request.once("connect", (response, socket) => {
      socket.destroy();
      resolve(response.statusCode ?? 0);
    });
    request.once("response", (response) => {
      response.resume();
      resolve(response.statusCode ?? 0);
    });
    request.once("error", reject);
    request.end();
  });
}

describe("firewall baseline", () => {
  it("is idempotent and changes nothing outside the project's chains", async () => {
    const before4 = notOurs(await rules("iptables"));
    const before6 = notOurs(await rules("ip6tables"));
    const beforeGate4 = notOurs(await rules("iptables", "security"));
    const beforeGate6 = notOurs(await rules("ip6tables", "security"));
    const part = firewallBaseline();
    await part.ensure(quiet);
    const once = await rules("iptables");
    expect((await part.ensure(quiet)).ready).toBe(true);
    expect(await rules("iptables")).toEqual(once);
    // The only host-chain lines we own are the jumps into our chains.
    expect(notOurs(await rules("iptables"))).toEqual(before4);
    expect(notOurs(await rules("ip6tables"))).toEqual(before6);
    // The gate (security table) likewise: its jump from FORWARD and its chain, nothing else.
    expect(await rules("iptables", "security")).toContain("-A FORWARD -j SANDBOX-FORWARD");
    expect(notOurs(await rules("iptables", "security"))).toEqual(beforeGate4);
    expect(notOurs(await rules("ip6tables", "security"))).toEqual(beforeGate6);
  });

  it("reports a flushed chain by the missing rule, and ensure puts it back", async () => {
    // Chains of this test's own: flushing the host's SANDBOX-FORWARD would take every running tenant's rules
    // with it (a file beside this one once saw a sandbox's packet leave through the gap).
    const suffix = randomBytes(2).toString("hex").toUpperCase();
    const names = { inputChain: `SBXT${suffix}-IN`, forwardChain: `SBXT${suffix}-FWD`, bridgeMatch: "sbt-+" };
    const part = firewallBaseline(names);
    try {
      await part.ensure(quiet);
      await run("iptables", ["-w", "-F", names.forwardChain]);
      const check = await part.probe();
      expect(check.ready).toBe(false);
      expect(check.detail).toContain(
        `missing: iptables -A ${names.forwardChain} -i sbt-+ -d 169.254.169.254/32`,
      );
      expect((await part.ensure(quiet)).ready).toBe(true);
      // The gate's chain, flushed, is missing too (a flushed gate is Docker's moment open again).
      await run("iptables", ["-w", "-t", "security", "-F", names.forwardChain]);
      const gate = await part.probe();
      expect(gate.detail).toContain(
        `missing: iptables -t security -A ${names.forwardChain} -i sbt-+ -m conntrack`,
      );
      expect((await part.ensure(quiet)).ready).toBe(true);
    } finally {
      await removeFirewallRules(names);
    }
    // Removed whole, the gate's chains with the rest.
    expect((await rules("iptables", "security")).join("\n")).not.toContain(names.forwardChain);
    expect((await rules("ip6tables", "security")).join("\n")).not.toContain(names.forwardChain);
  });
});

describe("squid and registry as the host runs them", () => {
  let host: HostConfig;
  beforeAll(async () => {
    host = await isolatedHostConfig();
  });
  afterAll(async () => {
    const pid = await livePid(squidPaths(host).pidFile);
    if (pid) await run("squid", ["-k", "shutdown", "-f", squidPaths(host).config]).catch(quiet);
    const registryPid = await livePid(path.join(host.runDir, "registry.pid"));
    if (registryPid) process.kill(registryPid, "SIGTERM");
    await waitFor("squid to exit", 10_000, async () =>
      (await livePid(squidPaths(host).pidFile)) ? undefined : true,
    );
    await fs.rm(path.dirname(host.configDir), { recursive: true, force: true });
  });

  it("squid starts once, restarts nothing on a second ensure, and is never an open proxy", async () => {
    const squid = squidProxy({ port: host.squidPort, ...host });
    const first = await squid.ensure(quiet);
    expect(first.ready).toBe(true);
    const pid = await livePid(squidPaths(host).pidFile);
    expect((await squid.ensure(quiet)).detail).toBe(first.detail);
    expect(await livePid(squidPaths(host).pidFile)).toBe(pid);

    // No tenant fragment yet: every request is refused by the proxy itself, whatever the destination.
    expect(await viaProxy(host.squidPort, "GET", "http://allowed.example.test/")).toBe(403);
    expect(await viaProxy(host.squidPort, "CONNECT", "93.184.216.34:443")).toBe(403);
    expect(await viaProxy(host.squidPort, "CONNECT", "example.test:22")).toBe(403);
    expect(await fs.readdir(squidPaths(host).fragmentsDir)).toEqual(["00-baseline.conf"]);
    // Its shared memory is its own: named by its service name, never the "squid-*" every other Squid on
    // the host (the distribution's, another platform instance's) uses.
    const name = squidServiceName(squidPaths(host).config);
    expect(name).toMatch(/^sbx[0-9a-f]{12}$/);
    expect((await fs.readFile(`/proc/${pid}/cmdline`, "utf8")).split("\0")).toContain(name);
    expect((await fs.readdir("/dev/shm")).filter((f) => f.startsWith(`${name}-`)).length).toBeGreaterThan(0);
  });

  it("a stopped squid is reported as not running", async () => {
    const squid = squidProxy({ port: host.squidPort, ...host });
    await squid.ensure(quiet);
    await run("squid", ["-k", "shutdown", "-f", squidPaths(host).config]);
    await expect
      .poll(
        async () => (await squid.probe().catch((e: Error) => ({ ready: false, detail: e.message }))).ready,
        { timeout: 10_000 },
      )
      .toBe(false);
    expect((await squid.ensure(quiet)).ready).toBe(true);
  });

  it("the registry answers the v2 API on loopback, and is reported when stopped", async () => {
    const registry = imageRegistry({ port: host.registryPort, ...host });
    const check = await registry.ensure(quiet);
    expect(check).toMatchObject({
      ready: true,
      detail: expect.stringContaining(`localhost:${host.registryPort}`),
    });
    const pid = await livePid(path.join(host.runDir, "registry.pid"));
    expect(pid).toBeDefined();
    expect((await registry.ensure(quiet)).ready).toBe(true);
    expect(await livePid(path.join(host.runDir, "registry.pid"))).toBe(pid);

    process.kill(pid!, "SIGTERM");
    await expect
      .poll(
        () =>
          registry.probe().then(
            (c) => c.ready,
            () => false,
          ),
        { timeout: 10_000 },
      )
      .toBe(false);
  });
});
