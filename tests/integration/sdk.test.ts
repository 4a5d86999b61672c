// The TypeScript SDK (sdk/, issue 23) against a real runtime: API over loopback HTTP, the real reconciler,
// a real sandbox. The README's two examples run as they are (sdk/examples/), the headless agent with a fake
// `claude` put on the sandbox's PATH through the SDK; `sbx exec` (cli/exec.ts) runs on the SDK too.
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import * as path from "node:path";
import { SignJWT } from "jose";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ApiError, AuthError, Client, memoryTokens, Sandbox, type ExecEvent } from "../../sdk/src/index.js";
import { runHeadlessAgent } from "../../sdk/examples/headless-agent.js";
import { runTests } from "../../sdk/examples/run-tests.js";
import { waitFor } from "../../lib/process.js";
import { execIn } from "../helpers/containers.js";
import { apiHarness, emailOf, PASSWORD, TEST_SECRET, type ApiHarness } from "../helpers/api.js";
import { testPlatform, type TestPlatform } from "../helpers/host.js";
import { testDatabase } from "../helpers/postgres.js";
import { sbx } from "../helpers/sbx.js";

let platform: TestPlatform;
let h: ApiHarness<"alice">;
let base: string;
let client: Client;
let sandbox: Sandbox;
const work = mkdtempSync(path.join(tmpdir(), "sdk-test-"));

beforeAll(async () => {
  // A registry for the snapshots; a terminal proxy for Sandbox.terminal().
  platform = await testPlatform(
    { subnetPool: "10.251.0.0/23", sshPortRange: [28100, 28105] },
    { registry: true },
  );
  h = await apiHarness({
    database: await testDatabase("pglite", { under: platform.config.host.dataDir }),
    config: platform.config,
    users: ["alice"],
    reconciler: true,
    terminal: true,
  });
  await h.app.listen({ port: 0, host: "127.0.0.1" });
  const address = h.app.server.address() as { port: number };
  base = `http://127.0.0.1:${address.port}`;
  client = await Client.login(base, emailOf("alice"), PASSWORD);
  sandbox = await Sandbox.create(client, { name: "sdk" }, { timeoutMs: 600_000 });
}, 700_000);

afterAll(async () => {
  if (sandbox) await sandbox.delete().catch(() => undefined);
  if (sandbox) await sandbox.waitFor("deleted", 300_000).catch(() => undefined);
  await h?.close();
  await platform?.stop();
  rmSync(work, { recursive: true, force: true });
}, 600_000);

const GIT = "git -c user.name=sdk -c user.email=sdk@example.invalid";

/** A small repository in the sandbox, through the SDK. */
async function seedRepo(dir: string): Promise<void> {
  await sandbox.files.write(`${dir}/README.md`, "# demo\n");
  const init = await sandbox.exec(`cd ${dir} && git init -q && ${GIT} add -A && ${GIT} commit -qm init`, {
    shell: true,
  });
  expect(init.exit_code, init.stderr).toBe(0);
}

