// The tenants' engine runs keep no automatic logs (runtime/tenants/stack.ts `tenantEngineHome`): the Pulumi
// CLI writes one per run into `$PULUMI_HOME/logs` and lists them all first; a home whose `logs` is a file
// turns that off. The real CLI, a file backend, the key service.
import { execFile } from "node:child_process";
import { promises as fs } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { promisify } from "node:util";
import { Stack } from "@pulumi/pulumi/automation/index.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tenantEngineHome, tenantWorkspace } from "../../runtime/tenants/stack.js";
import { toolchain } from "../../lib/toolchain.js";

let dir: string;
let operatorHome: string;

beforeAll(async () => {
  dir = await fs.mkdtemp(path.join(os.tmpdir(), "engine-home-"));
  operatorHome = path.join(dir, "operator-home");
  await fs.mkdir(path.join(operatorHome, "plugins"), { recursive: true });
});

afterAll(async () => {
  if (dir) await fs.rm(dir, { recursive: true, force: true });
});

const env = () => ({ PULUMI_HOME: operatorHome });

describe("the tenants' engine home", () => {
  it("is made with `logs` a file and `plugins` the operator's, once per process", async () => {
    const workRoot = path.join(dir, "fresh");
    const home = await tenantEngineHome(workRoot, env());
    expect(home).toBe(path.join(workRoot, ".pulumi-home"));
    expect((await fs.lstat(path.join(home, "logs"))).isFile()).toBe(true);
    expect(await fs.readlink(path.join(home, "plugins"))).toBe(path.join(operatorHome, "plugins"));
    expect(((await fs.stat(home)).mode & 0o777).toString(8)).toBe("700");
    // The same promise for the same home: nothing is made twice.
    expect(tenantEngineHome(workRoot, env())).toBe(tenantEngineHome(workRoot, env()));
  });

  it("takes over a home a CLI used before: its logs directory goes, a stale link is re-pointed, a plugins directory is kept", async () => {
    const stale = path.join(dir, "stale", ".pulumi-home");
    await fs.mkdir(path.join(stale, "logs"), { recursive: true });
    await fs.writeFile(path.join(stale, "logs", "pulumi-20261207T120000-1-up.log"), "x");
    await fs.symlink(path.join(dir, "elsewhere", "plugins"), path.join(stale, "plugins"));
    await tenantEngineHome(path.dirname(stale), env());
    expect((await fs.lstat(path.join(stale, "logs"))).isFile()).toBe(true);
    expect(await fs.readlink(path.join(stale, "plugins"))).toBe(path.join(operatorHome, "plugins"));

    const own = path.join(dir, "own", ".pulumi-home");
    await fs.mkdir(path.join(own, "plugins", "resource-x-v1.0.0"), { recursive: true });
    await tenantEngineHome(path.dirname(own), env());
    expect((await fs.lstat(path.join(own, "plugins"))).isDirectory()).toBe(true);
    expect(await fs.readdir(path.join(own, "plugins"))).toEqual(["resource-x-v1.0.0"]);
  });

  it("a tenant stack's CLI runs leave no log anywhere, where the same CLI with a plain home leaves one per run; the operator's plugins are listed", async () => {
    const previous = process.env.PULUMI_HOME;
    process.env.PULUMI_HOME = operatorHome;
    try {
      await fs.mkdir(path.join(dir, "state"));
      const options = {
        backendUrl: `file://${path.join(dir, "state")}`,
        workRoot: path.join(dir, "work"),
        passphrase: "engine-home",
      };
      const workspace = await tenantWorkspace(path.join(options.workRoot, "t"), async () => ({}), options);
      const home = workspace.envVars.PULUMI_HOME!;
      expect(home).toBe(path.join(options.workRoot, ".pulumi-home"));
      const stack = await Stack.create("tenant-engine-home", workspace);
      await stack.up({ onOutput: () => undefined });
      await stack.destroy({ onOutput: () => undefined });
      expect((await fs.lstat(path.join(home, "logs"))).isFile()).toBe(true);
      // The operator's home has the Automation API's one check of the CLI (`pulumi version`, once per
      // process) at most, and nothing of the stack's runs.
      const operatorLogs = await fs.readdir(path.join(operatorHome, "logs")).catch(() => []);
      expect(
        operatorLogs.filter((name) => !name.endsWith("-version.log")),
        operatorLogs.join(", "),
      ).toEqual([]);
      expect(operatorLogs.length).toBeLessThanOrEqual(1);

      // A plugin the operator installed is the engine's too (`pulumi plugin ls` reads PULUMI_HOME/plugins).
      await fs.mkdir(path.join(operatorHome, "plugins", "resource-probe-v1.2.3"));
      await fs.writeFile(
        path.join(operatorHome, "plugins", "resource-probe-v1.2.3", "pulumi-resource-probe"),
        "",
      );
      const chain = toolchain();
      const run = (pulumiHome: string, ...args: string[]) =>
        promisify(execFile)(chain.pulumiBin, args, {
          env: { ...process.env, ...chain.env, PULUMI_HOME: pulumiHome },
          cwd: path.join(options.workRoot, "t"),
        });
      expect((await run(home, "plugin", "ls")).stdout).toMatch(/probe\s+resource\s+1\.2\.3/);

      // The control: the same CLI with a plain home keeps a log of each run.
      const plain = path.join(dir, "plain-home");
      await fs.mkdir(plain);
      await run(plain, "plugin", "ls");
      await run(plain, "plugin", "ls");
      expect(
        (await fs.readdir(path.join(plain, "logs"))).filter((name) => name.endsWith(".log")),
      ).toHaveLength(2);
    } finally {
      if (previous === undefined) delete process.env.PULUMI_HOME;
      else process.env.PULUMI_HOME = previous;
    }
  }, 180_000);
});
