// lib/promise-stacks.ts in a process of its own, as the runtime's bundle starts (runtime/start.ts): the Pulumi
// SDK's registrations format no stack trace per promise, while the SDK's own bookkeeping (the leak count at
// exit) goes on; with PULUMI_DEBUG_PROMISE_LEAKS the SDK's stacks are kept.
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { REPO_ROOT } from "../../lib/toolchain.js";

const exec = promisify(execFile);

/** Runs `body` (ESM, top-level await) with tsx in a fresh Node.js process; its last line of output, parsed. */
async function inProcess(body: string, env: NodeJS.ProcessEnv = {}): Promise<Record<string, unknown>> {
  const { stdout } = await exec(process.execPath, ["--import", "tsx", "--input-type=module", "-e", body], {
    cwd: REPO_ROOT,
    timeout: 60_000,
    env: { ...process.env, PULUMI_DEBUG_PROMISE_LEAKS: "", ...env },
  });
  return JSON.parse(stdout.trim().split("\n").at(-1)!) as Record<string, unknown>;
}

/**
 * Ten resources registered under the SDK's mocks, counting every stack trace formatted while they are and
 * how many of those the SDK's debuggablePromise asked for (a frame of runtime/debuggable.js in it); then one
 * promise of the SDK's own, made directly, and its recorded stack.
 */
const REGISTER = (install: boolean) => `
  const { withoutPromiseStacks } = await import("./lib/promise-stacks.ts");
  const installed = ${install} ? withoutPromiseStacks() : false;
  const pulumi = await import("@pulumi/pulumi");
  const { createRequire } = await import("node:module");
  const debuggable = createRequire(import.meta.url)("@pulumi/pulumi/runtime/debuggable.js");
  let formatted = 0, bySdk = 0;
  Error.prepareStackTrace = (error, frames) => {
    formatted++;
    if (frames.some((frame) => (frame.getFileName() ?? "").endsWith("/runtime/debuggable.js"))) bySdk++;
    return String(error) + frames.map((frame) => "\\n    at " + frame).join("");
  };
  await pulumi.runtime.setMocks(
    { newResource: (args) => ({ id: args.name + "-id", state: args.inputs }), call: () => ({}) },
    "project",
    "stack",
    false,
  );
  class Thing extends pulumi.CustomResource {
    constructor(name, args) { super("test:index:Thing", name, args); }
  }
  const ids = await Promise.all(
    Array.from({ length: 10 }, (_, i) =>
      new Promise((resolve) => new Thing("thing-" + i, { size: i }).id.apply(resolve)),
    ),
  );
  const during = { formatted, bySdk };
  // The SDK records the stack on the promise it is given (and answers another, chained to it).
  const own = Promise.resolve(1);
  await debuggable.debuggablePromise(own, "a promise of the test's");
  console.log(JSON.stringify({ installed, ids, during, ownStack: own._debugStackTrace, limit: Error.stackTraceLimit }));
`;

describe("the Pulumi SDK's promises without a stack trace each", () => {
  it("registrations format no stack for the SDK's promises; its bookkeeping goes on", async () => {
    const result = await inProcess(REGISTER(true));
    expect(result.installed).toBe(true);
    expect(result.ids).toEqual(Array.from({ length: 10 }, (_, i) => `thing-${i}-id`));
    expect(result.during).toMatchObject({ bySdk: 0 });
    // The SDK's function still ran (the property it records is there), with no frames in it.
    expect(result.ownStack).toBe("Error");
    // The limit is the process's own again after each call.
    expect(result.limit).toBe(10);
  });

  it("without it (the SDK as it is), each registration's promises format stacks: what it saves is there to save", async () => {
    const result = await inProcess(REGISTER(false));
    expect(result.installed).toBe(false);
    expect((result.during as { bySdk: number }).bySdk).toBeGreaterThanOrEqual(10);
    expect(result.ownStack).toMatch(/^Error\n\s+at /);
  });

  it("PULUMI_DEBUG_PROMISE_LEAKS keeps the SDK's stacks, to trace a leak to where it was made", async () => {
    const result = await inProcess(REGISTER(true), { PULUMI_DEBUG_PROMISE_LEAKS: "1" });
    expect(result.installed).toBe(false);
    expect((result.during as { bySdk: number }).bySdk).toBeGreaterThanOrEqual(10);
    expect(result.ownStack).toMatch(/^Error\n\s+at /);
  });
});
