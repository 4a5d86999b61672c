// Tenants as reconciled stacks, for real: the Pulumi engine, the provider plugin, Docker, iptables and Squid.
// "The internet" and "the metadata server" are a network namespace of this test's own (tests/helpers/world).
// Tenant A runs through the shared provider, tenant B with a plugin per operation (issue 17: both paths).
import { execFile } from "node:child_process";
import { promises as fs } from "node:fs";
import { createServer, type Server } from "node:net";
import * as path from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tenantNames } from "../../components/tenant/names.js";
import { waitFor } from "../../lib/process.js";
import { squidPaths } from "../../lib/host/squid.js";
import {
  createTenant,
  destroyTenant,
  tenantStack,
  upTenant,
  type TenantStackOptions,
} from "../../runtime/tenants/stack.js";
import { buildSandboxImage } from "../../sandbox-image/build.js";
import type { TenantSpecInput } from "../../components/tenant/spec.js";
import type { HostConfig } from "../../stacks/config.js";
import { docker, execIn, uniqueName } from "../helpers/containers.js";
import { freePort, isolatedSquidHost, tenantLeftovers } from "../helpers/host.js";
import { METADATA_ADDRESS, startWorld, WORLD_ADDRESS, type World } from "../helpers/world.js";

const run = promisify(execFile);

let squid: Awaited<ReturnType<typeof isolatedSquidHost>>;
let host: HostConfig;
let world: World;
let image: string;
let options: TenantStackOptions;
/**
 * Tenant A's operations attach to the shared provider (runtime/tenants/shared-provider.ts), B's start a
 * plugin each: every assertion below holds for both paths, and the two are created at once.
 */
let shared: TenantStackOptions;
const optionsOf = (projectId: string) => (projectId === tenantA ? shared : options);
let hostService: Server;
let hostServicePort: number;
const suffix = uniqueName("t").slice(2);
const tenantA = `iso-a-${suffix}`;
const tenantB = `iso-b-${suffix}`;
const specs = new Map<string, TenantSpecInput>();

/**
 * Each tenant's SSH port is fixed below the kernel's ephemeral range (32768+): a port picked by the
 * kernel is free again while its sandbox is stopped, and any listener or outgoing connection of the
 * test run can take it before the sandbox starts again (CI once failed on exactly that).
 */
const SSH_PORTS = [27720, 27735] as const;
function sshPortFor(subnet: string): number {
  const port = SSH_PORTS[0] + Number(subnet.split(".")[2]);
  if (port > SSH_PORTS[1])
    throw new Error(`${subnet}'s SSH port ${port} is past this file's ${SSH_PORTS.join("-")}`);
  return port;
}

function specFor(projectId: string, subnet: string, allowlist: string[]): TenantSpecInput {
  return {
    projectId,
    ownerId: `owner-of-${projectId}`,
    mode: "local",
    image,
    subnet,
    sshHostPort: sshPortFor(subnet),
    allowlist,
    backupIntervalSeconds: 3,
    host: {
      squidPort: host.squidPort,
      squidConfigFile: squidPaths(host).config,
      squidFragmentsDir: squidPaths(host).fragmentsDir,
      backupRoot: path.join(host.dataDir, "backups"),
    },
  };
}

/** Runs probes in the sandbox, all at once; each prints `name=<http status or 000>`. */
async function probe(projectId: string, probes: Record<string, string>): Promise<Record<string, string>> {
  const script = Object.entries(probes)
    .map(
      ([name, args]) =>
        `( echo "${name}=$(curl -s -o /dev/null -w '%{http_connect}:%{http_code}' --max-time 4 ${args})" ) &`,
    )
    .join("\n");
  const result = await execIn(tenantNames(projectId).container, `${script}\nwait`);
  return Object.fromEntries(
    result.stdout
      .split("\n")
      .filter(Boolean)
      .map((line) => line.split("=") as [string, string]),
  );
}

/**
 * Whether a TCP connection to `address:port` opens from inside `container` (a shell's /dev/tcp, bounded):
 * unlike curl's telnet://, whose output is the same whether or not it connected.
 */
