// Tenant operations attached to one long-lived `sandbox` provider process (issue 17): concurrent
// operations on different stacks through it, no provider process started per operation, and a provider
// killed during an operation: that operation fails, the retry gets a new process and finishes.
import { execFile } from "node:child_process";
import { promises as fs } from "node:fs";
import * as path from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tenantNames } from "../../components/tenant/names.js";
import { squidPaths } from "../../lib/host/squid.js";
import {
  createTenant,
  destroyTenant,
  upTenant,
  type TenantStackOptions,
} from "../../runtime/tenants/stack.js";
import { sharedProviderFor } from "../../runtime/tenants/shared-provider.js";
import { toolchain } from "../../lib/toolchain.js";
import { buildSandboxImage } from "../../sandbox-image/build.js";
import type { TenantSpecInput } from "../../components/tenant/spec.js";
import { execIn, uniqueName } from "../helpers/containers.js";
import { isolatedSquidHost, tenantLeftovers } from "../helpers/host.js";

const run = promisify(execFile);
let squid: Awaited<ReturnType<typeof isolatedSquidHost>>;
let options: TenantStackOptions;
let image: string;
const suffix = uniqueName("s").slice(2);
const specs = [0, 1].map((i) => `shp-${i}-${suffix}`);

function specFor(projectId: string, index: number, running = true): TenantSpecInput {
  const host = squid.host;
  return {
    projectId,
    ownerId: `owner-of-${projectId}`,
    mode: "local",
    image,
    running,
    subnet: `10.231.${40 + index}.0/24`,
    sshHostPort: 27840 + index,
    allowlist: ["example.test"],
    host: {
      squidPort: host.squidPort,
      squidConfigFile: squidPaths(host).config,
      squidFragmentsDir: squidPaths(host).fragmentsDir,
      backupRoot: path.join(host.dataDir, "backups"),
    },
  };
}

/**
 * `sandbox` provider processes an engine started itself: the bundle (bin/pulumi-resource-sandbox execs
 * node on it) as a child of a `pulumi` CLI. A shared provider is the runtime's child, never the CLI's.
 */
async function engineStartedPlugins(): Promise<string[]> {
  const { stdout } = await run("ps", ["-eo", "pid=,ppid=,args="]);
  const processes = stdout
    .split("\n")
    .filter(Boolean)
    .map((line) => line.trim().split(/\s+/))
    .map(([pid, ppid, ...args]) => ({ pid: pid!, ppid: ppid!, args: args.join(" ") }));
  const command = new Map(processes.map((p) => [p.pid, p.args]));
  return processes
    .filter((p) => p.args.includes("dist/plugins/sandbox.mjs"))
    .filter((p) => /(^|\/)pulumi\s/.test(command.get(p.ppid) ?? ""))
    .map((p) => `${p.pid} (parent: ${command.get(p.ppid)})`);
}

const provider = () => sharedProviderFor({ ...toolchain().env, DOCKER_HOST: options.dockerHost! });

beforeAll(async () => {
  squid = await isolatedSquidHost();
  image = (await buildSandboxImage({ base: "local", log: () => undefined })).tag;
  await fs.mkdir(path.join(squid.host.dataDir, "state"), { recursive: true });
  options = {
    backendUrl: `file://${path.join(squid.host.dataDir, "state")}`,
    workRoot: path.join(squid.host.dataDir, "work"),
    passphrase: "integration-test",
    dockerHost: "unix:///var/run/docker.sock",
    sharedProvider: true,
  };
}, 300_000);

afterAll(async () => {
  for (const projectId of specs) await destroyTenant(projectId, options).catch(() => undefined);
  await squid?.stop();
}, 300_000);

describe("a shared provider", () => {
  it("serves concurrent creates of two stacks, and the engine starts no plugin of its own", async () => {
    const seen = new Set<string>();
    const watching = setInterval(() => {
      void engineStartedPlugins().then((found) => found.forEach((p) => seen.add(p)));
    }, 50);
    try {
      await Promise.all(specs.map((projectId, i) => createTenant(specFor(projectId, i), options)));
    } finally {
      clearInterval(watching);
    }
    expect([...seen]).toEqual([]);
    const pid = provider().pid;
    expect(pid).toBeGreaterThan(0);
    for (const projectId of specs) {
      const { stdout } = await execIn(tenantNames(projectId).container, "id -un");
      expect(stdout.trim()).toBe("agent");
    }
    // Both stacks' resources were made by the same process, which still runs.
    await run("kill", ["-0", String(pid)]);
  }, 240_000);

  it("killed during an operation: that operation fails, the retry gets a new process and finishes", async () => {
    const [victim] = specs;
    const before = provider().pid!;
    let killed = false;
    const failed = await upTenant(specFor(victim!, 0, false), {
      ...options,
      onEvent: (event) => {
        // The first resource step: the engine is talking to the provider.
        if (!killed && event.resourcePreEvent?.metadata.type.startsWith("sandbox:docker:")) {
          killed = true;
          process.kill(before, "SIGKILL");
        }
      },
    }).then(
      () => undefined,
      (error: Error) => error,
    );
    expect(killed).toBe(true);
    expect(failed).toBeInstanceOf(Error);
    // The retry: a new process, and the stop converges.
    await upTenant(specFor(victim!, 0, false), options, true);
    expect(provider().pid).not.toBe(before);
    const { stdout } = await run("docker", [
      "inspect",
      "--format",
      "{{.State.Running}}",
      tenantNames(victim!).container,
    ]);
    expect(stdout.trim()).toBe("false");
    // The other tenant was not touched and keeps running.
    const other = await execIn(tenantNames(specs[1]!).container, "echo alive");
    expect(other.stdout.trim()).toBe("alive");
  }, 240_000);

  it("deletes through it and leaves nothing", async () => {
    for (const projectId of specs) {
      expect(await destroyTenant(projectId, options)).toBe("deleted");
      expect(await tenantLeftovers(squid.host, projectId)).toEqual([]);
    }
  }, 240_000);
});
