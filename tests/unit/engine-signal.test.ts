// A Pulumi engine killed under an operation (issue 18's engine fault) is told apart from one that failed:
// through the Automation API's own command runner, a process that dies of SIGKILL.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import * as path from "node:path";
import { PulumiCommand } from "@pulumi/pulumi/automation/index.js";
import { describe, expect, it } from "vitest";
import { engineErrorSummary, engineSignal } from "../../runtime/tenants/stack.js";

/** The Automation API's runner with `command` in place of the CLI (its constructor is internal). */
type Runner = { run(args: string[], cwd: string, env: Record<string, string>): Promise<unknown> };
const runner = (command: string): Runner =>
  new (PulumiCommand as unknown as new (command: string, version: null) => Runner)(command, null);

async function failureOf(script: string): Promise<unknown> {
  const cwd = mkdtempSync(path.join(tmpdir(), "engine-signal-"));
  // The runner appends --non-interactive: sh takes it as $0.
  return runner("/bin/sh")
    .run(["-c", script], cwd, {})
    .then(
      () => new Error("it succeeded"),
      (error: unknown) => error,
    );
}

describe("engineSignal", () => {
  it("names the signal that killed the engine, also through a wrapping error's cause", async () => {
    const killed = await failureOf("kill -9 $$");
    expect(engineSignal(killed)).toBe("SIGKILL");
    expect(engineErrorSummary(killed)).toBe("the Pulumi engine was killed (SIGKILL)");
    expect(engineSignal(new Error("creating tenant p1 failed", { cause: killed }))).toBe("SIGKILL");
  });

  it("is undefined for an engine that exited with an error, and for any other error", async () => {
    const failed = await failureOf("echo 'error: something went wrong' >&2; exit 255");
    expect(engineSignal(failed)).toBeUndefined();
    expect(engineErrorSummary(failed)).toContain("something went wrong");
    expect(engineSignal(new Error("plain"))).toBeUndefined();
    expect(engineSignal(undefined)).toBeUndefined();
  });

  it("names the causes of an engine's 'N errors occurred', not only their count", async () => {
    // As the engine reported a lock it could not write on a full state backend (issue 18).
    const failed = await failureOf(
      "printf 'error: 2 errors occurred:\\n    1) write /s/.pulumi/locks/l.json.1.tmp: no space left on device\\n    2) Unknown\\n' >&2; exit 255",
    );
    expect(engineErrorSummary(failed)).toBe("write /s/.pulumi/locks/l.json.1.tmp: no space left on device");
  });
});
