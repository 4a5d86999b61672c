// The runtime's policy for errors nothing caught (runtime/process-errors.ts), in a process of its own: a
// rejection and an exception are logged and counted in /metrics while the process serves on; an error that
// says Node's own state is broken still ends it.
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { REPO_ROOT } from "../../lib/toolchain.js";
import { fatalProcessError } from "../../runtime/process-errors.js";

const exec = promisify(execFile);

/** Runs `body` in a fresh Node process with the policy installed and a Metrics to count into. */
async function run(body: string): Promise<{ code: number; stdout: string }> {
  const script = `
    import { installProcessErrorPolicy } from "./runtime/process-errors.ts";
    import { Metrics } from "./runtime/metrics.ts";
    const metrics = new Metrics();
    installProcessErrorPolicy({
      log: (message, fields) => console.log(JSON.stringify({ message, ...fields, stack: undefined })),
      count: (kind) => metrics.countProcessError(kind),
    });
    const unhandled = async () =>
      (await metrics.render()).split("\\n").filter((l) => l.startsWith("agent_sandbox_unhandled_errors_total")).join(" ");
    ${body}
  `;
  try {
    const { stdout } = await exec(
      process.execPath,
      ["--import", "tsx", "--input-type=module", "-e", script],
      {
        cwd: REPO_ROOT,
        timeout: 30_000,
      },
    );
    return { code: 0, stdout };
  } catch (error) {
    const e = error as { code?: number; stdout?: string };
    return { code: e.code ?? -1, stdout: e.stdout ?? "" };
  }
}

describe("errors nothing caught", () => {
  it("a rejection and an exception are logged with context, counted, and the process serves on", async () => {
    const { code, stdout } = await run(`
      Promise.reject(new TypeError("Invalid URL"));
      setTimeout(() => { throw Object.assign(new Error("a handler threw"), { code: "ERR_SOMETHING" }); }, 10);
      setTimeout(async () => { console.log("still serving: " + await unhandled()); }, 100);
    `);
    expect(code).toBe(0);
    const lines = stdout.trim().split("\n");
    expect(JSON.parse(lines[0]!)).toMatchObject({
      message: "unhandled rejection: logged and survived",
      error: "Invalid URL",
      name: "TypeError",
      kind: "rejection",
    });
    expect(JSON.parse(lines[1]!)).toMatchObject({
      message: "uncaught exception: logged and survived",
      error: "a handler threw",
      code: "ERR_SOMETHING",
      kind: "exception",
      origin: "uncaughtException",
    });
    expect(lines[2]).toBe(
      'still serving: agent_sandbox_unhandled_errors_total{kind="rejection"} 1 agent_sandbox_unhandled_errors_total{kind="exception"} 1',
    );
  });

  it("an error that says Node's own state is broken ends the process, after its log line", async () => {
    const { code, stdout } = await run(`
      setTimeout(() => { throw Object.assign(new Error("broken invariant"), { code: "ERR_INTERNAL_ASSERTION" }); }, 10);
      setTimeout(() => console.log("still serving"), 500);
    `);
    expect(code).toBe(1);
    expect(stdout).toContain("uncaught exception: the process cannot go on, exiting");
    expect(stdout).not.toContain("still serving");
  });

  it("only Node's internal assertions count as fatal", () => {
    expect(fatalProcessError(Object.assign(new Error("x"), { code: "ERR_INTERNAL_ASSERTION" }))).toBe(true);
    for (const error of [
      new TypeError("Invalid URL"),
      Object.assign(new Error(), { code: "ECONNRESET" }),
      "text",
      null,
    ])
      expect(fatalProcessError(error)).toBe(false);
  });
});
