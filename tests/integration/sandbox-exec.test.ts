// Commands and files through the API (issue 23): POST /projects/{id}/exec (buffered, background),
// /exec/stream (NDJSON over a real HTTP connection), the background processes and the audit; files written,
// read, listed, deleted and moved as tar streams, and the paths that must not escape. On a real sandbox
// made by the real reconciler; what is inside is read through a bare `docker exec`.
import { execFileSync } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tenantNames } from "../../components/tenant/names.js";
import { dockerClient } from "../../lib/docker-client.js";
import { waitFor } from "../../lib/process.js";
import { ExecLaunchers, launchLine, MAX_LAUNCHERS, startLauncher } from "../../runtime/sandbox/launcher.js";
import { AGENT_USER } from "../../runtime/sandbox/process.js";
import { dockerRunner, type SandboxRunners } from "../../runtime/sandbox/runner.js";
import { apiHarness, type ApiHarness } from "../helpers/api.js";
import { docker, execIn, uniqueName } from "../helpers/containers.js";
import { testPlatform, type TestPlatform } from "../helpers/host.js";
import { testDatabase } from "../helpers/postgres.js";
import { RuntimeConfig } from "../../stacks/config.js";

/** The file size limit here: small enough to be passed in a test. */
const MAX_FILE = 32 * 1024 * 1024;
/** The background processes' limits here: a few processes, a few MiB. */
const MAX_BACKGROUND = 4;
const BACKGROUND_OUTPUT = 1024 * 1024;
const PROJECT_OUTPUT = 2 * 1024 * 1024;

let platform: TestPlatform;
let h: ApiHarness<"alice" | "bob">;
let id: string;
let container: string;
let base: string;

/** Bytes of stdout the runtime read from each listing run (`sbx-files stat`), in order. */
const listingReads: number[] = [];

const client = dockerClient();
/** The container backend's launchers (runtime/sandbox/launcher.ts): the API's commands go through them. */
const launchers = new ExecLaunchers(() => client, AGENT_USER);

/**
 * The runtime's own runner for containers, which notes what each listing run sent it (its stdout passes
 * on unchanged): how much of find's output the runtime read.
 */
const observedSandboxes: SandboxRunners = (projectId) => {
  const runner = dockerRunner(client, projectId, launchers);
  return Promise.resolve({
    start(execId, command, onOutput) {
      if (command.argv[3] !== "sbx-files" || command.argv[4] !== "stat")
        return runner.start(execId, command, onOutput);
      const read = listingReads.push(0) - 1;
      return runner.start(execId, command, (stream, chunk) => {
        if (stream === "stdout") listingReads[read]! += chunk.length;
        onOutput(stream, chunk);
      });
    },
    signal: (execId, signal) => runner.signal(execId, signal),
    run: (argv, options) => runner.run(argv, options),
  });
};

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

/** An async iterable as a web ReadableStream (a fetch body of unknown length). */
const ReadableStreamFrom = (source: AsyncIterable<Buffer>) =>
  new ReadableStream({
    async start(controller) {
      for await (const chunk of source) controller.enqueue(chunk);
      controller.close();
    },
  });

const exec = (body: object, who: "alice" | "bob" = "alice") =>
  h.as(who, "POST", `/projects/${id}/exec`, body);

