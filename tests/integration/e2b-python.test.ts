// E2B's Python SDK (PyPI `e2b`, pinned in scripts/toolchain/e2b-python/requirements.txt, unchanged) against a
// runtime, as a Python agent builder points it: E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY. One scenario
// (tests/helpers/e2b_python_sdk.py) drives the control plane and envd through the SDK's own transports and
// prints each step's outcome; the checks are here. The JavaScript SDK's fuller tour is e2b-envd.test.ts and
// e2b-control-plane.test.ts.
import { execFile } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import type { AddressInfo } from "node:net";
import * as path from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { cacheRoot, REPO_ROOT } from "../../lib/toolchain.js";
import { apiHarness, type ApiHarness } from "../helpers/api.js";
import { testPlatform, type TestPlatform } from "../helpers/host.js";
import { testDatabase } from "../helpers/postgres.js";

const execFileAsync = promisify(execFile);
const REQUIREMENTS = path.join(REPO_ROOT, "scripts/toolchain/e2b-python/requirements.txt");
const SCENARIO = path.join(REPO_ROOT, "tests/helpers/e2b_python_sdk.py");

/** The virtualenv's python scripts/test.sh installed the pinned SDK into, or an error naming the fix. */
function sdkPython(): string {
  const version = /^e2b==([0-9.]+)$/m.exec(readFileSync(REQUIREMENTS, "utf8"))?.[1];
  if (!version) throw new Error(`${REQUIREMENTS} does not pin e2b`);
  const python = path.join(cacheRoot(), `e2b-python-v${version}`, "bin", "python");
  if (!existsSync(python))
    throw new Error(
      `E2B's Python SDK ${version} not found at ${python}; run the test set-up (scripts/test.sh)`,
    );
  return python;
}

let platform: TestPlatform;
let h: ApiHarness<"alice" | "bob">;
let base: string;
/** Each step's outcome, by name. */
const steps = new Map<string, Record<string, unknown>>();
let stderr = "";

const step = (name: string) => {
  const found = steps.get(name);
  if (!found) throw new Error(`the scenario did not reach '${name}'; it wrote:\n${stderr.slice(-3000)}`);
  return found;
};

beforeAll(async () => {
  const python = sdkPython();
  platform = await testPlatform({ subnetPool: "10.219.0.0/24", sshPortRange: [29250, 29255] });
  h = await apiHarness({
    database: await testDatabase("pglite", { under: platform.config.host.dataDir }),
    config: platform.config,
    users: ["alice", "bob"],
    reconciler: true,
  });
  await h.app.listen({ host: "127.0.0.1", port: 0 });
  base = `http://127.0.0.1:${(h.app.server.address() as AddressInfo).port}`;
  const keyOf = async (who: "alice" | "bob") =>
    ((await h.as(who, "POST", "/auth/api-keys", { name: "python sdk" })).json() as { key: string }).key;
  const env = {
    PATH: process.env.PATH ?? "/usr/bin:/bin",
    E2B_API_URL: `${base}/e2b`,
    E2B_SANDBOX_URL: `${base}/e2b`,
    E2B_API_KEY: await keyOf("alice"),
    OTHER_KEY: await keyOf("bob"),
    RUN_ID: `py-${Date.now()}`,
  };
  const outcome = await execFileAsync(python, [SCENARIO], { env, timeout: 600_000 }).catch(
    (error: { stdout?: string; stderr?: string; message: string }) => ({
      stdout: error.stdout ?? "",
      stderr: `${error.stderr ?? ""}\n${error.message}`,
    }),
  );
  stderr = outcome.stderr;
  for (const line of outcome.stdout.split("\n").filter(Boolean)) {
    const parsed = JSON.parse(line) as { step: string } & Record<string, unknown>;
    steps.set(parsed.step, parsed);
  }
}, 900_000);

afterAll(async () => {
  await h?.close();
  await platform?.stop();
}, 900_000);

describe("E2B's Python SDK against the platform", () => {
  it("creates a sandbox that is a running project of its owner's, with its metadata", async () => {
    const { id, running } = step("create") as { id: string; running: boolean };
    expect(running).toBe(true);
    const project = await h.as("alice", "GET", `/projects/${id}`);
    expect(project.statusCode, project.body).toBe(200);
    expect(step("timeout").metadata).toMatchObject({ suite: "python" });
  });

  it("runs commands as the agent user in its home: stdout, stderr, envs, cwd, streamed lines", () => {
    expect(step("run")).toMatchObject({
      stdout: "hello-py\nagent\n/home/agent\n",
      stderr: "to-stderr\n",
      exit_code: 0,
    });
    // Streamed as printed (0.2 s apart), not all at the end; two lines may share a chunk on a busy host.
    const chunks = step("stream").chunks as string[];
    expect(chunks.join("")).toBe("line-1\nline-2\nline-3\n");
    expect(chunks.length).toBeGreaterThanOrEqual(2);
    expect(step("cwd_envs").stdout).toBe("/tmp\nper-command\n");
  });

  it("raises the SDK's CommandExitException with the exit code of a failing command", () => {
    expect(step("exit")).toMatchObject({ raised: true, exit_code: 3, stderr: "failing\n" });
  });

  it("lists and kills a background command", () => {
    expect(step("background")).toMatchObject({ listed: true, killed: true, after: false });
  });

  it("writes, reads (text and 1 MiB of bytes), lists, checks and removes files; a path with '..' is refused", () => {
    expect(step("files")).toEqual({
      step: "files",
      text: "written by python\n",
      binary_same: true,
      listed: ["blob.bin", "py.txt"],
      exists: true,
    });
    expect(step("remove").exists).toBe(false);
    expect(step("outside")).toMatchObject({ raised: true, error: "InvalidArgumentException" });
    expect(String(step("outside").message)).toContain("must not have a '..' component");
  });

  it("connects again, moves its timeout, and finds it by metadata", () => {
    expect(step("connect").stdout).toBe(String(1024 * 1024));
    const { seconds_left } = step("timeout") as { seconds_left: number };
    expect(seconds_left).toBeGreaterThan(800);
    expect(seconds_left).toBeLessThanOrEqual(900);
    expect(step("list").ids).toEqual([step("create").id]);
  });

  it("refuses a wrong key (AuthenticationException), another user's sandbox (SandboxNotFoundException), an unknown template", () => {
    expect(step("wrong_key")).toMatchObject({ raised: true, error: "AuthenticationException" });
    // The SDK's NotFoundException, as its sandbox-specific subclass.
    expect(step("other_user")).toMatchObject({ raised: true, error: "SandboxNotFoundException" });
    expect(step("unknown_template")).toMatchObject({ raised: true, error: "SandboxException" });
    expect(String(step("unknown_template").message)).toContain(
      'template "no-such-template" is not on this platform; its templates are base',
    );
  });

  it("kills it: gone from the list, its project deleted", async () => {
    expect(step("kill")).toMatchObject({ killed: true, listed_after: [] });
    const id = step("create").id as string;
    await h.waitForStatus("alice", id, "gone", 300_000);
  });
});
