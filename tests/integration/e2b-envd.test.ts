// envd, the in-sandbox API E2B's SDKs call, driven by the real `e2b` SDK (pinned, unchanged) against a real
// runtime and a real container sandbox: commands (streamed output, exit codes, envs, cwd, background, stdin,
// kill), files (text and 1 MiB binary, list, exists, rename, remove, make a directory), a directory watch, a
// PTY, the audit row of an SDK-started command, and the refusals the SDK must see as its own errors.
import { randomBytes, randomUUID } from "node:crypto";
import {
  AuthenticationError,
  CommandExitError,
  FileNotFoundError,
  NotFoundError,
  Sandbox,
  SandboxError,
} from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Auth, DEFAULT_AUTH } from "../../runtime/api/auth.js";
import { ENVD_VERSION, envdAccessToken } from "../../runtime/api/e2b/access.js";
import { apiHarness, TEST_SECRET, type ApiHarness } from "../helpers/api.js";
import { testPlatform, type TestPlatform } from "../helpers/host.js";
import { testDatabase } from "../helpers/postgres.js";

let platform: TestPlatform;
let h: ApiHarness<"alice">;
let id: string;
let base: string;
let token: string;
let sandbox: Sandbox;

/** The SDK's Sandbox as `Sandbox.connect` builds it, pointed at this runtime's envd (E2B_SANDBOX_URL). */
const connectSdk = (sandboxId: string, accessToken: string): Sandbox =>
  new (Sandbox as unknown as new (opts: object) => Sandbox)({
    sandboxId,
    envdAccessToken: accessToken,
    envdVersion: ENVD_VERSION,
    sandboxUrl: `${base}/e2b`,
    apiUrl: `${base}/e2b`,
    apiKey: "not-used-by-envd",
    debug: false,
    requestTimeoutMs: 30_000,
  });

/** A Connect unary call made by hand (what no SDK sends): its status and body. */
async function rawCall(path: string, body: string, headers: Record<string, string> = {}) {
  const response = await fetch(`${base}/e2b/${path}`, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      "e2b-sandbox-id": id,
      "x-access-token": token,
      ...headers,
    },
    body,
  });
  const text = await response.text();
  const parsed = (() => {
    try {
      return JSON.parse(text) as { code: string; message: string };
    } catch {
      return { code: "", message: text };
    }
  })();
  return { status: response.status, body: parsed };
}

beforeAll(async () => {
  platform = await testPlatform({ subnetPool: "10.216.0.0/24", sshPortRange: [29220, 29225] });
  h = await apiHarness({
    database: await testDatabase("pglite", { under: platform.config.host.dataDir }),
    config: platform.config,
    users: ["alice"],
    reconciler: true,
  });
  const created = await h.as("alice", "POST", "/projects", { name: "e2b-envd" });
  expect(created.statusCode, created.body).toBeLessThan(300);
  id = created.json().project_id;
  await h.waitForStatus("alice", id, "running", 600_000);
  // What the E2B control plane records when it makes a sandbox: this project is an E2B sandbox.
  await h.db.query(
    `insert into e2b_sandboxes (project_id, template, env_vars, timeout_at)
     values ($1, 'base', '{"SANDBOX_WIDE": "from-create", "GREETING": "overridden"}', now() + interval '1 hour')`,
    [id],
  );
  await h.app.listen({ port: 0, host: "127.0.0.1" });
  base = `http://127.0.0.1:${(h.app.server.address() as { port: number }).port}`;
  token = envdAccessToken(new Auth(h.db, { ...DEFAULT_AUTH, secret: TEST_SECRET }), id);
  sandbox = connectSdk(id, token);
}, 1_200_000);

afterAll(async () => {
  await h?.close();
  await platform?.stop();
}, 900_000);