async function connects(run: (script: string) => Promise<{ stdout: string }>, address: string, port: number) {
  const { stdout } = await run(
    `timeout 4 bash -c 'exec 3<>/dev/tcp/${address}/${port} && echo connected' 2>/dev/null || echo refused-or-dropped`,
  );
  return stdout.trim();
}

/** Every engine and host object of the tenant that still exists. */
const leftovers = (projectId: string) => tenantLeftovers(host, projectId);

// Up to half an hour: the machine's one world is taken in turns, and a file beside this one may hold it.
beforeAll(async () => {
  world = await startWorld();
  squid = await isolatedSquidHost(
    Object.fromEntries(
      ["allowed-a", "allowed-b", "denied"].map((name) => [`${name}.sandbox.test`, WORLD_ADDRESS]),
    ),
  );
  host = squid.host;
  image = (await buildSandboxImage({ base: "local", log: () => undefined })).tag;
  await fs.mkdir(path.join(host.dataDir, "state"), { recursive: true });
  options = {
    backendUrl: `file://${path.join(host.dataDir, "state")}`,
    workRoot: path.join(host.dataDir, "work"),
    passphrase: "integration-test",
  };
  shared = { ...options, sharedProvider: true };
  // A service on the host that sandboxes must not reach (as the API or Postgres would be).
  hostServicePort = await freePort();
  hostService = createServer((socket) => socket.end("host-service\n")).listen(hostServicePort, "0.0.0.0");
  specs.set(tenantA, specFor(tenantA, "10.229.1.0/24", ["allowed-a.sandbox.test"]));
  specs.set(tenantB, specFor(tenantB, "10.229.2.0/24", ["allowed-b.sandbox.test"]));
  // Two tenants created concurrently: separate stacks, one engine and one Squid.
  await Promise.all([...specs.values()].map((spec) => createTenant(spec, optionsOf(spec.projectId))));
}, 1_800_000);

afterAll(async () => {
  for (const projectId of specs.keys())
    await destroyTenant(projectId, optionsOf(projectId)).catch(() => undefined);
  hostService?.close();
  await world?.stop();
  await squid?.stop();
}, 300_000);

