// The agent pane's two halves apart from a sandbox: the image's sandbox-agent-turn (python, run here with a
// `claude` on its PATH that prints what Claude Code's stream-json prints) and the runtime's reading of what it
// says (runtime/api/agent/turns.ts: every line checked, a turn's events kept and bounded). The whole, with the
// real Claude Code, is tests/integration/agent-pane.test.ts.
import { spawnSync } from "node:child_process";
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import {
  MAX_KEPT_BYTES,
  MAX_LINE_BYTES,
  SandboxLines,
  TurnLog,
  TurnStore,
  type StoredTurn,
} from "../../runtime/api/agent/turns.js";
import type { SandboxTurnEvent } from "../../runtime/api/agent/schemas.js";
import { REPO_ROOT } from "../../lib/toolchain.js";

const HELPER = path.join(REPO_ROOT, "sandbox-image/rootfs/usr/local/bin/sandbox-agent-turn");
const scratch = mkdtempSync(path.join(os.tmpdir(), "agent-turn-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** Claude Code's print mode with stream-json, partial messages on: one turn that runs a command. */
const CLAUDE_LINES = [
  { type: "system", subtype: "init", session_id: "s-1", model: "claude-test", tools: ["Bash"] },
  { type: "stream_event", event: { type: "message_start", message: { id: "m-1" } } },
  {
    type: "stream_event",
    event: { type: "content_block_delta", delta: { type: "text_delta", text: "I will " } },
  },
  {
    type: "stream_event",
    event: { type: "content_block_delta", delta: { type: "text_delta", text: "run it." } },
  },
  // Then the message again, a block a line, as Claude Code prints it.
  { type: "assistant", message: { id: "m-1", content: [{ type: "text", text: "I will run it." }] } },
  {
    type: "assistant",
    message: {
      id: "m-1",
      content: [{ type: "tool_use", name: "Bash", input: { command: "echo hi", description: "d" } }],
    },
  },
  {
    type: "user",
    message: { content: [{ type: "tool_result", tool_use_id: "t", content: "hi\n", is_error: false }] },
  },
  // A message that was not streamed (partial messages off, or an older CLI): its text comes whole.
  { type: "assistant", message: { id: "m-2", content: [{ type: "text", text: "It printed hi." }] } },
  {
    type: "assistant",
    message: { content: [{ type: "tool_use", name: "Read", input: { file_path: "/workspace/a.txt" } }] },
  },
  {
    type: "result",
    subtype: "success",
    is_error: false,
    result: "It printed hi.",
    duration_ms: 1234,
    num_turns: 2,
    total_cost_usd: 0.01,
  },
];

/** Runs the helper with a `claude` that prints `stdout` lines (and `stderr`), exits `code`. */
function runHelper(
  args: string[],
  prompt: string,
  claude: { stdout: string[]; stderr?: string; code?: number } = { stdout: [] },
) {
  const bin = mkdtempSync(path.join(scratch, "bin-"));
  const data = path.join(bin, "out.txt");
  writeFileSync(data, claude.stdout.map((line) => `${line}\n`).join(""));
  writeFileSync(
    path.join(bin, "claude"),
    [
      "#!/bin/sh",
      // The prompt is its last argument; print mode's flags come first.
      `[ "$1" = -p ] || exit 9`,
      `for last; do :; done; printf '%s' "$last" > ${bin}/prompt.txt`,
      `while IFS= read -r line; do printf '%s\\n' "$line"; done < ${data}`,
      claude.stderr ? `printf '%s\\n' '${claude.stderr}' >&2` : "",
      `exit ${claude.code ?? 0}`,
    ].join("\n"),
  );
  chmodSync(path.join(bin, "claude"), 0o755);
  const transcript = path.join(bin, "transcript.log");
  const result = spawnSync("/usr/bin/python3", [HELPER, ...args], {
    input: prompt,
    encoding: "utf8",
    // No tmux on this PATH: the helper writes its transcript and leaves the host's tmux alone.
    env: { PATH: bin, HOME: bin, SANDBOX_AGENT_TRANSCRIPT: transcript },
  });
  const events = result.stdout
    .split("\n")
    .filter(Boolean)
    .map((line) => JSON.parse(line) as SandboxTurnEvent);
  const read = (file: string) => {
    try {
      return readFileSync(path.join(bin, file), "utf8");
    } catch {
      return "";
    }
  };
  return { ...result, events, transcript: read("transcript.log"), prompt: read("prompt.txt") };
}

describe("sandbox-agent-turn (the image's side of a turn)", () => {
  it("turns Claude Code's stream-json into the platform's events, and writes the turn for the terminal", () => {
    const run = runHelper(["claude", "turn-1"], "please run `echo hi`", {
      stdout: CLAUDE_LINES.map((line) => JSON.stringify(line)),
    });
    expect(run.status, run.stderr).toBe(0);
    expect(run.prompt).toBe("please run `echo hi`");
    expect(run.events).toEqual([
      { type: "session", session_id: "s-1", model: "claude-test" },
      { type: "text", text: "I will " },
      { type: "text", text: "run it." },
      // The streamed message's whole text is not said twice.
      { type: "command", tool: "Bash", command: "echo hi" },
      { type: "output", text: "hi\n", is_error: false },
      { type: "text", text: "It printed hi." },
      { type: "command", tool: "Read", command: "/workspace/a.txt" },
      {
        type: "result",
        text: "It printed hi.",
        is_error: false,
        duration_ms: 1234,
        turns: 2,
        cost_usd: 0.01,
      },
    ]);
    expect(run.transcript).toContain("› please run `echo hi`");
    expect(run.transcript).toContain("$ echo hi");
    expect(run.transcript).toContain("● Read /workspace/a.txt");
    expect(run.transcript).toContain("✓ done in 1.2 s");
    // Lines end in CRLF for the terminal that shows them.
    expect(run.transcript).not.toMatch(/[^\r]\n/);
  });

  it("says what it could not read, and what the agent wrote on stderr; the agent's exit is its own", () => {
    const run = runHelper(["claude", "turn-2"], "hi", {
      stdout: ["not json at all", JSON.stringify({ type: "unknown-kind" })],
      stderr: "API Error: 401",
      code: 3,
    });
    expect(run.status).toBe(3);
    expect(run.events).toContainEqual({ type: "notice", text: "not json at all" });
    expect(run.events).toContainEqual({ type: "notice", text: "API Error: 401" });
    expect(run.events.some((e) => e.type === "text")).toBe(false);
    expect(run.transcript).toContain("claude exited 3");
  });

  it("refuses an unknown agent and an empty prompt, naming them", () => {
    const unknown = runHelper(["gpt", "turn-3"], "hi");
    expect(unknown.status).toBe(2);
    expect(unknown.stderr).toContain("usage: sandbox-agent-turn {claude}");
    const empty = runHelper(["claude", "turn-4"], "  \n");
    expect(empty.status).toBe(2);
    expect(empty.stderr).toContain("the prompt (stdin) is empty");
  });
});

describe("the runtime's reading of a turn", () => {
  const collect = () => {
    const events: SandboxTurnEvent[] = [];
    return { events, lines: new SandboxLines((event) => events.push(event)) };
  };

  it("reads events split across chunks; a line of another shape, or not JSON, is only a notice", () => {
    const { events, lines } = collect();
    const text = JSON.stringify({ type: "text", text: "héllo" });
    const bytes = Buffer.from(`${text}\n`);
    // Split inside the é: the decoder keeps the character whole.
    const cut = bytes.indexOf(0xc3) + 1;
    lines.push(bytes.subarray(0, cut));
    lines.push(bytes.subarray(cut));
    lines.push(Buffer.from('{"type":"command","tool":"Bash","command":"ls","extra":1}\n'));
    lines.push(Buffer.from('{"type":"end","exit_code":0}\nplain words\n'));
    lines.push(Buffer.from(JSON.stringify({ type: "text", text: "x".repeat(70_000) })));
    lines.end();
    expect(events[0]).toEqual({ type: "text", text: "héllo" });
    expect(events.slice(1).map((e) => e.type)).toEqual(["notice", "notice", "notice", "notice"]);
    expect((events[1] as { text: string }).text).toContain("not a turn's event");
    expect((events[2] as { text: string }).text).toContain('{"type":"end"');
    expect(events[3]).toEqual({ type: "notice", text: "plain words" });
  });

  it("a line past its bound is skipped with one notice, and the next line is read", () => {
    const { events, lines } = collect();
    const chunk = Buffer.alloc(64 * 1024, "a");
    for (let sent = 0; sent <= MAX_LINE_BYTES * 2; sent += chunk.length) lines.push(chunk);
    lines.push(Buffer.from(`tail of the long line\n${JSON.stringify({ type: "text", text: "after" })}\n`));
    expect(events).toHaveLength(2);
    expect((events[0] as { text: string }).text).toMatch(/^a line of over 262144 bytes/);
    expect(events[1]).toEqual({ type: "text", text: "after" });
  });

  it("a turn's log numbers its events, gives a reader those after its own, and keeps its end past its bound", async () => {
    const log = new TurnLog();
    log.add({ type: "text", text: "a" });
    log.add({ type: "command", tool: "Bash", command: "ls" });
    const reading = (async () => {
      const seen: number[] = [];
      for await (const event of log.read(0, () => false)) seen.push(event.seq);
      return seen;
    })();
    const big = "x".repeat(60_000);
    for (let i = 0; i * big.length < MAX_KEPT_BYTES + 200_000; i++) log.add({ type: "text", text: big });
    log.add({ type: "result", text: "ok", is_error: false, duration_ms: 1, turns: 1, cost_usd: 0 });
    log.add({ type: "end", exit_code: 0, duration_ms: 5, timed_out: false, killed_by: null });
    log.add({ type: "text", text: "after the end: not kept" });
    const seen = await reading;
    expect(seen[0]).toBe(1);
    expect(seen).toEqual(log.events.slice(1).map((e) => e.seq));
    const notices = log.events.filter((e) => e.type === "notice");
    expect(notices).toHaveLength(1);
    expect((notices[0] as { text: string }).text).toContain("MiB");
    expect(log.events.at(-1)).toMatchObject({ type: "end", exit_code: 0 });
    expect(log.events.at(-2)).toMatchObject({ type: "result" });
    expect(JSON.stringify(log.events).length).toBeLessThan(MAX_KEPT_BYTES + 100_000);
  });
});

describe("the runtime's turns", () => {
  it("keeps an ended turn an hour, a project's newest 10 and all projects' newest 200; a running one always", () => {
    let now = 0;
    const store = new TurnStore<StoredTurn>(
      { keepEndedMs: 3_600_000, perProject: 10, total: 200 },
      () => now,
    );
    const turn = (id: string, projectId: string, endedAt?: number): StoredTurn => ({
      id,
      projectId,
      log: new TurnLog(),
      endedAt,
    });
    // A project's: the running one and its newest ten ended.
    store.add(turn("running", "a"));
    for (let i = 0; i < 15; i++) store.add(turn(`a-${i}`, "a", now));
    expect(store.list("a").map((t) => t.id)).toEqual([
      ...Array.from({ length: 10 }, (_, i) => `a-${14 - i}`),
      "running",
    ]);
    expect(store.running("a")?.id).toBe("running");
    // Another project's turn is not found through this one.
    store.add(turn("b-0", "b", now));
    expect(store.get("a", "b-0")).toBeUndefined();
    expect(store.get("b", "b-0")?.id).toBe("b-0");
    // All projects': 300 projects that each asked once and never came back keep 200 turns, the newest.
    for (let p = 0; p < 300; p++) store.add(turn(`p-${p}`, `project-${p}`, now));
    store.forget();
    expect(store.size).toBe(201); // 200 ended, and the running one
    expect(store.get("project-299", "p-299")).toBeDefined();
    expect(store.get("project-0", "p-0")).toBeUndefined();
    expect(store.running("a")?.id).toBe("running");
    // An hour after their end, the ended ones go; the running one stays.
    now += 3_600_001;
    store.forget();
    expect(store.size).toBe(1);
    expect(store.list("a").map((t) => t.id)).toEqual(["running"]);
  });
});
