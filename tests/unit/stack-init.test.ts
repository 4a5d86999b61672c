// A tenant stack made without the CLI (runtime/tenants/stack-init.ts) is the stack `pulumi stack init` makes
// with the key service's provider, and the real engine runs it as one: its secrets sealed by its own data
// key, its config's secrets too, listed, destroyed and removed by the CLI. A backend the CLI has not laid
// out yet is left to the CLI. The real Pulumi CLI, a file backend, the key service.
import { execFile } from "node:child_process";
import { existsSync, promises as fs } from "node:fs";
import { createHash } from "node:crypto";
import * as os from "node:os";
import * as path from "node:path";
import { promisify } from "node:util";
import * as pulumi from "@pulumi/pulumi";
import { Stack, type LocalWorkspace } from "@pulumi/pulumi/automation/index.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { initTenantStackFiles } from "../../runtime/tenants/stack-init.js";
import { fileBackendStacksDir, TENANT_PROJECT, tenantWorkspace } from "../../runtime/tenants/stack.js";
import {
  openWithStackKey,
  STACK_KEY_NAME,
  STACK_KEY_PROVIDER,
  stackKey,
} from "../../runtime/tenants/stack-keys.js";

const PASSPHRASE = "stack-init";
const SECRET = "stack-init-secret-4b1e";
let dir: string;
let options: { backendUrl: string; workRoot: string; passphrase: string };

beforeAll(async () => {
  dir = await fs.mkdtemp(path.join(os.tmpdir(), "stack-init-"));
  await fs.mkdir(path.join(dir, "state"));
  options = {
    backendUrl: `file://${path.join(dir, "state")}`,
    workRoot: path.join(dir, "work"),
    passphrase: PASSPHRASE,
  };
});

afterAll(async () => {
  if (dir) await fs.rm(dir, { recursive: true, force: true });
});

const program = async () => ({ plain: "plain-output", secret: pulumi.secret(SECRET) });
const workspaceOf = (stack: string) => tenantWorkspace(path.join(options.workRoot, stack), program, options);
const ours = async (stack: string, workspace: LocalWorkspace) =>
  initTenantStackFiles({
    backendUrl: options.backendUrl,
    project: TENANT_PROJECT,
    stack,
    workDir: workspace.workDir,
    passphrase: PASSPHRASE,
    cliVersion: workspace.pulumiVersion,
  });
const checkpointOf = async (stack: string) =>
  JSON.parse(
    await fs.readFile(path.join(fileBackendStacksDir(options.backendUrl)!, `${stack}.json`), "utf8"),
  );
const configOf = async (stack: string) =>
  Object.fromEntries(
    (await fs.readFile(path.join(options.workRoot, stack, `Pulumi.${stack}.yaml`), "utf8"))
      .trim()
      .split("\n")
      .map((line) => line.split(": ") as [string, string]),
  );

