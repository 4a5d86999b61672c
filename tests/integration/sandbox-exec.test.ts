// Commands through the API (issue 23): POST /projects/{id}/exec (buffered, background), /exec/stream
// (NDJSON over a real HTTP connection), the background processes and the audit, on a real sandbox made by
// the real reconciler. What is left inside the sandbox is read with `ps` through a bare `docker exec`.
import { createHash } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tenantNames } from "../../components/tenant/names.js";
import { waitFor } from "../../lib/process.js";
import { apiHarness, type ApiHarness } from "../helpers/api.js";
import { execIn } from "../helpers/containers.js";
import { testPlatform, type TestPlatform } from "../helpers/host.js";
import { testDatabase } from "../helpers/postgres.js";

let platform: TestPlatform;
let h: ApiHarness<"alice" | "bob">;
let id: string;
let container: string;
let base: string;

/** The sandbox's processes' command lines, as root sees them (every user's). */
const processes = async () => (await execIn(container, "ps -eo args=", "root")).stdout.split("\n");

/** POST /exec/stream over HTTP: the NDJSON lines as objects. */
async function stream(body: object, signal?: AbortSignal): Promise<Record<string, unknown>[]> {
  const response = await fetch(`${base}/projects/${id}/exec/stream`, {
    method: "POST",
    headers: { authorization: `Bearer ${h.users.alice.token}`, "content-type": "application/json" },
    body: JSON.stringify(body),
    signal,
  });
  expect(
    response.status,
    await response
      .clone()
      .text()
      .then((t) => t.slice(0, 300)),
  ).toBe(200);
  expect(response.headers.get("content-type")).toMatch(/^application\/x-ndjson/);
  const text = await response.text();
  return text
    .split("\n")
    .filter(Boolean)
    .map((line) => JSON.parse(line) as Record<string, unknown>);
}

const exec = (body: object, who: "alice" | "bob" = "alice") =>
  h.as(who, "POST", `/projects/${id}/exec`, body);

beforeAll(async () => {
  platform = await testPlatform({ subnetPool: "10.243.0.0/23", sshPortRange: [27960, 27965] });
  h = await apiHarness({
    database: await testDatabase("pglite", { under: platform.config.host.dataDir }),
    config: platform.config,
    users: ["alice", "bob"],
    reconciler: true,
  });
  const created = await h.as("alice", "POST", "/projects", { name: "exec" });
  expect(created.statusCode, created.body).toBeLessThan(300);
  id = created.json().project_id;
  container = tenantNames(id).container;
  await h.waitForStatus("alice", id, "running", 600_000);
  await h.app.listen({ port: 0, host: "127.0.0.1" });
  const address = h.app.server.address() as { port: number };
  base = `http://127.0.0.1:${address.port}`;
}, 1_200_000);

afterAll(async () => {
  await h?.close();
  await platform?.stop();
}, 900_000);

// 1,500,000 numbered lines: 10.9 MB whose order shows in the text itself.
const BIG = "echo first-err >&2; seq 1 1500000; echo last-err >&2; exit 3";
const bigExpected = () => {
  const lines: string[] = [];
  for (let i = 1; i <= 1_500_000; i++) lines.push(String(i));
  return `${lines.join("\n")}\n`;
};
const sha = (text: string) => createHash("sha256").update(text).digest("hex");

/** Echoes its stdin, then prints output that appears nowhere in its own text. */
const CAT_AND_PRINT = "cat; echo computed-$((2*21))-out; echo computed-$((3*11))-err >&2; exit 5";

