// lib/deferred-requires.ts in a process of its own, as the runtime's bundle starts (runtime/start.ts): the Pulumi
// SDK loads without TypeScript's compiler and npm's Arborist, and a function serialized afterwards gets both,
// for real (the serializer parses the function with the compiler and reads the package tree with Arborist).
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { REPO_ROOT } from "../../lib/toolchain.js";

const exec = promisify(execFile);

/** Runs `body` (ESM, top-level await) with tsx in a fresh Node.js process; its last line of output, parsed. */
async function inProcess(body: string): Promise<Record<string, unknown>> {
  const { stdout } = await exec(process.execPath, ["--import", "tsx", "--input-type=module", "-e", body], {
    cwd: REPO_ROOT,
    timeout: 60_000,
  });
  return JSON.parse(stdout.trim().split("\n").at(-1)!) as Record<string, unknown>;
}

const LOADED = `
const { createRequire } = await import("node:module");
const cache = () => Object.keys(createRequire(import.meta.url).cache);
const loaded = () => ({
  typescript: cache().some((f) => f.includes("/node_modules/typescript/")),
  arborist: cache().some((f) => f.includes("/node_modules/@npmcli/arborist/")),
});`;

describe("the Pulumi SDK's closure serializer, deferred", () => {
  it("the SDK and its Automation API load without the compiler and Arborist; a serialized function loads both", async () => {
    const result = await inProcess(`
      const { deferPulumiClosureDependencies } = await import("./lib/deferred-requires.ts");
      deferPulumiClosureDependencies();
      ${LOADED}
      const pulumi = await import("@pulumi/pulumi");
      await import("@pulumi/pulumi/automation/index.js");
      const atStart = loaded();
      const rss = process.memoryUsage().rss;
      const answer = 42;
      const serialized = await pulumi.runtime.serializeFunction(() => answer, { isFactoryFunction: false });
      console.log(JSON.stringify({ atStart, afterUse: loaded(), text: serialized.text, rss }));
    `);
    expect(result.atStart).toEqual({ typescript: false, arborist: false });
    expect(result.afterUse).toEqual({ typescript: true, arborist: false });
    // The real serializer's output: the function's text and the value it captured.
    expect(result.text).toContain("answer");
    expect(result.text).toContain("42");
  });

  it("without it the SDK loads both at once (what the deferral saves is there to save)", async () => {
    const result = await inProcess(`
      ${LOADED}
      await import("@pulumi/pulumi/automation/index.js");
      console.log(JSON.stringify({ atStart: loaded() }));
    `);
    expect(result.atStart).toEqual({ typescript: true, arborist: true });
  });
});