describe("a tenant stack made without the CLI", () => {
  it("leaves a backend the CLI has not laid out to the CLI; once it has, makes the files its `stack init` makes", async () => {
    const cliWorkspace = await workspaceOf("tenant-by-cli");
    expect(await ours("tenant-by-cli", cliWorkspace)).toBe(false);
    expect(existsSync(path.join(fileBackendStacksDir(options.backendUrl)!, "tenant-by-cli.json"))).toBe(
      false,
    );
    await Stack.create("tenant-by-cli", cliWorkspace);

    const workspace = await workspaceOf("tenant-ours");
    expect(await ours("tenant-ours", workspace)).toBe(true);
    const [theirs, mine] = [await checkpointOf("tenant-by-cli"), await checkpointOf("tenant-ours")];
    const shape = (checkpoint: typeof theirs, stack: string) => ({
      ...checkpoint,
      checkpoint: {
        ...checkpoint.checkpoint,
        stack: checkpoint.checkpoint.stack.replace(stack, "<stack>"),
        latest: {
          ...checkpoint.checkpoint.latest,
          manifest: { ...checkpoint.checkpoint.latest.manifest, time: "<time>" },
          secrets_providers: {
            ...checkpoint.checkpoint.latest.secrets_providers,
            state: { ...checkpoint.checkpoint.latest.secrets_providers.state, encryptedkey: "<key>" },
          },
        },
      },
    });
    expect(shape(mine, "tenant-ours")).toEqual(shape(theirs, "tenant-by-cli"));
    expect(mine.checkpoint.latest.manifest.magic).toBe(
      createHash("sha256").update(mine.checkpoint.latest.manifest.version).digest("hex"),
    );
    const [theirConfig, myConfig] = [await configOf("tenant-by-cli"), await configOf("tenant-ours")];
    expect(Object.keys(myConfig)).toEqual(Object.keys(theirConfig));
    expect(myConfig.secretsprovider).toBe(STACK_KEY_PROVIDER);
    // Its data key is 32 bytes sealed by the key service's key, the same in its config and its checkpoint.
    expect(mine.checkpoint.latest.secrets_providers.state.encryptedkey).toBe(myConfig.encryptedkey);
    const sealed = Buffer.from(myConfig.encryptedkey!, "base64").toString("utf8");
    const key = await stackKey(PASSPHRASE, STACK_KEY_NAME);
    expect(openWithStackKey(key, STACK_KEY_NAME, sealed)).toHaveLength(32);
    // Two stacks, two data keys.
    expect(myConfig.encryptedkey).not.toBe(theirConfig.encryptedkey);
  }, 120_000);

  it("is one the engine runs: its secret output sealed in the state and read back, a secret config value, listed, destroyed, removed", async () => {
    const workspace = await workspaceOf("tenant-run");
    expect(await ours("tenant-run", workspace)).toBe(true);
    const stack = await Stack.select("tenant-run", workspace);
    await stack.setConfig("note", { value: "config-secret-7d", secret: true });
    const result = await stack.up({ onOutput: () => undefined });
    expect(result.summary.result).toBe("succeeded");
    expect(result.outputs.secret).toEqual({ value: SECRET, secret: true });
    expect(result.outputs.plain).toEqual({ value: "plain-output", secret: false });
    const state = JSON.stringify(await checkpointOf("tenant-run"));
    expect(state).not.toContain(SECRET);
    expect(state).toContain("plain-output");
    expect(await fs.readFile(path.join(workspace.workDir, "Pulumi.tenant-run.yaml"), "utf8")).not.toContain(
      "config-secret-7d",
    );
    expect((await stack.getConfig("note")).value).toBe("config-secret-7d");
    expect((await workspace.listStacks()).map((s) => s.name)).toContain("tenant-run");
    // The CLI's own `stack ls` of the backend, as an operator's (npm run tenant-pulumi) would see it.
    const { stdout } = await promisify(execFile)(
      path.join(workspace.pulumiCommand.command),
      ["stack", "ls", "--json"],
      {
        cwd: workspace.workDir,
        env: { ...process.env, ...workspace.envVars },
      },
    );
    expect(JSON.parse(stdout).map((s: { name: string }) => s.name)).toContain("tenant-run");
    await stack.destroy({ onOutput: () => undefined });
    await workspace.removeStack("tenant-run");
    expect(existsSync(path.join(fileBackendStacksDir(options.backendUrl)!, "tenant-run.json"))).toBe(false);
  }, 180_000);

  it("a create killed after the config, before the checkpoint, is made again whole with a key of its own", async () => {
    const workspace = await workspaceOf("tenant-again");
    await fs.writeFile(
      path.join(workspace.workDir, "Pulumi.tenant-again.yaml"),
      `secretsprovider: ${STACK_KEY_PROVIDER}\nencryptedkey: ${Buffer.from("vault:v1:left-behind").toString("base64")}\n`,
    );
    expect(await ours("tenant-again", workspace)).toBe(true);
    const stack = await Stack.select("tenant-again", workspace);
    expect((await stack.up({ onOutput: () => undefined })).outputs.secret?.value).toBe(SECRET);
    expect(
      (await fs.readdir(fileBackendStacksDir(options.backendUrl)!)).filter((name) => name.endsWith(".tmp")),
    ).toEqual([]);
    await stack.destroy({ onOutput: () => undefined });
  }, 180_000);
});