describe("POST /projects/{id}/exec and /exec/stream", () => {
  it("10 MB of stdout and some stderr arrive whole and in order with exit code 3, streamed", async () => {
    const events = await stream({ command: BIG });
    expect(events[0]).toMatchObject({ type: "start" });
    const stdout = events
      .filter((e) => e.type === "stdout")
      .map((e) => e.data)
      .join("");
    const stderr = events
      .filter((e) => e.type === "stderr")
      .map((e) => e.data)
      .join("");
    const expected = bigExpected();
    expect(stdout.length).toBe(expected.length);
    expect(sha(stdout)).toBe(sha(expected));
    expect(stderr).toBe("first-err\nlast-err\n");
    expect(events.at(-1)).toMatchObject({
      type: "exit",
      exit_code: 3,
      timed_out: false,
      stdout_bytes: expected.length,
      stderr_bytes: 19,
    });
    // base64 output, exact bytes (a byte that is not UTF-8 included)
    const binary = await stream({ command: "printf 'a\\377b'", output_encoding: "base64" });
    const bytes = Buffer.concat(
      binary.filter((e) => e.type === "stdout").map((e) => Buffer.from(e.data as string, "base64")),
    );
    expect([...bytes]).toEqual([0x61, 0xff, 0x62]);
  });

  it("buffered: the same command answers its exit code, the cap and truncated", async () => {
    const answer = await exec({ command: BIG });
    expect(answer.statusCode, answer.body.slice(0, 300)).toBe(200);
    const body = answer.json();
    const expected = bigExpected();
    expect(body).toMatchObject({
      exit_code: 3,
      truncated: true,
      output_cap_bytes: 1024 * 1024,
      stdout_bytes: expected.length,
      stderr_bytes: 19,
      stderr: "first-err\nlast-err\n",
      timed_out: false,
    });
    expect(body.stdout).toBe(expected.slice(0, 1024 * 1024));
    const small = (await exec({ command: ["printf", "%s", "hello"], stdin: "ignored" })).json();
    expect(small).toMatchObject({ exit_code: 0, stdout: "hello", truncated: false });
    const withInput = await exec({ command: ["cat"], stdin: "from stdin\n" });
    expect(withInput.json()).toMatchObject({ exit_code: 0, stdout: "from stdin\n" });
    const where = await exec({ command: "pwd; id -un; echo $GREETING", env: { GREETING: "hi" } });
    expect(where.json().stdout).toBe("/home/agent\nagent\nhi\n");
    expect((await exec({ command: ["pwd"], cwd: "/tmp" })).json().stdout).toBe("/tmp\n");
  });

  it("a timeout of 2 s kills the whole tree, children in sessions of their own included", async () => {
    const started = Date.now();
    const answer = await exec({
      command: "sleep 1001 & (setsid sleep 1002 &); bash -c 'sleep 1003' & sleep 1004",
      timeout_s: 2,
    });
    expect(answer.statusCode, answer.body).toBe(200);
    expect(answer.json()).toMatchObject({ timed_out: true, exit_code: 137 });
    expect(Date.now() - started).toBeLessThan(30_000);
    const left = (await processes()).filter((p) => /sleep 100[1-4]/.test(p));
    expect(left).toEqual([]);
  });

  it("50 concurrent execs on one sandbox all finish", async () => {
    const answers = await Promise.all(
      Array.from({ length: 50 }, (_, i) => exec({ command: ["sh", "-c", `echo ${i}`] })),
    );
    expect(answers.map((a) => a.statusCode)).toEqual(Array(50).fill(200));
    expect(answers.map((a) => a.json().stdout)).toEqual(Array.from({ length: 50 }, (_, i) => `${i}\n`));
  });

  it("a client that leaves mid-stream takes its command with it", async () => {
    const abort = new AbortController();
    const response = await fetch(`${base}/projects/${id}/exec/stream`, {
      method: "POST",
      headers: { authorization: `Bearer ${h.users.alice.token}`, "content-type": "application/json" },
      body: JSON.stringify({ command: "echo going; sleep 1101" }),
      signal: abort.signal,
    });
    const reader = response.body!.getReader();
    const { value } = await reader.read();
    const start = JSON.parse(Buffer.from(value!).toString().split("\n")[0]!) as { exec_id: string };
    await waitFor("the sleep to run", 10_000, async () =>
      (await processes()).some((p) => p.includes("sleep 1101")) ? true : undefined,
    );
    abort.abort();
    await waitFor("the sleep to be killed", 20_000, async () =>
      (await processes()).some((p) => p.includes("sleep 1101")) ? undefined : true,
    );
    const audit = await waitFor("the exec's audit to close", 10_000, async () => {
      const execs = (await h.as("alice", "GET", `/projects/${id}/execs`)).json().execs as {
        id: string;
        killed_by: string | null;
      }[];
      const row = execs.find((e) => e.id === start.exec_id);
      return row?.killed_by ? row : undefined;
    });
    expect(audit.killed_by).toBe("client-disconnected");
  });

  it("background processes: listed, output read from an offset, signalled, killed", async () => {
    const started = await exec({
      command: "for i in 1 2 3; do echo line-$i; done; echo oops >&2; sleep 1201",
      background: true,
    });
    expect(started.statusCode, started.body).toBe(202);
    const execId = started.json().exec_id as string;
    expect(started.json()).toMatchObject({ running: true, exit_code: null });
    const list = (await h.as("alice", "GET", `/projects/${id}/processes`)).json();
    expect(list.processes.map((p: { exec_id: string }) => p.exec_id)).toContain(execId);
    const read = await waitFor("the output", 10_000, async () => {
      const body = (await h.as("alice", "GET", `/projects/${id}/processes/${execId}`)).json();
      return body.next_offset >= 26 ? body : undefined;
    });
    // Consecutive chunks of one stream, joined: the streams in the order they were written.
    const runs: [string, string][] = [];
    for (const { stream, data } of read.output as { stream: string; data: string }[])
      if (runs.at(-1)?.[0] === stream) runs.at(-1)![1] += data;
      else runs.push([stream, data]);
    expect(runs).toEqual([
      ["stdout", "line-1\nline-2\nline-3\n"],
      ["stderr", "oops\n"],
    ]);
    const later = (await h.as("alice", "GET", `/projects/${id}/processes/${execId}?offset=14`)).json();
    expect(later.offset).toBe(14);
    expect(later.output.map((o: { data: string }) => o.data).join("")).toBe("line-3\noops\n");
    const signalled = await h.as("alice", "POST", `/projects/${id}/processes/${execId}/signal`, {
      signal: "TERM",
    });
    expect(signalled.statusCode, signalled.body).toBe(200);
    expect(signalled.json().signalled).toBeGreaterThan(0);
    const ended = await waitFor("the TERM to end it", 10_000, async () => {
      const body = (await h.as("alice", "GET", `/projects/${id}/processes/${execId}`)).json();
      return body.running ? undefined : body;
    });
    expect(ended.exit_code).toBe(143);
    expect((await processes()).filter((p) => p.includes("sleep 1201"))).toEqual([]);
    const again = await h.as("alice", "POST", `/projects/${id}/processes/${execId}/signal`, {
      signal: "TERM",
    });
    expect(again.statusCode).toBe(409);

    const second = (await exec({ command: "sleep 1202 & sleep 1203", background: true })).json();
    await waitFor("the sleeps to run", 10_000, async () =>
      (await processes()).filter((p) => /^sleep 120[23]$/.test(p)).length === 2 ? true : undefined,
    );
    const killed = await h.as("alice", "DELETE", `/projects/${id}/processes/${second.exec_id}`);
    expect(killed.statusCode, killed.body).toBe(200);
    expect(killed.json()).toMatchObject({ running: false, exit_code: 137, killed_by: "killed" });
    expect((await processes()).filter((p) => /sleep 120[23]/.test(p))).toEqual([]);
  });

  it("bad input: a missing command is exit 127 with the shell's message; the rest a 400 naming the field", async () => {
    const missing = (await exec({ command: ["no-such-command-here"] })).json();
    expect(missing.exit_code).toBe(127);
    expect(missing.stderr).toMatch(/no-such-command-here: No such file or directory/);
    const missingShell = (await exec({ command: "no-such-command-here" })).json();
    expect(missingShell).toMatchObject({ exit_code: 127 });
    expect(missingShell.stderr).toMatch(/no-such-command-here: command not found/);
    const cases: [object, string][] = [
      [{ command: [] }, "command"],
      [{ command: "" }, "command"],
      [{ command: ["true"], timeout_s: 0 }, "timeout_s"],
      [{ command: ["true"], timeout_s: 3601 }, "timeout_s"],
      [{ command: ["true"], env: { "1BAD": "x" } }, "env"],
      [{ command: ["true"], env: { "A-B": "x" } }, "env"],
      [{ command: ["true"], env: { SBX_EXEC_ID: "x" } }, "env.SBX_EXEC_ID"],
      [{ command: ["a\u0000b"] }, "command"],
    ];
    for (const [body, field] of cases) {
      const answer = await exec(body);
      expect(answer.statusCode, JSON.stringify(body)).toBe(400);
      expect(answer.json().message).toContain(field);
    }
    expect((await exec({ command: ["true"] }, "bob")).statusCode).toBe(404);
    expect((await h.as("bob", "GET", `/projects/${id}/execs`)).statusCode).toBe(404);
  });

  it("the audit lists each exec with its counts; never its stdin or output", async () => {
    const answer = await exec({
      command: ["sh", "-c", CAT_AND_PRINT],
      stdin: "stdin-marker-2e8d\n",
      env: { TOKEN: "env-value-marker-5d2c" },
    });
    const execId = answer.json().exec_id;
    const audit = await h.as("alice", "GET", `/projects/${id}/execs?limit=1000`);
    expect(audit.statusCode).toBe(200);
    const row = audit.json().execs.find((e: { id: string }) => e.id === execId);
    expect(row).toMatchObject({
      user_id: h.users.alice.id,
      command: ["sh", "-c", CAT_AND_PRINT],
      env_names: ["TOKEN"],
      exit_code: 5,
      stdin_bytes: 18,
      stdout_bytes: 18 + 16,
      stderr_bytes: 16,
      timed_out: false,
      background: false,
    });
    expect(row.duration_ms).toBeGreaterThanOrEqual(0);
    const everything = JSON.stringify(
      (await h.db.query("select * from sandbox_execs where project_id = $1", [id])).rows,
    );
    expect(answer.json()).toMatchObject({
      stdout: "stdin-marker-2e8d\ncomputed-42-out\n",
      stderr: "computed-33-err\n",
    });
    for (const secret of ["stdin-marker", "computed-42-out", "computed-33-err", "env-value-marker"])
      expect(everything).not.toContain(secret);
    // Every exec of this file is there: the 50 concurrent ones included.
    expect(audit.json().execs.length).toBeGreaterThan(60);
  });

  it("a stopped sandbox answers 409 naming its status", async () => {
    expect((await h.as("alice", "POST", `/projects/${id}/stop`)).statusCode).toBe(202);
    await h.waitForStatus("alice", id, "stopped", 300_000);
    const answer = await exec({ command: ["true"] });
    expect(answer.statusCode, answer.body).toBe(409);
    expect(answer.json()).toMatchObject({ error: "sandbox_not_running", details: { status: "stopped" } });
    expect(answer.json().message).toContain("stopped");
  });
});
