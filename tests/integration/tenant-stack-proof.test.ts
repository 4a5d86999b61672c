// A stack like the tenant stacks: inline program, file:// backend in a temp dir, resources served by the
// project's own TypeScript plugin and by command:local:Command, driven through the Automation API.
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, promises as fs } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { promisify } from "node:util";
import * as command from "@pulumi/command";
import * as pulumi from "@pulumi/pulumi";
import { LocalWorkspace, PulumiCommand, type Stack } from "@pulumi/pulumi/automation/index.js";
import Docker from "dockerode";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LABELS } from "../../lib/constants.js";
import { DockerNetwork } from "../../components/resources/docker-network.js";
import { HostFile } from "../../components/resources/host-file.js";
import { purgeRemovedStackState } from "../../runtime/stack-state.js";
import { toolchain } from "../../lib/toolchain.js";

const run = promisify(execFile);
const docker = new Docker({ socketPath: "/var/run/docker.sock" });
const suffix = randomBytes(3).toString("hex");
const networkName = `proof-${suffix}`;
const bridgeName = `sbxp-${suffix}`;

let workDir: string;
let stateDir: string;
let hostDir: string;
let stack: Stack;
let tempBefore: Set<string>;
let pluginsBefore: Set<string>;

/** Temp entries that Pulumi or this test might create. */
async function pulumiTempEntries(): Promise<string[]> {
  return (await fs.readdir(os.tmpdir())).filter((entry) => /^(pulumi|automation|proof-)/.test(entry));
}

/** Plugin processes whose command line mentions this run's work dir or our plugin bundles. */
async function pluginProcesses(): Promise<string[]> {
  const { stdout } = await run("ps", ["-eo", "pid=,args="]);
  return stdout.split("\n").filter((line) => /dist\/plugins\/(sandbox|command)\.mjs/.test(line));
}

beforeAll(async () => {
  tempBefore = new Set(await pulumiTempEntries());
  pluginsBefore = new Set(await pluginProcesses());
  const base = await fs.mkdtemp(path.join(os.tmpdir(), "proof-"));
  workDir = path.join(base, "work");
  stateDir = path.join(base, "state");
  hostDir = path.join(base, "host");
  await Promise.all([workDir, stateDir, hostDir].map((dir) => fs.mkdir(dir)));

  const chain = toolchain();
  const program = async () => {
    const config = new HostFile("config", {
      path: path.join(hostDir, "squid-fragment.conf"),
      content: "acl proof dstdomain .example.test\n",
      mode: "0640",
    });
    const network = new DockerNetwork("net", {
      name: networkName,
      subnet: "10.213.7.0/24",
      gateway: "10.213.7.1",
      bridgeName,
      labels: { [LABELS.tenant]: "proof" },
    });
    const probe = new command.local.Command(
      "probe",
      {
        create: pulumi.interpolate`printf '%s %s' "$(sha256sum < ${config.path} | cut -c1-12)" "$NET_ID"`,
        environment: { NET_ID: network.networkId },
      },
      { dependsOn: [config, network] },
    );
    return {
      configSha: config.sha256,
      networkId: network.networkId,
      bridge: network.bridgeName,
      probe: probe.stdout,
    };
  };
  stack = await LocalWorkspace.createStack(
    { stackName: `tenant-proof-${suffix}`, projectName: "agent-sandbox-proof", program },
    {
      workDir,
      pulumiCommand: await PulumiCommand.get({ root: chain.pulumiRoot, skipVersionCheck: false }),
      projectSettings: {
        name: "agent-sandbox-proof",
        runtime: "nodejs",
        backend: { url: `file://${stateDir}` },
      },
      envVars: { ...chain.env, PULUMI_CONFIG_PASSPHRASE: "proof-only" },
    },
  );
});

afterAll(async () => {
  // Best effort when a test failed midway; the last test asserts the clean state itself.
  await stack?.destroy().catch(() => undefined);
  await docker
    .getNetwork(networkName)
    .remove()
    .catch(() => undefined);
  if (workDir) await fs.rm(path.dirname(workDir), { recursive: true, force: true });
});

