// `pulumi up` of the platform stack's local target, for real, on an isolated instance of the host baseline:
// its own chain names, Squid (port, config, pid file), registry (port, storage) and backup directory, and
// the machine's running Docker engine adopted, never started or stopped. The real SANDBOX-* chains, Squid,
// registry and dockerd that other tests use are only observed, to show that they are left alone.
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, promises as fs } from "node:fs";
import * as http from "node:http";
import * as path from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { stringify as toYaml } from "yaml";
import { CHAINS } from "../../lib/constants.js";
import { renderSquidConf, squidPaths } from "../../lib/host/render.js";
import { missingFirewallRules, removeFirewallRules } from "../../lib/host/iptables.js";
import { hostPublicAddresses } from "../../lib/host/net.js";
import { PlatformStack } from "../../runtime/host/platform-stack.js";
import { REPO_ROOT } from "../../lib/toolchain.js";
import { livePid } from "../../lib/process.js";
import { registryInstance, stopRegistry } from "../../lib/host/registry.js";
import { stopSquid } from "../../lib/host/squid.js";
import { caddyAdmin, caddyPaths, stopCaddy } from "../../lib/host/caddy.js";
import { StackConfig, type HostConfig } from "../../stacks/config.js";
import { isolatedHostConfig } from "../helpers/host.js";

const run = promisify(execFile);

async function rules(family: "iptables" | "ip6tables"): Promise<string[]> {
  return (await run(family, ["-w", "-S"])).stdout.trim().split("\n");
}

/** One request through a proxy; resolves with the proxy's status code. */
function viaProxy(port: number, target: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const request = http.request({ host: "127.0.0.1", port, method: "GET", path: target, timeout: 5_000 });
    request.once("response", (response) => {
      response.resume();
      resolve(response.statusCode ?? 0);
    });
    request.once("error", reject);
    request.end();
  });
}

async function registryAnswers(port: number): Promise<boolean> {
  try {
    return (await fetch(`http://127.0.0.1:${port}/v2/`, { signal: AbortSignal.timeout(2_000) })).ok;
  } catch {
    return false;
  }
}

interface PreviewStep {
  readonly op: string;
  readonly urn: string;
}
interface Preview {
  readonly steps?: PreviewStep[];
  readonly changeSummary?: Record<string, number>;
}

const parsePreview = (stdout: string) => JSON.parse(stdout) as Preview;
/** `op type::name` of every step that would change something (refresh steps only read). */
const changing = (preview: Preview) =>
  (preview.steps ?? [])
    .filter((step) => step.op !== "same" && step.op !== "refresh")
    .map((step) => `${step.op} ${step.urn.split("$").at(-1)}`)
    .sort();

/** The machine's real host services, as other tests use them: observed before and after, never changed. */
async function realHost() {
  const jumps = (await rules("iptables")).filter((line) =>
    [`-A INPUT -j ${CHAINS.input}`, `-A DOCKER-USER -j ${CHAINS.forward}`].includes(line),
  );
  return {
    jumps,
    squid: await livePid("/run/agent-sandbox/squid.pid", "squid"),
    registry: await livePid("/run/agent-sandbox/registry.pid", "docker-registry"),
    dockerd: (await run("pidof", ["dockerd"]).catch(() => ({ stdout: "" }))).stdout.trim(),
  };
}