describe("the SDK against a real runtime", () => {
  it("create answered a running sandbox; get and list find it", async () => {
    expect(sandbox.status).toBe("running");
    expect((await Sandbox.get(client, sandbox.id)).view.name).toBe("sdk");
    expect((await Sandbox.list(client)).map((s) => s.id)).toContain(sandbox.id);
  });

  it("exec: buffered and streamed give the same output in order and exit code 3", async () => {
    const script = "for i in 1 2 3; do echo out$i; echo err$i >&2; done; exit 3";
    const buffered = await sandbox.exec(script, { shell: true });
    expect(buffered.exit_code).toBe(3);
    expect(buffered.stdout).toBe("out1\nout2\nout3\n");
    expect(buffered.stderr).toBe("err1\nerr2\nerr3\n");
    expect(buffered.truncated).toBe(false);
    const events: ExecEvent[] = [];
    for await (const event of sandbox.stream(script, { shell: true })) events.push(event);
    expect(events[0]?.type).toBe("start");
    const out = events.flatMap((e) => (e.type === "stdout" ? [e.data] : [])).join("");
    const err = events.flatMap((e) => (e.type === "stderr" ? [e.data] : [])).join("");
    expect([out, err]).toEqual(["out1\nout2\nout3\n", "err1\nerr2\nerr3\n"]);
    expect(events.at(-1)).toMatchObject({ type: "exit", exit_code: 3, timed_out: false });
    // A program that does not exist: 127 and the shell's message, not an error.
    const missing = await sandbox.exec("no-such-program-sdk", { shell: true });
    expect(missing.exit_code).toBe(127);
    expect(missing.stderr).toMatch(/not found/);
  });

  it("background processes: start, list, read, kill", async () => {
    const { exec_id } = await sandbox.processes.start("echo started; sleep 60", { shell: true });
    const listed = await sandbox.processes.list();
    expect(JSON.stringify(listed)).toContain(exec_id);
    await expect
      .poll(async () => JSON.stringify(await sandbox.processes.get(exec_id)), { timeout: 10_000 })
      .toContain("started");
    // A kill answers the process's end; the process is gone after it (404, as any unknown one).
    const killed = await sandbox.processes.kill(exec_id);
    expect(killed).toMatchObject({ running: false, killed_by: "killed" });
    await expect(sandbox.processes.get(exec_id)).rejects.toMatchObject({ status: 404 });
  });

  it("files: binary round trip with mode, list, tar upload/download, delete", async () => {
    const data = randomBytes(1024 * 1024);
    const written = await sandbox.files.write("sdk/blob.bin", data, "0750");
    expect(written.size).toBe(data.length);
    expect(Buffer.compare(await sandbox.files.read("sdk/blob.bin"), data)).toBe(0);
    const listing = await sandbox.files.list("sdk");
    expect(listing.entries.find((e) => e.name === "blob.bin")).toMatchObject({
      size: data.length,
      mode: "750",
    });
    const dir = path.join(work, "tree");
    execFileSync("mkdir", ["-p", path.join(dir, "a")]);
    writeFileSync(path.join(dir, "a", "one.txt"), "one\n", { mode: 0o600 });
    const tar = execFileSync("tar", ["-C", dir, "-cf", "-", "a"]);
    expect((await sandbox.files.upload("sdk/up", tar)).entries).toBeGreaterThan(0);
    expect(await sandbox.files.readText("sdk/up/a/one.txt")).toBe("one\n");
    const back = await sandbox.files.download("sdk/up");
    expect(execFileSync("tar", ["-tvf", "-"], { input: back }).toString()).toMatch(/-rw-------.*a\/one\.txt/);
    await sandbox.files.delete("sdk", true);
    const gone = await sandbox.files.read("sdk/blob.bin").catch((e: unknown) => e);
    expect(gone).toBeInstanceOf(ApiError);
    expect((gone as ApiError).status).toBe(404);
  });

  it("bad input arrives as ApiError with the API's status, code and the field named", async () => {
    const zero = await sandbox.exec(["true"], { timeout_s: 0 }).catch((e: unknown) => e);
    expect(zero).toBeInstanceOf(ApiError);
    expect(zero).toMatchObject({ status: 400 });
    expect((zero as ApiError).message).toMatch(/timeout_s/);
    expect((zero as ApiError).code).toBeTruthy();
    const empty = await sandbox.exec([]).catch((e: unknown) => e);
    expect((empty as ApiError).status).toBe(400);
    expect((empty as ApiError).message).toMatch(/command/);
    const escape = await sandbox.files.read("../../etc/passwd").catch((e: unknown) => e);
    expect(escape).toMatchObject({ status: 400 });
    expect((escape as ApiError).message).toMatch(/path/);
    const other = await Sandbox.get(client, "00000000-0000-4000-8000-000000000000").catch((e: unknown) => e);
    expect(other).toMatchObject({ status: 404 });
  });

  it("an expired access token is renewed with the refresh token, transparently", async () => {
    const { refresh_token } = await h.login("alice");
    const me = (await client.call("GET", "/auth/me")).data.user_id;
    const past = Math.floor(Date.now() / 1000) - 3600;
    const expired = await new SignJWT({})
      .setProtectedHeader({ alg: "HS256", typ: "at+jwt" })
      .setSubject(me)
      .setIssuer("agent-sandbox")
      .setAudience("agent-sandbox-api")
      .setIssuedAt(past - 900)
      .setExpirationTime(past)
      .sign(TEST_SECRET);
    // The expired token is refused on its own...
    const bare = new Client({ api: base, tokens: memoryTokens({ access_token: expired }) });
    await expect(Sandbox.get(bare, sandbox.id)).rejects.toBeInstanceOf(AuthError);
    // ...and renewed when a refresh token is there.
    const tokens = memoryTokens({ access_token: expired, refresh_token });
    const renewed = await Sandbox.get(new Client({ api: base, tokens }), sandbox.id);
    expect(renewed.id).toBe(sandbox.id);
    const kept = await tokens.load();
    expect(kept.access_token).not.toBe(expired);
    expect(kept.refresh_token).toBeTruthy();
  });

  it("README example: a headless agent (a fake `claude`) edits and commits; the diff comes back", async () => {
    await seedRepo("/workspace/demo");
    await sandbox.files.write(
      "/home/agent/bin/claude",
      [
        "#!/bin/bash",
        'set -e; [ "$1" = "-p" ] || { echo "usage: claude -p PROMPT" >&2; exit 2; }',
        'echo "$2" >> NOTES.md',
        "git add NOTES.md",
        'git -c user.name=agent -c user.email=agent@example.invalid commit -qm "agent: $2"',
        'echo "done: $2"',
        "",
      ].join("\n"),
      "0755",
    );
    const result = await runHeadlessAgent(sandbox, { repo: "/workspace/demo", prompt: "write the notes" });
    expect(result.exitCode, result.stderr).toBe(0);
    expect(result.stdout).toContain("done: write the notes");
    expect(result.diff).toMatch(/\+\+\+ b\/NOTES\.md/);
    expect(result.diff).toContain("+write the notes");
  });

  it("README example: a repository's tests run and their exit code is read", async () => {
    await sandbox.files.write(
      "/workspace/demo/test.sh",
      '#!/bin/bash\ngrep -q notes NOTES.md && echo "1 passed"\n',
    );
    let output = "";
    expect(await runTests(sandbox, "/workspace/demo", "bash test.sh", (c) => (output += c))).toBe(0);
    expect(output).toContain("1 passed");
    await sandbox.files.write("/workspace/demo/NOTES.md", "nothing\n");
    expect(await runTests(sandbox, "/workspace/demo", "bash test.sh", () => undefined)).toBe(1);
  });

  it("sbx exec streams the command's output and exits with its exit code, on the CLI's login", async () => {
    const home = path.join(work, "config");
    const { access_token, refresh_token } = await h.login("alice");
    execFileSync("mkdir", ["-p", path.join(home, "agent-sandbox")]);
    writeFileSync(
      path.join(home, "agent-sandbox", "config.json"),
      JSON.stringify({ api: base, email: emailOf("alice"), access_token, refresh_token }),
      { mode: 0o600 },
    );
    const run = await sbx(home, work, [
      "exec",
      "--project",
      sandbox.id,
      "--",
      "bash",
      "-c",
      "echo to-out; echo to-err >&2; exit 5",
    ]);
    expect(run.code, run.stderr).toBe(5);
    expect(run.stdout).toBe("to-out\n");
    expect(run.stderr).toContain("to-err");
    const missing = await sbx(home, work, ["exec", "--project", sandbox.id, "--"]);
    expect(missing.code).not.toBe(0);
    expect(missing.stderr).toMatch(/command/);
  });

  it("the sync mode: set and read back through the SDK; a bad mode is an ApiError naming the field", async () => {
    expect(await sandbox.sync.get()).toEqual({ mode: "manual", interval_seconds: 60 });
    expect(await sandbox.sync.set({ mode: "auto-idle", interval_seconds: 120 })).toEqual({
      mode: "auto-idle",
      interval_seconds: 120,
    });
    expect(await sandbox.sync.get()).toEqual({ mode: "auto-idle", interval_seconds: 120 });
    const bad = await sandbox.sync
      .set({ mode: "always" as "manual", interval_seconds: 60 })
      .catch((e: unknown) => e);
    expect(bad).toMatchObject({ status: 400 });
    expect((bad as ApiError).message).toMatch(/mode/);
    await sandbox.sync.set({ mode: "manual", interval_seconds: 60 });
  });

  it("the terminal: what is typed runs in the sandbox's shell and its output comes back; resize is taken", async () => {
    const terminal = await sandbox.terminal();
    let screen = "";
    terminal.on("data", (data) => (screen += data.toString("utf8")));
    const closed = new Promise<number>((resolve) => terminal.on("close", (code) => resolve(code)));
    terminal.resize(100, 30);
    // The product is computed inside, so the echo of the typed line alone cannot match.
    terminal.write("echo term-$((6*7)) $(stty size)\r");
    await waitFor("the terminal's answer", 30_000, async () =>
      /term-42 30 100/.test(screen) ? true : undefined,
    );
    terminal.close();
    expect(await closed).toBe(1000);
  });

  it("lifecycle: snapshot, a change, restore brings the system state back and keeps the files; stop refuses exec naming the state; start", async () => {
    // System state is what the image and root made (the agent's only writable paths outside its home are
    // memory-backed tmpfs, never in a snapshot): root writes it here, as an image's package step would.
    const container = `sbx-${sandbox.id}`;
    await execIn(container, "echo from-before-the-snapshot > /opt/system-state", "root");
    const snapped = await sandbox.snapshot();
    expect(snapped.status).toBe("running");
    const tag = (snapped as { last_snapshot?: { tag: string } }).last_snapshot?.tag;
    expect(tag).toMatch(/^\d{8}-\d{6}-\d{3}$/);
    await execIn(container, "rm /opt/system-state", "root");
    await sandbox.exec("echo kept > /home/agent/kept.txt", { shell: true });

    const restored = await sandbox.restore();
    expect(restored.status).toBe("running");
    expect((await sandbox.exec(["cat", "/opt/system-state"])).stdout).toBe("from-before-the-snapshot\n");
    expect(await sandbox.files.readText("/home/agent/kept.txt")).toBe("kept\n");

    expect((await sandbox.stop()).status).toBe("stopped");
    const refused = await sandbox.exec(["true"]).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(ApiError);
    expect(refused).toMatchObject({ status: 409 });
    expect((refused as ApiError).message).toMatch(/stopped/);
    const noTerminal = await sandbox.terminal().catch((e: unknown) => e);
    expect(noTerminal).toMatchObject({ status: 409 });

    expect((await sandbox.start()).status).toBe("running");
    expect((await sandbox.exec(["cat", "/home/agent/kept.txt"])).stdout).toBe("kept\n");
  });
});