describe("a tenant-like stack through the Automation API", () => {
  it("up creates the plugin's resources and the command, with outputs", async () => {
    const result = await stack.up();
    expect(result.summary.result).toBe("succeeded");
    expect(result.summary.resourceChanges).toEqual({ create: 4 }); // the stack, file, network, command
    const outputs = result.outputs;

    const file = path.join(hostDir, "squid-fragment.conf");
    expect(await fs.readFile(file, "utf8")).toBe("acl proof dstdomain .example.test\n");
    expect((await fs.stat(file)).mode & 0o777).toBe(0o640);
    const { stdout: sha } = await run("sha256sum", [file]);
    expect(outputs.configSha?.value).toBe(sha.split(" ")[0]);

    const network = await docker.getNetwork(networkName).inspect();
    expect(outputs.networkId?.value).toBe(network.Id);
    expect(network.Options?.["com.docker.network.bridge.name"]).toBe(bridgeName);
    expect(network.EnableIPv6).toBe(false);
    expect(network.Labels?.[LABELS.tenant]).toBe("proof");
    expect(network.Labels?.[LABELS.managedBy]).toBe("agent-sandbox");
    expect(outputs.probe?.value).toBe(`${sha.slice(0, 12)} ${network.Id}`);
  });

  it("refresh and preview find nothing to change", async () => {
    await stack.refresh({ expectNoChanges: true });
    const preview = await stack.preview({ expectNoChanges: true });
    expect(preview.changeSummary).toEqual({ same: 4 });
  });

  it("a refresh preview reports a hand-edited file and a removed network as drift", async () => {
    await fs.writeFile(path.join(hostDir, "squid-fragment.conf"), "acl proof dstdomain .evil.test\n");
    await docker.getNetwork(networkName).remove();

    const drift = await stack.previewRefresh();
    expect(drift.changeSummary).toMatchObject({ update: 1, delete: 1 });
    await expect(stack.refresh({ previewOnly: true, expectNoChanges: true })).rejects.toThrow(
      /no changes were expected/i,
    );

    // A preview is only a preview: the state still believes in the old file and network.
    const state = await stack.exportStack();
    const types = state.deployment.resources.map((r: { type: string }) => r.type);
    expect(types).toEqual(expect.arrayContaining(["sandbox:host:File", "sandbox:docker:Network"]));

    // `up --refresh` puts the declared state back.
    const repaired = await stack.up({ refresh: true });
    expect(repaired.summary.result).toBe("succeeded");
    expect(await fs.readFile(path.join(hostDir, "squid-fragment.conf"), "utf8")).toBe(
      "acl proof dstdomain .example.test\n",
    );
    expect((await docker.getNetwork(networkName).inspect()).Options?.["com.docker.network.bridge.name"]).toBe(
      bridgeName,
    );
  });

  it("destroy and removeStack leave no resource, state file or plugin process behind", async () => {
    const destroyed = await stack.destroy();
    expect(destroyed.summary.result).toBe("succeeded");
    await stack.workspace.removeStack(stack.name);
    const purged = await purgeRemovedStackState(`file://${stateDir}`, "agent-sandbox-proof", stack.name);
    expect(purged.length).toBeGreaterThan(0);

    expect(existsSync(path.join(hostDir, "squid-fragment.conf"))).toBe(false);
    await expect(docker.getNetwork(networkName).inspect()).rejects.toMatchObject({ statusCode: 404 });
    const stackFiles = (await fs.readdir(stateDir, { recursive: true })).filter((f) =>
      String(f).includes(`tenant-proof-${suffix}`),
    );
    expect(stackFiles).toEqual([]);
    expect((await pluginProcesses()).filter((p) => !pluginsBefore.has(p))).toEqual([]);
    await fs.rm(path.dirname(workDir), { recursive: true });
    expect((await pulumiTempEntries()).filter((entry) => !tempBefore.has(entry))).toEqual([]);
  });
});