describe("commands", () => {
  it("streams stdout and stderr to the callbacks and answers the whole result; the audit has its row", async () => {
    const seen = { stdout: "", stderr: "" };
    const result = await sandbox.commands.run("echo out-$((6*7)); echo err-$((5*5)) >&2; id -un", {
      onStdout: (data) => void (seen.stdout += data),
      onStderr: (data) => void (seen.stderr += data),
    });
    expect(result.exitCode).toBe(0);
    expect(result.stdout).toBe("out-42\nagent\n");
    expect(result.stderr).toBe("err-25\n");
    expect(seen).toEqual({ stdout: result.stdout, stderr: result.stderr });
    const audit = await h.as("alice", "GET", `/projects/${id}/execs`);
    const rows = audit.json().execs as { command: string[]; exit_code: number | null }[];
    expect(rows.find((row) => row.command.at(-1)?.includes("echo out-$((6*7))"))).toMatchObject({
      exit_code: 0,
    });
  });

  it("a failing command is the SDK's CommandExitError with its exit code and output", async () => {
    const failure = await sandbox.commands.run("echo before; exit 3").catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(CommandExitError);
    expect((failure as CommandExitError).exitCode).toBe(3);
    expect((failure as CommandExitError).stdout).toBe("before\n");
  });

  it("passes envs over the sandbox's own and runs in cwd (relative to the home)", async () => {
    expect(await sandbox.files.makeDir("envd-cwd")).toBe(true);
    const result = await sandbox.commands.run("echo $GREETING $SANDBOX_WIDE; pwd", {
      envs: { GREETING: "hello-envd" },
      cwd: "envd-cwd",
    });
    expect(result.stdout).toBe("hello-envd from-create\n/home/agent/envd-cwd\n");
  });

  it("a background command is listed, killed, and gone from the list", async () => {
    const handle = await sandbox.commands.run("sleep 600", { background: true });
    expect((await sandbox.commands.list()).map((p) => p.pid)).toContain(handle.pid);
    expect(await sandbox.commands.kill(handle.pid)).toBe(true);
    // Gone from the list as soon as the kill has answered, before anyone waits on the handle.
    expect((await sandbox.commands.list()).map((p) => p.pid)).not.toContain(handle.pid);
    const ended = await handle.wait().catch((error: unknown) => error);
    expect(ended).toBeInstanceOf(CommandExitError);
    expect((ended as CommandExitError).exitCode).toBe(137);
    expect(await sandbox.commands.kill(handle.pid)).toBe(false);
  });

  it("sendStdin reaches a command started with stdin, closeStdin ends it", async () => {
    let out = "";
    const handle = await sandbox.commands.run("tr a-z A-Z", {
      background: true,
      stdin: true,
      onStdout: (data) => void (out += data),
    });
    await sandbox.commands.sendStdin(handle.pid, "shout\n");
    await sandbox.commands.closeStdin(handle.pid);
    const result = await handle.wait();
    expect(result.exitCode).toBe(0);
    expect(out).toBe("SHOUT\n");
  });

  it("a connected client sees a running command's later output and end", async () => {
    const handle = await sandbox.commands.run("read line; echo got-$line", { background: true, stdin: true });
    const attached = await sandbox.commands.connect(handle.pid);
    await sandbox.commands.sendStdin(handle.pid, "it\n");
    expect((await attached.wait()).stdout).toBe("got-it\n");
  });
});

describe("files", () => {
  it("writes, reads, lists, renames and removes text and a 1 MiB binary file", async () => {
    await sandbox.files.write("envd-files/note.txt", "héllo\n");
    expect(await sandbox.files.read("envd-files/note.txt")).toBe("héllo\n");
    const binary = randomBytes(1024 * 1024);
    await sandbox.files.write("/home/agent/envd-files/blob.bin", binary.buffer.slice(0) as ArrayBuffer);
    expect(
      Buffer.from(await sandbox.files.read("envd-files/blob.bin", { format: "bytes" })).equals(binary),
    ).toBe(true);
    const listed = await sandbox.files.list("envd-files");
    expect(listed.map((e) => [e.name, e.type, e.size])).toEqual(
      expect.arrayContaining([
        ["note.txt", "file", 7],
        ["blob.bin", "file", 1024 * 1024],
      ]),
    );
    expect(await sandbox.files.exists("envd-files/note.txt")).toBe(true);
    const moved = await sandbox.files.rename("envd-files/note.txt", "envd-files/moved.txt");
    expect(moved.path).toBe("/home/agent/envd-files/moved.txt");
    expect(await sandbox.files.exists("envd-files/note.txt")).toBe(false);
    await sandbox.files.remove("envd-files/moved.txt");
    expect(await sandbox.files.exists("envd-files/moved.txt")).toBe(false);
    expect(await sandbox.files.makeDir("envd-files/deep/er")).toBe(true);
    expect(await sandbox.files.makeDir("envd-files/deep/er")).toBe(false);
    const deep = await sandbox.files.list("envd-files", { depth: 2 });
    expect(deep.map((e) => e.path)).toContain("/home/agent/envd-files/deep/er");
    await expect(sandbox.files.read("envd-files/none.txt")).rejects.toBeInstanceOf(FileNotFoundError);
  });

  it("watchDir sees a file written after it starts", async () => {
    await sandbox.files.makeDir("envd-watch");
    const events: { name: string; type: string }[] = [];
    const watch = await sandbox.files.watchDir("envd-watch", (event) => void events.push(event));
    await sandbox.files.write("envd-watch/new.txt", "x");
    const deadline = Date.now() + 10_000;
    while (!events.some((e) => e.name === "new.txt") && Date.now() < deadline)
      await new Promise((resolve) => setTimeout(resolve, 100));
    await watch.stop();
    expect(events).toContainEqual({ name: "new.txt", type: "create" });
  });

  it("refuses paths outside the home and workspace, and the root user", async () => {
    await expect(sandbox.files.read("/etc/passwd")).rejects.toThrow(/outside \/home\/agent/);
    await expect(sandbox.files.list("/etc")).rejects.toThrow(/permission_denied.*outside/);
    await expect(sandbox.files.write("../escape.txt", "x")).rejects.toThrow(/'\.\.'/);
    await expect(sandbox.commands.run("id", { user: "root" })).rejects.toThrow(/user root is not available/);
  });
});