describe("two tenants up", () => {
  it("the world and the metadata server are really there: the host reaches both", async () => {
    expect(await (await fetch(`http://${WORLD_ADDRESS}/`)).text()).toBe(`world:${WORLD_ADDRESS}`);
    expect(await (await fetch(`http://${METADATA_ADDRESS}/`)).text()).toBe("metadata-server");
  });

  it("a container outside the platform's bridges reaches both directly (so the sandboxes' failures are the lockdown)", async () => {
    const network = uniqueName("control-net");
    await docker("network", "create", network);
    try {
      const output = await docker(
        "run",
        "--rm",
        "--network",
        network,
        "--entrypoint",
        "sh",
        image,
        "-c",
        `curl -s --noproxy '*' --max-time 4 http://${WORLD_ADDRESS}/; echo; curl -s --noproxy '*' --max-time 4 http://${METADATA_ADDRESS}/`,
      );
      expect(output).toBe(`world:${WORLD_ADDRESS}\nmetadata-server`);
    } finally {
      await docker("network", "rm", network);
    }
  });

  for (const [self, other] of [
    [tenantA, tenantB],
    [tenantB, tenantA],
  ] as const) {
    it(`${self.slice(0, 5)}: its allowlisted name only, through the proxy; nothing else anywhere`, async () => {
      const own = self === tenantA ? "allowed-a" : "allowed-b";
      const theirs = self === tenantA ? "allowed-b" : "allowed-a";
      const otherSpec = specs.get(other)!;
      const otherGateway = otherSpec.subnet.replace(/0\/24$/, "1");
      const otherSandbox = otherSpec.subnet.replace(/0\/24$/, "2");
      const ownGateway = specs.get(self)!.subnet.replace(/0\/24$/, "1");
      const results = await probe(self, {
        allowedHttp: `http://${own}.sandbox.test/`,
        allowedConnect: `-p http://${own}.sandbox.test:443/`,
        otherTenantsName: `http://${theirs}.sandbox.test/`,
        deniedName: `http://denied.sandbox.test/`,
        rawIpViaProxy: `http://${WORLD_ADDRESS}/`,
        rawIpConnect: `-p http://${WORLD_ADDRESS}:443/`,
        rawIpDirect: `--noproxy '*' http://${WORLD_ADDRESS}/`,
        metadataDirect: `--noproxy '*' http://${METADATA_ADDRESS}/`,
        metadataViaProxy: `http://${METADATA_ADDRESS}/`,
        hostOtherPort: `--noproxy '*' telnet://${ownGateway}:${hostServicePort}`,
        otherContainer: `--noproxy '*' telnet://${otherSandbox}:2222`,
        otherGatewayProxy: `--noproxy '*' -x http://${otherGateway}:${host.squidPort} http://${theirs}.sandbox.test/`,
      });
      // "<proxy's answer to CONNECT>:<HTTP status>"; 000 is no answer at all (dropped).
      expect(results).toEqual({
        allowedHttp: "000:200",
        allowedConnect: "200:200",
        otherTenantsName: "000:403",
        deniedName: "000:403",
        rawIpViaProxy: "000:403",
        rawIpConnect: "403:000",
        rawIpDirect: "000:000",
        metadataDirect: "000:000",
        metadataViaProxy: "000:403",
        hostOtherPort: "000:000",
        otherContainer: "000:000",
        otherGatewayProxy: "000:000",
      });
      const body = await execIn(
        tenantNames(self).container,
        `curl -s --max-time 4 http://${own}.sandbox.test/`,
      );
      expect(body.stdout).toBe(`world:${own}.sandbox.test`);
      // No connection to the other sandbox's sshd, nor to a host port, in either creation order (the
      // other tenant's SSH rule must not accept this one's packets).
      const inSelf = (script: string) => execIn(tenantNames(self).container, script);
      expect(await connects(inSelf, otherSandbox, 2222)).toBe("refused-or-dropped");
      expect(await connects(inSelf, ownGateway, hostServicePort)).toBe("refused-or-dropped");
    });
  }

  it("the probe itself connects where nothing blocks it: a container outside the platform's bridges reaches a sandbox's sshd", async () => {
    const network = uniqueName("control-net");
    await docker("network", "create", network);
    try {
      const outside = (script: string) =>
        docker("run", "--rm", "--network", network, "--entrypoint", "bash", image, "-c", script).then(
          (stdout) => ({
            stdout,
          }),
        );
      expect(await connects(outside, specs.get(tenantA)!.subnet.replace(/0\/24$/, "2"), 2222)).toBe(
        "connected",
      );
    } finally {
      await docker("network", "rm", network);
    }
  });

  it("the sandbox runs as declared: limits, dropped capabilities, labels, no engine socket, no DNS", async () => {
    const gatewayOf = (projectId: string) => specs.get(projectId)!.subnet.replace(/0\/24$/, "1");
    const name = tenantNames(tenantA).container;
    const info = JSON.parse(await docker("inspect", name))[0];
    expect(info.HostConfig).toMatchObject({
      Memory: 1024 * 1024 * 1024,
      NanoCpus: 1e9,
      PidsLimit: 512,
      CapDrop: ["ALL"],
      SecurityOpt: ["no-new-privileges"],
      Privileged: false,
    });
    // The engine's resolver may only forward to the gateway, which the tenant's firewall drops.
    expect(info.HostConfig.Dns).toEqual([gatewayOf(tenantA)]);
    expect(info.Config.Labels).toMatchObject({
      "dev.agent-sandbox.tenant": tenantA,
      "dev.agent-sandbox.owner": `owner-of-${tenantA}`,
      "dev.agent-sandbox.stack": `tenant-${tenantA}`,
      "dev.agent-sandbox.managed-by": "agent-sandbox",
    });
    expect(info.Mounts.map((m: { Source: string }) => m.Source).join(" ")).not.toContain("docker.sock");
    // No DNS, and a lookup fails at once instead of hanging (issue 22.8: it took 20 s), whether through
    // the C library or a resolver of its own (Node's c-ares).
    const timed = async (command: string) => {
      const { stdout } = await execIn(
        name,
        `start=$(date +%s%N); timeout 15 ${command} >/dev/null 2>&1; rc=$?
         echo "$rc $(( ($(date +%s%N) - start) / 1000000 ))"`,
      );
      const [rc, ms] = stdout.split(" ").map(Number);
      return { command, rc, ms };
    };
    const getent = await timed("getent hosts github.com");
    expect(getent.rc).not.toBe(0);
    expect(getent.rc).not.toBe(124); // not ended by the timeout: it failed by itself
    expect(getent.ms).toBeLessThan(5_000);
    // c-ares says how it failed: refused (nothing listens where resolv.conf points), not timed out. Node's own
    // start is not timed (it took 9.6 s once in CI on a loaded machine).
    const cares = await execIn(
      name,
      `timeout 15 node -e 'require("dns").resolve4("github.com", (e) => { console.log(e ? e.code : "resolved"); process.exit(e ? 1 : 0) })'`,
    );
    expect(cares.stdout.trim(), cares.stderr).toBe("ECONNREFUSED");
  });
});