describe("platform stack, local target (pulumi up of stacks/platform)", () => {
  let host: HostConfig;
  let root: string;
  let stack: PlatformStack;
  let realBefore: Awaited<ReturnType<typeof realHost>>;
  const suffix = randomBytes(2).toString("hex");
  const names = {
    inputChain: `SBXT${suffix.toUpperCase()}-IN`,
    forwardChain: `SBXT${suffix.toUpperCase()}-FWD`,
    bridgeMatch: `sbt${suffix}-+`,
  };
  const ours = (line: string) => line.includes(names.inputChain) || line.includes(names.forwardChain);

  beforeAll(async () => {
    host = { ...(await isolatedHostConfig()), firewall: names };
    root = path.dirname(host.configDir);
    const configFile = path.join(root, "Pulumi.platform-test.yaml");
    await fs.writeFile(
      configFile,
      toYaml({ config: { "agent-sandbox:target": "local", "agent-sandbox:host": host } }),
    );
    stack = new PlatformStack({
      stack: "platform-test",
      configFile,
      stateDir: path.join(root, "state"),
      workDir: path.join(root, "work"),
      passphrase: "platform-test",
    });
    realBefore = await realHost();
    await stack.prepare();
  });

  afterAll(async () => {
    // After a failure half-way: take down whatever of the isolated instance is left.
    if (!stack || !host) return;
    await stack.destroy().catch(() => undefined);
    await removeFirewallRules(names).catch(() => undefined);
    await stopSquid({ port: host.squidPort, ...squidPaths(host) }).catch(() => undefined);
    await stopRegistry(registryInstance({ ...host, port: host.registryPort })).catch(() => undefined);
    await stopCaddy(host).catch(() => undefined);
    await fs.rm(root, { recursive: true, force: true });
  });

  it("refuses a malformed config at preview time, naming the key", async () => {
    const bad = path.join(root, "bad.yaml");
    await fs.writeFile(
      bad,
      toYaml({ config: { "agent-sandbox:target": "local", "agent-sandbox:host": { squidPort: 70000 } } }),
    );
    const result = await stack.pulumi(["preview", "--stack", "platform-test", "--config-file", bad]);
    expect(result.code).not.toBe(0);
    expect(result.stdout + result.stderr).toMatch(/agent-sandbox:host\.squidPort: /);
  });

  it("up from a clean host applies the whole baseline", async () => {
    expect((await rules("iptables")).filter(ours)).toEqual([]);
    const result = await stack.up();
    expect(result.code, result.stdout + result.stderr).toBe(0);

    expect(await missingFirewallRules(names)).toEqual([]);
    const v4 = await rules("iptables");
    expect(v4).toContain(`-A INPUT -j ${names.inputChain}`);
    expect(v4).toContain(`-A DOCKER-USER -j ${names.forwardChain}`);
    expect(v4.filter((line) => line.includes("169.254.169.254/32") && ours(line))).toHaveLength(2);
    expect((await rules("ip6tables")).filter(ours)).toContain(
      `-A ${names.forwardChain} -i ${names.bridgeMatch} -m comment --comment "agent-sandbox: no IPv6 out" -j DROP`,
    );

    const squid = squidPaths(host);
    expect(await fs.readFile(squid.config, "utf8")).toBe(
      renderSquidConf({ ...host, port: host.squidPort, hostAddresses: hostPublicAddresses() }),
    );
    expect(await livePid(squid.pidFile, "squid")).toBeGreaterThan(0);
    // Never an open proxy: nothing is allowed without a tenant fragment.
    expect(await viaProxy(host.squidPort, "http://example.com/")).toBe(403);
    expect(await registryAnswers(host.registryPort)).toBe(true);
    // The front door: our Caddy, its admin API on loopback, the found dev servers' one route (asking the runtime's
    // API) and the catch-all 404 route until tenants add theirs.
    expect(await livePid(caddyPaths(host).pidFile, "caddy")).toBeGreaterThan(0);
    const routes = await caddyAdmin(
      host.frontDoorAdminPort,
      "GET",
      "/config/apps/http/servers/front_door/routes",
    );
    expect(JSON.parse(routes.body).map((r: { "@id": string }) => r["@id"])).toEqual([
      "front-door-dev-servers",
      "front-door-default",
    ]);
    const { apiPort } = StackConfig.parse({ target: "local", host }).runtime;
    expect(routes.body).toContain(`"dial":"127.0.0.1:${apiPort}"`);

    const outputs = await stack.outputs();
    expect(outputs.registry).toBe(`127.0.0.1:${host.registryPort}`);
    expect(outputs.bucket).toBe(path.join(host.dataDir, "backups"));
    expect(outputs.stateBackendUrl).toBe(`file://${path.join(host.dataDir, "state")}`);
    expect(existsSync(path.join(host.dataDir, "backups"))).toBe(true);
  });

  it("a second up changes nothing", async () => {
    const result = await stack.up({ refresh: true, expectNoChanges: true });
    expect(result.code, result.stdout + result.stderr).toBe(0);
  });

  it("preview with the policy pack runs the pack through the language host and passes", async () => {
    const result = await stack.pulumi([
      "preview",
      "--policy-pack",
      path.join(REPO_ROOT, "policy"),
      "--stack",
      "platform-test",
    ]);
    const output = result.stdout + result.stderr;
    expect(result.code, output).toBe(0);
    expect(output).not.toMatch(/RunPlugin not implemented/);
    // The CLI lists every pack it ran, by name and its package.json version, under "Policies:".
    expect(output).toMatch(/Policies:\s*\n\s*\S*\s*agent-sandbox-platform@v\d+\.\d+\.\d+/);
  });

  it("reports a flushed chain and an edited squid.conf as drift, and up repairs both", async () => {
    const squid = squidPaths(host);
    await run("iptables", ["-w", "-F", names.inputChain]);
    await fs.appendFile(squid.config, "http_access allow all\n");

    const drift = await stack.preview({ refresh: true });
    expect(drift.code, drift.stderr).toBe(0);
    expect(changing(parsePreview(drift.stdout))).toEqual([
      "update sandbox:host:File::host-squid-conf",
      "update sandbox:host:FirewallBaseline::host-firewall",
      "update sandbox:host:SquidService::host-squid",
    ]);

    const repair = await stack.up({ refresh: true });
    expect(repair.code, repair.stdout + repair.stderr).toBe(0);
    expect(await missingFirewallRules(names)).toEqual([]);
    expect(await fs.readFile(squid.config, "utf8")).not.toContain("http_access allow all");
    expect(await viaProxy(host.squidPort, "http://example.com/")).toBe(403);

    const after = await stack.preview({ refresh: true });
    expect(changing(parsePreview(after.stdout))).toEqual([]);
  });

  it("destroy removes the project's chains, Squid config and services, and nothing else", async () => {
    const squid = squidPaths(host);
    const registry = registryInstance({ ...host, port: host.registryPort });
    const result = await stack.destroy();
    expect(result.code, result.stdout + result.stderr).toBe(0);

    expect((await rules("iptables")).filter(ours)).toEqual([]);
    expect((await rules("ip6tables")).filter(ours)).toEqual([]);
    expect(await livePid(squid.pidFile, "squid")).toBeUndefined();
    expect(existsSync(squid.config)).toBe(false);
    expect(existsSync(squid.baselineFragment)).toBe(false);
    expect(await livePid(registry.pidFile, "docker-registry")).toBeUndefined();
    expect(existsSync(registry.config)).toBe(false);
    expect(await registryAnswers(host.registryPort)).toBe(false);
    expect(await livePid(caddyPaths(host).pidFile, "caddy")).toBeUndefined();

    // The machine's own host services: the engine was adopted, not stopped; the real chains, Squid and
    // registry are as they were.
    const realAfter = await realHost();
    expect(realAfter.dockerd).toBe(realBefore.dockerd);
    expect(realAfter.dockerd).not.toBe("");
    expect(realAfter.jumps).toEqual(realBefore.jumps);
    expect(realAfter.squid).toBe(realBefore.squid);
    expect(realAfter.registry).toBe(realBefore.registry);
  });
});
