// `sbx sync --watch`'s pure parts (cli/sync-watch.ts): the options it refuses, the reconnection delays, the
// waiter's line protocol (and the waiter itself, run here by python3 against a real repository), and the
// watch's loop against a pretend sandbox whose sessions drop, stop and refuse.
import { execFileSync, spawn } from "node:child_process";
import * as fs from "node:fs/promises";
import * as os from "node:os";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CliError, EXIT } from "../../cli/errors.js";
import {
  endsTheWatch,
  lineSplitter,
  NOT_RUNNING_POLL_MS,
  parseWaiterLine,
  reconnectDelayMs,
  WAITER,
  WatchEnd,
  watchConflicts,
  watchSandbox,
  type Updated,
  type WaiterSession,
  type WatchEvent,
  type WatchIo,
} from "../../cli/sync-watch.js";

describe("the options --watch takes", () => {
  it.each([
    [{}, undefined],
    [{ watch: true }, undefined],
    [{ to: "/tmp/out" }, /does not take --to \(/],
    [{ artifacts: ["dist"], to: "out" }, /does not take --artifacts, --to \(run sbx sync --artifacts --to/],
    [{ mode: "auto-idle", interval: "5" }, /does not take --mode, --interval/],
  ])("%j → %s", (options, refused) => {
    const said = watchConflicts(options);
    if (refused) expect(said).toMatch(refused);
    else expect(said).toBeUndefined();
  });
});

describe("reconnection delays", () => {
  it("double from 1 s to at most 30 s", () => {
    expect([1, 2, 3, 4, 5, 6, 7, 50, 5000].map(reconnectDelayMs)).toEqual([
      1_000, 2_000, 4_000, 8_000, 16_000, 30_000, 30_000, 30_000, 30_000,
    ]);
  });
});

describe("which errors end the watch", () => {
  it.each([
    [new CliError(EXIT.auth, "login expired"), true],
    [new CliError(EXIT.notFound, "project deleted"), true],
    [new CliError(EXIT.refused, "fsck error"), true],
    [new CliError(EXIT.failure, "cannot reach the runtime"), false],
    [new CliError(EXIT.remote, "ssh failed"), false],
    [new WatchEnd(EXIT.remote, "python3: command not found"), true],
    [new CliError(EXIT.conflict, "not running yet"), false],
    [new Error("ECONNRESET"), false],
  ])("%s → %s", (error, ends) => expect(endsTheWatch(error)).toBe(ends));
});

describe("the waiter's lines", () => {
  const sha = "0123456789abcdef0123456789abcdef01234567";
  it.each([
    ["ready 3", { kind: "ready", branches: 3 }],
    [`moved refs/heads/main ${sha}`, { kind: "moved", ref: "refs/heads/main", to: sha }],
    [`moved refs/heads/feat/x ${sha}`, { kind: "moved", ref: "refs/heads/feat/x", to: sha }],
    ["gone refs/heads/wt-a", { kind: "gone", ref: "refs/heads/wt-a" }],
    ["gone refs/heads/café", { kind: "gone", ref: "refs/heads/café" }],
    ["gone refs/heads/x\u009b2J", undefined],
    ["gone refs/heads/a\\b", undefined],
    ["ready", undefined],
    ["ready -1", undefined],
    [`moved refs/tags/v1 ${sha}`, undefined],
    [`moved refs/heads/a b ${sha}`, undefined],
    [`moved refs/heads/main ${sha} extra`, undefined],
    [`moved refs/heads/main`, undefined],
    ["gone refs/heads/x\x1b[2J", undefined],
    [" ready 1", undefined],
    ["Welcome to the sandbox", undefined],
  ])("%j → %j", (line, parsed) => expect(parseWaiterLine(line)).toEqual(parsed));

  it("come whole whatever the chunks, and an overlong line is dropped whole", () => {
    const lines: string[] = [];
    const feed = lineSplitter((line) => lines.push(line), 24);
    for (const chunk of [
      "rea",
      "dy 1\nmoved refs/",
      "heads/a 1\n",
      "x".repeat(20),
      "y".repeat(20),
      "\ngone a\n",
    ])
      feed(chunk);
    expect(lines).toEqual(["ready 1", "moved refs/heads/a 1", "gone a"]);
  });
});

describe("the waiter, run by python3 against a repository", () => {
  let dir: string;
  const git = (...args: string[]) =>
    execFileSync("git", ["-C", dir, ...args], {
      encoding: "utf8",
      env: {
        ...process.env,
        GIT_AUTHOR_NAME: "a",
        GIT_AUTHOR_EMAIL: "a@x",
        GIT_COMMITTER_NAME: "a",
        GIT_COMMITTER_EMAIL: "a@x",
      },
    }).trim();

  beforeAll(async () => {
    dir = await fs.mkdtemp(path.join(os.tmpdir(), "sync-waiter-"));
    git("init", "-q", "-b", "main");
    git("commit", "-q", "--allow-empty", "-m", "one");
    git("branch", "side");
    git("pack-refs", "--all"); // one branch packed, then moved as a loose ref
  });
  afterAll(async () => {
    if (dir) await fs.rm(dir, { recursive: true, force: true });
  });

  /** The waiter as the session runs it; `next` waits for its next line. */
  function startWaiter(gitDir: string) {
    const child = spawn("python3", ["-c", WAITER, gitDir, "50"], { stdio: ["pipe", "pipe", "pipe"] });
    const queue: string[] = [];
    const waiting: ((line: string) => void)[] = [];
    child.stdout.setEncoding("utf8");
    child.stdout.on(
      "data",
      lineSplitter((line) => (waiting.length > 0 ? waiting.shift()!(line) : queue.push(line))),
    );
    let stderr = "";
    child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
    const exited = new Promise<number | null>((resolve) => child.once("close", resolve));
    return {
      child,
      exited,
      stderr: () => stderr,
      next: () =>
        queue.length > 0
          ? Promise.resolve(queue.shift()!)
          : new Promise<string>((resolve) => waiting.push(resolve)),
      pending: () => [...queue],
    };
  }

  it("says ready with the branches, a line for each move, creation and deletion, none for a repack; ends when its input closes", async () => {
    const waiter = startWaiter(path.join(dir, ".git"));
    expect(await waiter.next()).toBe("ready 2");
    git("commit", "-q", "--allow-empty", "-m", "two");
    expect(await waiter.next()).toBe(`moved refs/heads/main ${git("rev-parse", "main")}`);
    git("branch", "feat/x");
    expect(await waiter.next()).toBe(`moved refs/heads/feat/x ${git("rev-parse", "main")}`);
    git("update-ref", "refs/heads/side", git("rev-parse", "main"));
    expect(await waiter.next()).toBe(`moved refs/heads/side ${git("rev-parse", "main")}`);
    git("branch", "-D", "feat/x");
    expect(await waiter.next()).toBe("gone refs/heads/feat/x");
    // The same branches written elsewhere (loose refs into packed-refs) are no move.
    git("pack-refs", "--all");
    git("commit", "-q", "--allow-empty", "-m", "three");
    expect(await waiter.next()).toBe(`moved refs/heads/main ${git("rev-parse", "main")}`);
    expect(waiter.pending()).toEqual([]);
    waiter.child.stdin.end();
    expect(await waiter.exited).toBe(0);
  });

  it("exits 4 naming the path when there is no repository", async () => {
    const waiter = startWaiter(path.join(dir, "nowhere", ".git"));
    expect(await waiter.exited).toBe(4);
    expect(waiter.stderr()).toMatch(/no git repository at .*nowhere\/\.git/);
  });
});

/** A pretend sandbox: each `connect` takes the next step of a script; sessions are driven by the test. */
function pretend(steps: ({ running: false; status: string } | { running: true } | Error)[]) {
  const events: WatchEvent[] = [];
  const sleeps: number[] = [];
  const sessions: { say: (line: string) => void; end: (why: string) => void; fail: (e: Error) => void }[] =
    [];
  let fetches = 0;
  let fetchResult: () => Promise<readonly Updated[]> = async () => [];
  const opened: ((index: number) => void)[] = [];
  const io: WatchIo<string> = {
    connect: async () => {
      const step = steps.shift();
      if (!step) throw new CliError(EXIT.notFound, "the script ran out");
      if (step instanceof Error) throw step;
      return step.running ? { running: true, target: "target" } : step;
    },
    openSession: (_target, onLine): WaiterSession => {
      let end!: (why: string) => void;
      let fail!: (e: Error) => void;
      const ended = new Promise<string>((resolve, reject) => ((end = resolve), (fail = reject)));
      sessions.push({ say: onLine, end, fail });
      opened.splice(0).forEach((resolve) => resolve(sessions.length - 1));
      return { ended, close: () => end("closed") };
    },
    fetchCommits: async () => {
      fetches++;
      return fetchResult();
    },
    report: (event) => events.push(event),
    sleep: async (ms) => {
      sleeps.push(ms);
    },
  };
  return {
    io,
    events,
    sleeps,
    sessions,
    fetches: () => fetches,
    setFetch: (f: () => Promise<readonly Updated[]>) => (fetchResult = f),
    /** Resolves with the index of the next session opened (or one already open at `index`). */
    session: (index: number) =>
      sessions.length > index
        ? Promise.resolve(index)
        : new Promise<number>((resolve) => opened.push(() => resolve(index))),
  };
}

const settle = () => new Promise((resolve) => setTimeout(resolve, 10));

describe("the watch's loop", () => {
  it("fetches when ready and for each move (one at a time, lines meanwhile make one more), reconnects after a drop, waits while the sandbox is stopped, fetches after reconnecting", async () => {
    const sandbox = pretend([
      { running: true },
      new CliError(EXIT.failure, "cannot reach the runtime"),
      { running: false, status: "stopping" },
      { running: false, status: "stopped" },
      { running: false, status: "stopped" },
      { running: true },
    ]);
    const stop = new AbortController();
    const watched = watchSandbox(sandbox.io, stop.signal);
    const first = sandbox.sessions[await sandbox.session(0)]!;
    first.say("moved refs/heads/main 1"); // before ready: not a session's line yet
    await settle();
    expect(sandbox.fetches()).toBe(0);
    first.say("ready 2");
    await settle();
    expect(sandbox.fetches()).toBe(1);
    expect(sandbox.events).toEqual([{ event: "watching" }]);
    // A slow fetch: three lines while it runs make one fetch more, not three.
    let release!: () => void;
    sandbox.setFetch(
      () =>
        new Promise((resolve) => {
          release = () => resolve([{ ref: "sandbox/main", from: null, to: "abc" }]);
        }),
    );
    first.say("moved refs/heads/main 2");
    await settle();
    first.say("moved refs/heads/main 3");
    first.say("gone refs/heads/x");
    first.say("something else");
    release();
    await settle();
    release();
    await settle();
    expect(sandbox.fetches()).toBe(3);
    sandbox.setFetch(async () => []);
    first.end("the session ended (exit 255)");
    const second = sandbox.sessions[await sandbox.session(1)]!;
    second.say("ready 2");
    await settle();
    expect(sandbox.fetches()).toBe(4);
    expect(sandbox.events).toEqual([
      { event: "watching" },
      { event: "fetched", updated: [{ ref: "sandbox/main", from: null, to: "abc" }] },
      { event: "fetched", updated: [{ ref: "sandbox/main", from: null, to: "abc" }] },
      // The first session had caught up, so the delays start from 1 s; the failed connect makes it 2 s.
      { event: "disconnected", reason: "the session ended (exit 255)", retry_in_s: 1 },
      { event: "disconnected", reason: "cannot reach the runtime", retry_in_s: 2 },
      { event: "waiting", status: "stopping" },
      { event: "waiting", status: "stopped" },
      { event: "reconnected" },
    ]);
    expect(sandbox.sleeps).toEqual([
      1_000,
      2_000,
      NOT_RUNNING_POLL_MS,
      NOT_RUNNING_POLL_MS,
      NOT_RUNNING_POLL_MS,
    ]);
    stop.abort();
    await expect(watched).resolves.toBeUndefined();
  });

  it("a failed fetch ends the session (the next one fetches again); the delays grow until a session catches up", async () => {
    const sandbox = pretend([{ running: true }, { running: true }, { running: true }]);
    const stop = new AbortController();
    const watched = watchSandbox(sandbox.io, stop.signal);
    sandbox.setFetch(async () => {
      throw new CliError(EXIT.remote, "git fetch from the sandbox failed: Connection reset");
    });
    sandbox.sessions[await sandbox.session(0)]!.say("ready 1");
    sandbox.sessions[await sandbox.session(1)]!.say("ready 1");
    await sandbox.session(2);
    expect(sandbox.events).toEqual([
      {
        event: "disconnected",
        reason: "fetching failed: git fetch from the sandbox failed: Connection reset",
        retry_in_s: 1,
      },
      {
        event: "disconnected",
        reason: "fetching failed: git fetch from the sandbox failed: Connection reset",
        retry_in_s: 2,
      },
    ]);
    stop.abort();
    await expect(watched).resolves.toBeUndefined();
  });

  it("objects git's checks refuse end the watch (exit 9); so do a sandbox that cannot run the waiter and a project that is gone (exit 4)", async () => {
    const refusing = pretend([{ running: true }]);
    refusing.setFetch(async () => {
      throw new CliError(EXIT.refused, "refused what the sandbox sent to git fetch");
    });
    const watched = watchSandbox(refusing.io, new AbortController().signal);
    refusing.sessions[await refusing.session(0)]!.say("ready 1");
    await expect(watched).rejects.toMatchObject({ code: EXIT.refused });

    const noPython = pretend([{ running: true }, { running: true }]);
    const ended = watchSandbox(noPython.io, new AbortController().signal);
    noPython.sessions[await noPython.session(0)]!.fail(
      new WatchEnd(EXIT.remote, "python3: command not found"),
    );
    await expect(ended).rejects.toThrow("python3: command not found");
    expect(noPython.sessions).toHaveLength(1);

    const gone = pretend([new CliError(EXIT.notFound, "project not found")]);
    await expect(watchSandbox(gone.io, new AbortController().signal)).rejects.toMatchObject({
      code: EXIT.notFound,
    });
  });

  it("Ctrl-C during a fetch closes the session and resolves once that fetch is done", async () => {
    const sandbox = pretend([{ running: true }]);
    let release!: () => void;
    let done = false;
    sandbox.setFetch(
      () =>
        new Promise((resolve) => {
          release = () => {
            done = true;
            resolve([]);
          };
        }),
    );
    const stop = new AbortController();
    let resolved = false;
    const watched = watchSandbox(sandbox.io, stop.signal).then(() => (resolved = true));
    sandbox.sessions[await sandbox.session(0)]!.say("ready 1");
    await settle();
    stop.abort();
    await settle();
    expect(resolved).toBe(false);
    release();
    await watched;
    expect(done).toBe(true);
    expect(sandbox.sessions).toHaveLength(1);
  });
});