describe("lifecycle", () => {
  it("each sandbox starts once its firewall rules and its bridge are in; its allowlist goes into Squid beside that start", async () => {
    // Until Squid has the tenant's fragment, the base config refuses the subnet (`http_access deny all`:
    // host-config.test.ts; platform-local.test.ts sends a request from outside every tenant's subnet).
    for (const projectId of [tenantA, tenantB]) {
      const stack = await tenantStack(specs.get(projectId)!, optionsOf(projectId));
      const { resources } = (await stack.exportStack()).deployment as {
        resources: { urn: string; type: string; dependencies?: string[] }[];
      };
      const urns = (type: string) => resources.filter((r) => r.type === type).map((r) => r.urn);
      const one = (type: string) => {
        const found = resources.filter((r) => r.type === type);
        expect(found, type).toHaveLength(1);
        return { urn: found[0]!.urn, dependencies: found[0]!.dependencies ?? [] };
      };
      // The Sandbox component is what the firewall is a dependency of: its container registers (and so runs)
      // only once the component has, after the rules were made.
      const sandbox = one("sandbox:tenant:Sandbox");
      const firewall = one("sandbox:host:TenantFirewall");
      const squid = one("sandbox:host:SquidTenant");
      const network = one("sandbox:docker:Network");
      expect(sandbox.dependencies).toContain(firewall.urn);
      expect(sandbox.dependencies).not.toContain(squid.urn);
      // The container is on the bridge (its inputs name the network); the rules name the bridge the spec does,
      // so they go in while the network is made, not after it.
      expect(urns("sandbox:docker:Container")).toHaveLength(1);
      expect(one("sandbox:docker:Container").dependencies).toContain(network.urn);
      expect(firewall.dependencies).not.toContain(network.urn);
    }
  });

  it("stop then start keeps a file written in /home/agent", async () => {
    const name = tenantNames(tenantA).container;
    await execIn(name, "echo 'still here' > keep.txt");
    await upTenant({ ...specs.get(tenantA)!, running: false }, shared);
    expect(await docker("inspect", "--format", "{{.State.Running}}", name)).toBe("false");
    await upTenant({ ...specs.get(tenantA)!, running: true }, shared);
    await waitFor("sandbox running", 30_000, async () =>
      (await execIn(name, "true")).code === 0 ? true : undefined,
    );
    expect((await execIn(name, "cat keep.txt")).stdout).toBe("still here");
  });

  it("out-of-band removal of the container and of one iptables rule is reported by a drift check", async () => {
    const stack = await tenantStack(specs.get(tenantB)!, options);
    expect((await stack.previewRefresh()).changeSummary).toEqual({ same: expect.any(Number) });

    await docker("rm", "--force", tenantNames(tenantB).container);
    const [rule] = (await run("iptables", ["-w", "-S", "SANDBOX-FORWARD"])).stdout
      .split("\n")
      .filter((line) => line.includes(`agent-sandbox:tenant=${tenantB}`) && line.endsWith("-j DROP"));
    await run("sh", ["-c", `iptables -w ${rule!.replace(/^-A /, "-D ")}`]);

    const drift = await stack.previewRefresh();
    expect(drift.changeSummary).toMatchObject({ delete: 1, update: 1 });
    const events: string[] = [];
    await stack.previewRefresh({
      onEvent: (e) =>
        e.resOutputsEvent &&
        events.push(`${e.resOutputsEvent.metadata.op} ${e.resOutputsEvent.metadata.type}`),
    });
    expect(events).toEqual(
      expect.arrayContaining(["delete sandbox:docker:Container", "update sandbox:host:TenantFirewall"]),
    );

    // `up --refresh` repairs both.
    await stack.up({ refresh: true });
    expect(await docker("inspect", "--format", "{{.State.Running}}", tenantNames(tenantB).container)).toBe(
      "true",
    );
    const restored = await probe(tenantB, { rawIpDirect: `--noproxy '*' http://${WORLD_ADDRESS}/` });
    expect(restored).toEqual({ rawIpDirect: "000:000" });
  });

  it("delete removes every container, network, volume, rule, Squid file, backup and the stack; a second delete is a no-op", async () => {
    expect(await leftovers(tenantA)).not.toEqual([]);
    expect(await destroyTenant(tenantA, shared)).toBe("deleted");
    expect(await leftovers(tenantA)).toEqual([]);
    expect(await destroyTenant(tenantA, shared)).toBe("absent");
    // The other tenant is untouched.
    expect((await probe(tenantB, { allowedHttp: "http://allowed-b.sandbox.test/" })).allowedHttp).toBe(
      "000:200",
    );
  });
});