beforeAll(async () => {
  platform = await testPlatform({ subnetPool: "10.243.0.0/23", sshPortRange: [27960, 27965] });
  h = await apiHarness({
    database: await testDatabase("pglite", { under: platform.config.host.dataDir }),
    config: platform.config,
    users: ["alice", "bob"],
    reconciler: true,
    server: {
      limits: {
        ...RuntimeConfig.parse({}),
        files: { ...RuntimeConfig.parse({}).files, maxBytes: MAX_FILE },
        exec: {
          ...RuntimeConfig.parse({}).exec,
          maxBackgroundProcesses: MAX_BACKGROUND,
          backgroundOutputBytes: BACKGROUND_OUTPUT,
          backgroundOutputBytesPerProject: PROJECT_OUTPUT,
        },
      },
      projects: { sandboxes: observedSandboxes },
    },
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
    // Each stream whole and in order. Between stdout and stderr there is no order to keep: the engine reads
    // the two pipes side by side (a full run once saw "oops" first).
    const chunks = read.output as { stream: string; data: string }[];
    const of = (stream: string) =>
      chunks
        .filter((c) => c.stream === stream)
        .map((c) => c.data)
        .join("");
    expect(of("stdout")).toBe("line-1\nline-2\nline-3\n");
    expect(of("stderr")).toBe("oops\n");
    // An offset counts into the output as it was received, both streams together.
    const received = chunks.map((c) => c.data).join("");
    const later = (await h.as("alice", "GET", `/projects/${id}/processes/${execId}?offset=14`)).json();
    expect(later.offset).toBe(14);
    expect(later.output.map((o: { data: string }) => o.data).join("")).toBe(received.slice(14));
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

  it("background processes: one more than runtime.exec.maxBackgroundProcesses at once is 429 naming it, and nothing of it runs", async () => {
    // Six at once for four places: the places are counted as each request is admitted, not once it runs.
    const answers = await Promise.all(
      [1, 2, 3, 4, 5, 6].map((n) => exec({ command: `sleep 140${n}`, background: true })),
    );
    const statuses = answers.map((a) => a.statusCode).sort();
    expect(statuses).toEqual([202, 202, 202, 202, 429, 429]);
    const refused = answers.find((a) => a.statusCode === 429)!;
    expect(refused.json()).toMatchObject({
      error: "too_many_processes",
      details: {
        max_background_processes: MAX_BACKGROUND,
        config_key: "agent-sandbox:runtime.exec.maxBackgroundProcesses",
      },
    });
    expect(refused.json().message).toMatch(
      /already runs 4 background processes, the most agent-sandbox:runtime\.exec\.maxBackgroundProcesses allows \(4\)/,
    );
    const running = answers.filter((a) => a.statusCode === 202).map((a) => a.json().exec_id as string);
    await waitFor("the four sleeps", 10_000, async () =>
      (await processes()).filter((p) => /^sleep 140[1-6]$/.test(p)).length === 4 ? true : undefined,
    );
    // One ends: there is room for one more, and for no second.
    const killed = await h.as("alice", "DELETE", `/projects/${id}/processes/${running[0]}`);
    expect(killed.statusCode, killed.body).toBe(200);
    expect((await exec({ command: "sleep 1407", background: true })).statusCode).toBe(202);
    expect((await exec({ command: "sleep 1408", background: true })).statusCode).toBe(429);
    // A stranger to the project learns nothing of its processes: 404, not 429.
    expect((await exec({ command: "true", background: true }, "bob")).statusCode).toBe(404);
    for (const p of (await h.as("alice", "GET", `/projects/${id}/processes`)).json().processes)
      if (p.running) await h.as("alice", "DELETE", `/projects/${id}/processes/${p.exec_id}`);
    expect((await processes()).filter((p) => /sleep 140/.test(p))).toEqual([]);
  });

  it("background processes: the output they keep is bounded per project (runtime.exec.backgroundOutputBytesPerProject), the newest kept", async () => {
    // Three processes of 1.5 MB each, each over its own 1 MiB: alone, each would keep 1 MiB (3 MiB in all).
    const OUTPUT = 1_500_000;
    const ids: string[] = [];
    for (const n of [1, 2, 3]) {
      const started = await exec({ command: `yes ${n}abcdefghijklmn | head -c ${OUTPUT}`, background: true });
      expect(started.statusCode, started.body).toBe(202);
      ids.push(started.json().exec_id);
    }
    const views = await Promise.all(
      ids.map((execId) =>
        waitFor(`process ${execId}'s end`, 30_000, async () => {
          const body = (await h.as("alice", "GET", `/projects/${id}/processes/${execId}`)).json();
          return body.running ? undefined : body;
        }),
      ),
    );
    // Every view read after all three ended: what the project keeps now.
    const kept = await Promise.all(
      ids.map(async (execId) => {
        const body = (await h.as("alice", "GET", `/projects/${id}/processes/${execId}`)).json();
        expect(body.next_offset).toBe(OUTPUT);
        // What is kept is the newest: from `offset` on, to the end.
        const data = (body.output as { data: string }[]).map((o) => o.data).join("");
        expect(data.length).toBe(body.next_offset - body.offset);
        expect(body.dropped_bytes).toBe(body.offset);
        return body.next_offset - body.offset;
      }),
    );
    expect(views.map((v) => v.exit_code)).toEqual([0, 0, 0]);
    const total = kept.reduce((sum, n) => sum + n, 0);
    expect(total).toBeLessThanOrEqual(PROJECT_OUTPUT);
    // The budget is used, not starved: what was dropped went only to keep the sum under it.
    expect(total).toBeGreaterThan(PROJECT_OUTPUT - 64 * 1024);
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

  const files = (query: Record<string, string>, suffix = "") =>
    `${base}/projects/${id}/files${suffix}?${new URLSearchParams(query)}`;
  const auth = () => ({ authorization: `Bearer ${h.users.alice.token}` });
  const put = (url: string, body: Buffer, type = "application/octet-stream") =>
    fetch(url, { method: "PUT", headers: { ...auth(), "content-type": type }, body });

  it("files: 20 MB of binary written and read back with the same checksum, mode kept, listed, deleted", async () => {
    const bytes = randomBytes(20 * 1024 * 1024);
    const written = await put(files({ path: "data/blob.bin", mode: "600" }, "/content"), bytes);
    expect(written.status, await written.clone().text()).toBe(200);
    expect(await written.json()).toEqual({
      path: "/home/agent/data/blob.bin",
      size: bytes.length,
      mode: "600",
    });
    const read = await fetch(files({ path: "/home/agent/data/blob.bin" }, "/content"), { headers: auth() });
    expect(read.status).toBe(200);
    const back = Buffer.from(await read.arrayBuffer());
    expect(createHash("sha256").update(back).digest("hex")).toBe(
      createHash("sha256").update(bytes).digest("hex"),
    );
    expect((await execIn(container, "stat -c '%a %U' /home/agent/data/blob.bin")).stdout).toBe("600 agent");
    const list = (await h.as("alice", "GET", `/projects/${id}/files?path=data`)).json();
    expect(list).toMatchObject({ path: "/home/agent/data", type: "directory" });
    expect(list.entries).toEqual([
      expect.objectContaining({ name: "blob.bin", type: "file", size: bytes.length, mode: "600" }),
    ]);
    const gone = await h.as("alice", "DELETE", `/projects/${id}/files?path=data/blob.bin`);
    expect(gone.statusCode, gone.body).toBe(200);
    expect((await h.as("alice", "GET", `/projects/${id}/files/content?path=data/blob.bin`)).statusCode).toBe(
      404,
    );
    // No temporary file is left beside it.
    expect((await execIn(container, "ls -A /home/agent/data")).stdout).toBe("");
  });

  it("files: a directory longer than runtime.files.maxListEntries is listed a page at a time by cursor, names as bytes; no more of find's output is read than a page", async () => {
    const LIMIT = RuntimeConfig.parse({}).files.maxListEntries;
    const dir = "/home/agent/many";
    await execIn(
      container,
      `mkdir -p ${dir} && cd ${dir} && seq -f 'f%05g' 1 5000 | xargs touch && ` +
        `touch "$(printf 'tab\\there')" "$(printf 'new\\nline')" "$(printf 'bad-\\377')" é '~' 'a b' && ln -s '/x/~' link`,
    );
    // The script's own records, by name as bytes: what each page must hold, and what reading it costs.
    const records = execFileSync(
      "docker",
      [
        ...["exec", "-u", "agent", "-w", dir, container, "sh", "-c"],
        "find . -mindepth 1 -maxdepth 1 -printf '%f/%y\\t%s\\t%m\\t%T@\\t%l\\0' | LC_ALL=C sort -z -t / -k 1,1",
      ],
      { maxBuffer: 64 << 20 },
    );
    const all: Buffer[] = [];
    for (let at = 0; at < records.length;) {
      const end = records.indexOf(0, at);
      all.push(records.subarray(at, end + 1));
      at = end + 1;
    }
    expect(all).toHaveLength(5007);
    const nameOf = (record: Buffer) => record.subarray(0, record.indexOf(0x2f)).toString("utf8");
    const names: string[] = [];
    const reads: number[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const query = new URLSearchParams({ path: dir, ...(cursor ? { cursor } : {}) });
      const answer = await h.as("alice", "GET", `/projects/${id}/files?${query}`);
      expect(answer.statusCode, answer.body).toBe(200);
      const page = answer.json();
      expect(page.entries.length).toBeLessThanOrEqual(LIMIT);
      names.push(...page.entries.map((e: { name: string }) => e.name));
      reads.push(listingReads.at(-1)!);
      cursor = page.next_cursor;
      pages += 1;
    } while (cursor !== null && pages < 10);
    expect(pages).toBe(Math.ceil(all.length / LIMIT));
    expect(names).toEqual(all.map(nameOf));
    expect(names).toContain("bad-\ufffd");
    expect(names).toContain("new\nline");
    // What the runtime read of each listing: its page and the one entry after it, never the directory.
    const pageBytes = (from: number) =>
      all.slice(from, from + LIMIT + 1).reduce((sum, record) => sum + record.length, 0);
    expect(reads).toEqual(Array.from({ length: pages }, (_, n) => pageBytes(n * LIMIT)));
    // A cursor is the name's bytes (one not UTF-8 too): from the entry before each odd name, a page of one
    // is that name, and its cursor goes on with the entry after it.
    const nameBytes = (record: Buffer) => record.subarray(0, record.indexOf(0x2f));
    const pageOfOne = async (cursor: string) => {
      const query = new URLSearchParams({ path: dir, limit: "1", cursor });
      const answer = await h.as("alice", "GET", `/projects/${id}/files?${query}`);
      expect(answer.statusCode, answer.body).toBe(200);
      return answer.json() as { entries: { name: string }[]; next_cursor: string | null };
    };
    for (const [n, record] of all.entries()) {
      if (n === 0 || /^f\d{5}$/.test(nameOf(record))) continue;
      const page = await pageOfOne(nameBytes(all[n - 1]!).toString("base64url"));
      expect(page.entries.map((e) => e.name)).toEqual([nameOf(record)]);
      if (n === all.length - 1) expect(page.next_cursor).toBeNull();
      else expect((await pageOfOne(page.next_cursor!)).entries[0]!.name).toBe(nameOf(all[n + 1]!));
    }
    await execIn(container, `rm -rf ${dir}`);
  });

  it("files: a tar of 1,000 small files arrives with their modes, and comes back as a tar", async () => {
    const dir = mkdtempSync(path.join(tmpdir(), "sbx-tar-"));
    const modes = ["644", "600", "755", "640"];
    try {
      for (let i = 0; i < 1000; i++) {
        const file = path.join(dir, `f${String(i).padStart(4, "0")}.txt`);
        writeFileSync(file, `file ${i}\n`);
        chmodSync(file, Number.parseInt(modes[i % 4]!, 8));
      }
      const tar = execFileSync("tar", ["-c", "-C", dir, "."], { maxBuffer: 64 << 20 });
      const answer = await put(files({ path: "unpacked" }, "/archive"), tar, "application/x-tar");
      expect(answer.status, await answer.clone().text()).toBe(200);
      expect(((await answer.json()) as { entries: number }).entries).toBe(1001); // the files and ./
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
    const listed = (
      await execIn(container, "cd /home/agent/unpacked && stat -c '%n %a %U' f*.txt")
    ).stdout.split("\n");
    expect(listed).toEqual(
      Array.from({ length: 1000 }, (_, i) => `f${String(i).padStart(4, "0")}.txt ${modes[i % 4]} agent`),
    );
    const download = await fetch(files({ path: "unpacked" }, "/archive"), { headers: auth() });
    expect(download.status).toBe(200);
    expect(download.headers.get("content-type")).toMatch(/^application\/x-tar/);
    const names = execFileSync("tar", ["-t"], {
      input: Buffer.from(await download.arrayBuffer()),
      maxBuffer: 64 << 20,
    })
      .toString()
      .split("\n")
      .filter((n) => n.endsWith(".txt"));
    expect(names.length).toBe(1000);
  });

  it("files: paths out of the home and workspace are 403 (400 with '..'), too long or with NUL 400, each naming the path; 404 for another user", async () => {
    await execIn(container, "ln -sfn / /home/agent/root-link");
    // A '..' component is refused by the document's own rules (400); a path that resolves out of the home and
    // workspace in the sandbox is one the agent may not act on (403).
    const refused: [string, number][] = [
      ["../../etc/passwd", 400],
      ["/home/agent/../../etc/passwd", 400],
      ["root-link/etc/passwd", 403],
      ["/proc/self/root/etc/passwd", 403],
      ["/etc/passwd", 403],
    ];
    for (const [asked, status] of refused) {
      const read = await h.as(
        "alice",
        "GET",
        `/projects/${id}/files/content?${new URLSearchParams({ path: asked })}`,
      );
      expect(read.statusCode, `${asked}: ${read.body}`).toBe(status);
      expect(read.json().message).toContain(asked);
      expect(read.json().message).toContain("/etc/passwd");
      const write = await put(files({ path: asked }, "/content"), Buffer.from("x"));
      expect(write.status, asked).toBe(status);
      expect(((await write.json()) as { message: string }).message).toContain(asked);
    }
    const writeOut = await put(files({ path: "root-link/tmp/escaped" }, "/content"), Buffer.from("x"));
    expect(writeOut.status).toBe(403);
    expect((await execIn(container, "ls /tmp/escaped 2>&1")).code).not.toBe(0);
    const deleteOut = await h.as("alice", "DELETE", `/projects/${id}/files?path=root-link/etc/hostname`);
    expect(deleteOut.statusCode).toBe(403);
    const tarOut = await put(
      files({ path: "root-link/tmp" }, "/archive"),
      Buffer.alloc(1024),
      "application/x-tar",
    );
    expect(tarOut.status).toBe(403);
    const long = `${"a".repeat(300)}/x`;
    const tooLong = await h.as(
      "alice",
      "GET",
      `/projects/${id}/files/content?${new URLSearchParams({ path: long })}`,
    );
    expect(tooLong.statusCode).toBe(400);
    expect(tooLong.json().message).toContain("path");
    const longer = await h.as(
      "alice",
      "GET",
      `/projects/${id}/files?${new URLSearchParams({ path: "d/".repeat(2100) })}`,
    );
    expect(longer.statusCode).toBe(400);
    const nul = await h.as("alice", "GET", `/projects/${id}/files/content?path=a%00b`);
    expect(nul.statusCode).toBe(400);
    expect(nul.json().message).toContain("path");
    const bob = await h.as("bob", "GET", `/projects/${id}/files?path=.`);
    expect(bob.statusCode).toBe(404);
  });

  it("files: over the size limit is 413, and nothing is left half-written", async () => {
    // Declared too long: refused before the sandbox is asked.
    const big = await h.app.inject({
      method: "PUT",
      url: `/projects/${id}/files/content?path=big.bin`,
      headers: { ...auth(), "content-type": "application/octet-stream" },
      payload: Buffer.alloc(MAX_FILE + 1),
    });
    expect(big.statusCode, big.body).toBe(413);
    expect(big.json().message).toContain("runtime.files.maxBytes");
    // Sent without a length (chunked): stopped when it passes the limit.
    const chunks = async function* () {
      for (let i = 0; i < 40; i++) yield Buffer.alloc(1024 * 1024);
    };
    const streamed = await fetch(files({ path: "big.bin" }, "/content"), {
      method: "PUT",
      headers: { ...auth(), "content-type": "application/octet-stream" },
      body: ReadableStreamFrom(chunks()),
      duplex: "half",
    } as RequestInit);
    expect(streamed.status).toBe(413);
    await waitFor("the temporary file to go", 10_000, async () =>
      (await execIn(container, "ls -A /home/agent | grep -c sbx-write")).stdout === "0" ? true : undefined,
    );
    expect((await execIn(container, "ls /home/agent/big.bin 2>&1")).code).not.toBe(0);
    await execIn(container, `head -c ${MAX_FILE + 1} /dev/zero > /home/agent/huge.bin`);
    const read = await h.as("alice", "GET", `/projects/${id}/files/content?path=huge.bin`);
    expect(read.statusCode).toBe(413);
  });

  it("ports: a server started inside is listed while it listens", async () => {
    const ports = async () =>
      (await h.as("alice", "GET", `/projects/${id}/ports`)).json().ports as {
        port: number;
        address: string;
      }[];
    expect((await ports()).some((p) => p.port === 8765)).toBe(false);
    const server = (
      await exec({
        command: ["python3", "-m", "http.server", "8765", "--bind", "127.0.0.1"],
        background: true,
      })
    ).json();
    await waitFor("the server to listen", 20_000, async () =>
      (await ports()).some((p) => p.port === 8765 && p.address === "127.0.0.1") ? true : undefined,
    );
    await h.as("alice", "DELETE", `/projects/${id}/processes/${server.exec_id}`);
    expect((await ports()).some((p) => p.port === 8765)).toBe(false);
    expect((await h.as("bob", "GET", `/projects/${id}/ports`)).statusCode).toBe(404);
  });

  it("launcher: a command becomes the waiting launcher, its words and environment as sent, and another waits after it", async () => {
    const runner = dockerRunner(client, id, launchers);
    const run = async (argv: string[], env?: Record<string, string>) => {
      const out: Buffer[] = [];
      const started = await runner.start(
        `launcher-${randomBytes(4).toString("hex")}`,
        { argv, env },
        (_, c) => out.push(c),
      );
      return { code: await started.exited, out: Buffer.concat(out).toString() };
    };
    const waiting = async () =>
      (await processes()).filter((p) => p.startsWith("/bin/sh -c IFS= read -r n")).length;
    await run(["true"]);
    await waitFor("a launcher waiting", 30_000, async () => (launchers.size === 1 ? true : undefined));
    expect(await waiting()).toBe(1);
    const words = ["a b", "it's", "l1\nl2", "$(id)", "`id`", "\\", "*", ""];
    const env = { QUOTED: "v\n'q' $HOME", EMPTY: "" };
    const { code, out } = await run(
      [
        "bash",
        "-c",
        'printf "<%s>" "$@"; printf "|%s|%s|" "$QUOTED" "${EMPTY-unset}"; exit 7',
        "x",
        ...words,
      ],
      env,
    );
    expect(code).toBe(7);
    expect(out).toBe(`${words.map((w) => `<${w}>`).join("")}|${env.QUOTED}||`);
    // The one taken became the command; the next waits, one per sandbox.
    await waitFor("the next launcher waiting", 30_000, async () => (launchers.size === 1 ? true : undefined));
    expect(await waiting()).toBe(1);
  });

  it("launcher: one the agent ends is replaced, and the next command runs", async () => {
    await waitFor("a launcher waiting", 30_000, async () => (launchers.size === 1 ? true : undefined));
    expect((await execIn(container, "pkill -f '^/bin/sh -c IFS= read -r n'")).code).toBe(0);
    await waitFor("the ended launcher let go", 30_000, async () => (launchers.size === 0 ? true : undefined));
    const answer = await exec({ command: ["echo", "after"] });
    expect(answer.statusCode, answer.body).toBe(200);
    expect(answer.json()).toMatchObject({ exit_code: 0, stdout: "after\n" });
    await waitFor("a new launcher waiting", 30_000, async () => (launchers.size === 1 ? true : undefined));
  });

  it("launcher: a burst's replacements wait until no command has come for the quiet time; one due is started by its own next command", async () => {
    // Three bare containers of the image (the agent is its user); launchers of their own, a quiet of 15 s.
    const names = [1, 2, 3].map(() => uniqueName("launcher-burst"));
    const burst = new ExecLaunchers(() => client, AGENT_USER, MAX_LAUNCHERS, 15_000);
    /** Runs `true` through the sandbox's launcher; whether one was waiting for it. */
    const command = async (name: string) => {
      const { stream, waited } = await burst.take(name);
      stream.resume();
      stream.end(launchLine(["true"], []));
      await new Promise((resolve) => stream.on("close", resolve));
      return waited;
    };
    try {
      const image = platform.config.tenants.image;
      for (const name of names)
        await docker("run", "-d", "--name", name, "--network=none", "--entrypoint=sleep", image, "infinity");
      // One command while nothing else runs: its replacement at once, the quiet time not waited for.
      expect(await command(names[0]!)).toBe(false);
      await waitFor("the one replacement", 12_000, async () => (burst.size === 1 ? true : undefined));
      // Three at once: the first takes the waiting one; then all three are due, none started yet.
      expect(await Promise.all(names.map(command))).toEqual([true, false, false]);
      expect({ due: burst.pending, waiting: burst.size }).toEqual({ due: 3, waiting: 0 });
      // A command in a sandbox whose launcher is due starts its own (none waited); then its next is due again.
      expect(await command(names[2]!)).toBe(false);
      expect({ due: burst.pending, waiting: burst.size }).toEqual({ due: 3, waiting: 0 });
      // Commands stopped coming: after the quiet time, one at a time, each gets its next launcher.
      await waitFor("every replacement", 60_000, async () => (burst.size === 3 ? true : undefined));
      expect(burst.pending).toBe(0);
    } finally {
      burst.close();
      await docker("rm", "-f", ...names).catch(() => undefined);
    }
  });

  it("launcher: its stdin closed before a whole command line, it exits having run nothing", async () => {
    const launcher = async (input: string) => {
      const { exec: started, stream } = await startLauncher(client, container, AGENT_USER);
      stream.resume();
      stream.end(input);
      await new Promise((resolve) => stream.on("close", resolve));
      return (await started.inspect()).ExitCode;
    };
    const line = launchLine(["touch", "/tmp/launched"], ["A=1"]);
    expect(line).toBe("1\nexec env A=1 touch /tmp/launched\n");
    // Two of three lines promised, a count that is no number, nothing at all: none runs the command.
    expect(await launcher(`3\nexec touch /tmp/launched\n\n`)).toBe(125);
    expect(await launcher(`x\nexec touch /tmp/launched\n`)).toBe(125);
    expect(await launcher("")).toBe(0);
    expect((await execIn(container, "test -e /tmp/launched")).code).toBe(1);
    expect(await launcher(line)).toBe(0);
    expect((await execIn(container, "test -e /tmp/launched")).code).toBe(0);
  });

  it("a stopped sandbox answers 409 naming its status", async () => {
    expect((await h.as("alice", "POST", `/projects/${id}/stop`)).statusCode).toBe(202);
    await h.waitForStatus("alice", id, "stopped", 300_000);
    const answer = await exec({ command: ["true"] });
    expect(answer.statusCode, answer.body).toBe(409);
    expect(answer.json()).toMatchObject({ error: "sandbox_not_running", details: { status: "stopped" } });
    expect(answer.json().message).toContain("stopped");
    const ports = await h.as("alice", "GET", `/projects/${id}/ports`);
    expect(ports.statusCode).toBe(409);
    expect(ports.json().details).toEqual({ status: "stopped" });
  });
});