describe("PTY", () => {
  it("runs a shell on a terminal: input, resize, output", async () => {
    let output = "";
    const pty = await sandbox.pty.create({
      cols: 80,
      rows: 24,
      onData: (data) => void (output += new TextDecoder().decode(data)),
    });
    await sandbox.pty.resize(pty.pid, { cols: 101, rows: 33 });
    await sandbox.pty.sendInput(pty.pid, new TextEncoder().encode("stty size; tty; exit\n"));
    const ended = await pty.wait();
    expect(ended.exitCode).toBe(0);
    expect(output).toContain("33 101");
    expect(output).toMatch(/\/dev\/pts\/\d+/);
  });
});

describe("refusals", () => {
  it("a wrong access token is the SDK's AuthenticationError; an unknown sandbox its NotFoundError", async () => {
    await expect(connectSdk(id, "wrong").commands.run("true")).rejects.toBeInstanceOf(AuthenticationError);
    await expect(connectSdk(id, "wrong").files.read("x")).rejects.toBeInstanceOf(AuthenticationError);
    await expect(connectSdk(randomUUID(), token).commands.run("true")).rejects.toBeInstanceOf(NotFoundError);
    await expect(connectSdk(randomUUID(), token).files.list(".")).rejects.toBeInstanceOf(SandboxError);
  });

  it("malformed JSON and an unknown procedure are Connect errors; the runtime goes on", async () => {
    const malformed = await rawCall("process.Process/List", "{not json");
    expect(malformed.status).toBe(400);
    expect(malformed.body.code).toBe("invalid_argument");
    const wrongType = await rawCall(
      "filesystem.Filesystem/ListDir",
      JSON.stringify({ path: 7, depth: "deep" }),
    );
    expect(wrongType.body.code).toBe("invalid_argument");
    const unknown = await rawCall("process.Process/Teleport", "{}");
    expect(unknown.status).toBe(404);
    expect(unknown.body).toMatchObject({
      code: "unimplemented",
      message: expect.stringContaining("Teleport"),
    });
    // A stream's messages are enveloped (a flags byte, a length): one whose JSON is broken, and one whose
    // length is absurd. Each is answered in the stream's end message (status 200), with its code.
    const envelope = (payload: string) =>
      Buffer.concat([Buffer.from([0, 0, 0, 0, Buffer.byteLength(payload)]), Buffer.from(payload)]);
    const streamed = { "content-type": "application/connect+json" };
    const broken = await rawCall("process.Process/Start", envelope("{bad").toString("latin1"), streamed);
    expect(broken.status).toBe(200);
    expect(broken.body.message).toMatch(/"code":"invalid_argument"/);
    const absurd = await rawCall("process.Process/Start", "\u00ff".repeat(64), streamed);
    expect(absurd.body.message).toMatch(/"code":"(resource_exhausted|invalid_argument)"/);
    expect((await sandbox.commands.run("echo still-here")).stdout).toBe("still-here\n");
  });
});