describe("bad input leaves nothing half-made", () => {
  it("an unknown image: a clear error, everything the attempt made is gone", async () => {
    const projectId = `bad-img-${suffix}`;
    const spec = {
      ...specFor(projectId, "10.229.9.0/24", ["allowed-a.sandbox.test"]),
      image: "agent-sandbox/no-such-image:1",
    };
    const error = await createTenant(spec, options).catch((e: Error) => e);
    expect(String(error)).toMatch(
      new RegExp(
        `creating tenant ${projectId} failed and was rolled back: .*image agent-sandbox/no-such-image:1 is not on the engine`,
      ),
    );
    expect(await leftovers(projectId)).toEqual([]);
  });

  it("a missing engine socket: a clear error, nothing left", async () => {
    const projectId = `bad-sock-${suffix}`;
    const spec = specFor(projectId, "10.229.10.0/24", ["allowed-a.sandbox.test"]);
    const error = await createTenant(spec, {
      ...options,
      dockerHost: "unix:///run/agent-sandbox-no-engine.sock",
    }).catch((e: Error) => e);
    expect(String(error)).toMatch(/creating tenant .* failed .*\/run\/agent-sandbox-no-engine\.sock/);
    expect(await leftovers(projectId)).toEqual([]);
  });

  it("a Squid that will not reload: a clear error, nothing left, the other tenant's allowlist intact", async () => {
    const projectId = `bad-squid-${suffix}`;
    const spec = specFor(projectId, "10.229.11.0/24", ["allowed-a.sandbox.test"]);
    await squid.stopSquid();
    try {
      const error = await createTenant(spec, options).catch((e: Error) => e);
      expect(String(error)).toMatch(/Squid did not reload, tenant .* allowlist was not applied/);
      expect(await leftovers(projectId)).toEqual([]);
      expect(await fs.readdir(squidPaths(host).fragmentsDir)).toContain(`tenant-${tenantB}.conf`);
    } finally {
      await squid.ensureSquid();
    }
  });
});
