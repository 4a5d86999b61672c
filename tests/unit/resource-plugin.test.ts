// What a Pulumi resource plugin says of its version (lib/resource-plugin.ts), and the runtime's check of the
// Kubernetes provider its kubernetes stacks would run (lib/kubernetes-provider.ts): real plugins (Pulumi's own
// Node.js provider server) of a given version, and files in a plugin's place that are none.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, utimesSync, writeFileSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { checkKubernetesProvider, knownKubernetesProviderProblem } from "../../lib/kubernetes-provider.js";
import { knownPluginVersion, pluginVersion, resourcePluginVersion } from "../../lib/resource-plugin.js";
import { kubernetesProviderBin, pinnedKubernetesProviderVersion } from "../../lib/toolchain.js";
import { writeResourcePlugin } from "../helpers/resource-plugin.js";

const dir = mkdtempSync(path.join(os.tmpdir(), "resource-plugin-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const starts = (log: string) => readFileSync(log, "utf8").split("\n").filter(Boolean).length;

describe("resourcePluginVersion", () => {
  it("starts a plugin as the engine does and reads the version it answers over gRPC, then stops it", async () => {
    const bin = path.join(dir, "v4.0.1", "pulumi-resource-kubernetes");
    writeResourcePlugin(bin, { versioned: "4.0.1" });
    expect(await resourcePluginVersion(bin)).toBe("4.0.1");
  });

  it("names what a file in a plugin's place did instead: exited, printed no port, never answered", async () => {
    const exits = path.join(dir, "exits", "plugin");
    writeResourcePlugin(exits, { exits: 3, says: "no such flag" });
    await expect(resourcePluginVersion(exits)).rejects.toThrow(
      "it exited (status 3) before it announced a port; it said: no such flag",
    );
    const prints = path.join(dir, "prints", "plugin");
    writeResourcePlugin(prints, { prints: "Usage: something else" });
    await expect(resourcePluginVersion(prints)).rejects.toThrow(
      `its first line is not a port, as a Pulumi plugin's is: "Usage: something else"`,
    );
    const hangs = path.join(dir, "hangs", "plugin");
    writeResourcePlugin(hangs, { hangs: true });
    await expect(resourcePluginVersion(hangs, 500)).rejects.toThrow(
      "it did not announce its port and answer within 500 ms",
    );
    // A wrapper that leaves a child behind: the whole process group goes with it.
    const wrapper = path.join(dir, "wrapper", "plugin");
    const marker = `${Math.floor(Math.random() * 1e6) + 1_000_000}`;
    writeResourcePlugin(wrapper, { hangs: true });
    writeFileSync(wrapper, `#!/bin/sh\nsleep ${marker} &\nexec sleep 60\n`);
    await expect(resourcePluginVersion(wrapper, 500)).rejects.toThrow("within 500 ms");
    expect(execFileSync("ps", ["-eo", "args"], { encoding: "utf8" })).not.toContain(`sleep ${marker}`);
    await expect(resourcePluginVersion(path.join(dir, "absent"))).rejects.toThrow(
      /it did not start: spawn .*absent ENOENT before it announced a port/,
    );
  });

  it("is asked once per file as it is on disk: again after the file changes, not before", async () => {
    const bin = path.join(dir, "cached", "plugin");
    const log = path.join(dir, "cached.log");
    writeResourcePlugin(bin, { versioned: "4.1.0" }, log);
    expect(knownPluginVersion(bin)).toBeUndefined();
    expect(await pluginVersion(bin)).toBe("4.1.0");
    expect(await pluginVersion(bin)).toBe("4.1.0");
    expect(knownPluginVersion(bin)).toEqual({ version: "4.1.0" });
    expect(starts(log)).toBe(1);
    // Replaced in place by another version: the next question starts it again.
    writeResourcePlugin(bin, { versioned: "4.2.0" }, log);
    utimesSync(bin, new Date(), new Date(Date.now() + 5_000));
    expect(knownPluginVersion(bin)).toBeUndefined();
    expect(await pluginVersion(bin)).toBe("4.2.0");
    expect(starts(log)).toBe(2);
  });
});

describe("the Kubernetes provider kubernetes stacks would run", () => {
  const version = pinnedKubernetesProviderVersion();

  it("is refused when it reports another version than the one pinned, naming both, where it is and the fix", async () => {
    const env = { ...process.env, AGENT_SANDBOX_CACHE: path.join(dir, "other"), PULUMI_HOME: dir };
    const bin = kubernetesProviderBin(env);
    writeResourcePlugin(bin, { versioned: "4.0.1" });
    // Not asked yet: nothing is known that refuses it (each operation asks before its engine starts).
    expect(knownKubernetesProviderProblem(env)).toBeUndefined();
    const checked = await checkKubernetesProvider(env);
    const problem =
      `Pulumi's Kubernetes provider at ${bin} reports v4.0.1 where v${version} is pinned (package.json's ` +
      `@pulumi/kubernetes): scripts/setup.sh builds v${version} (npm run setup), or \`pulumi plugin install ` +
      `resource kubernetes ${version}\``;
    expect(checked).toEqual({ problem });
    expect(knownKubernetesProviderProblem(env)).toBe(problem);
  });

  it("is refused when it cannot say its version, naming what it did", async () => {
    const env = { ...process.env, AGENT_SANDBOX_CACHE: path.join(dir, "broken"), PULUMI_HOME: dir };
    const bin = kubernetesProviderBin(env);
    writeResourcePlugin(bin, { exits: 1, says: "segmentation fault" });
    const checked = await checkKubernetesProvider(env);
    expect(checked).toEqual({
      problem: expect.stringMatching(
        `^Pulumi's Kubernetes provider at ${bin} did not say its version \\(v${version.replace(/\./g, "\\.")} is pinned\\): it exited \\(status 1\\) before it announced a port; it said: segmentation fault: `,
      ),
    });
  });

  it("is taken when it reports the pinned version, and when it is missing says where it looked", async () => {
    const env = { ...process.env, AGENT_SANDBOX_CACHE: path.join(dir, "pinned"), PULUMI_HOME: dir };
    const bin = kubernetesProviderBin(env);
    writeResourcePlugin(bin, { versioned: version });
    expect(await checkKubernetesProvider(env)).toEqual({ found: bin, version });
    expect(knownKubernetesProviderProblem(env)).toBeUndefined();
    const nowhere = { ...process.env, AGENT_SANDBOX_CACHE: path.join(dir, "nowhere"), PULUMI_HOME: dir };
    const missing = await checkKubernetesProvider(nowhere);
    expect(missing).toEqual({
      problem: expect.stringContaining(`v${version} is not installed (looked at ${dir}/nowhere/`),
    });
    expect(knownKubernetesProviderProblem(nowhere)).toBe((missing as { problem: string }).problem);
  });
});
