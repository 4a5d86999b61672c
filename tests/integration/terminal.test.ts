// The terminal proxy through a real sandbox: tickets, tmux session `main` over the engine's exec API,
// resize, sharing, reconnect, audit and recordings, every rejection (4401 before the sandbox is touched),
// and the bad inputs of issue 5 (oversize frames, absurd sizes, floods, a client that never reads, a
// sandbox that dies mid-session).
import { execFile } from "node:child_process";
import { existsSync, promises as fs, readlinkSync } from "node:fs";
import * as path from "node:path";
import { promisify } from "node:util";
import WebSocket from "ws";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { dockerClient } from "../../lib/docker-client.js";
import { waitFor } from "../../lib/process.js";
import { dockerAttacher, type SandboxAttacher } from "../../runtime/terminal/attach.js";
import { CLOSE, TerminalProxy } from "../../runtime/terminal/proxy.js";
import { TicketIssuer } from "../../runtime/terminal/tickets.js";
import { apiHarness, TEST_SECRET as secret, type ApiHarness } from "../helpers/api.js";
import { freePort, testPlatform, type TestPlatform } from "../helpers/host.js";
import { testDatabase } from "../helpers/postgres.js";
import { connectTerminal, type TerminalClient } from "../helpers/terminal-client.js";

const exec = promisify(execFile);
const ORIGIN = "http://console.example.test";

let platform: TestPlatform;
let h: ApiHarness<"alice" | "bob">;
const users = { alice: "", bob: "" };
let projectId: string;
let execCalls = 0;
const clients: TerminalClient[] = [];

const as = (who: "alice" | "bob", method: "GET" | "POST" | "DELETE", url: string, origin?: string) =>
  h.as(who, method, url, undefined, origin ? { origin } : {});
/** A fresh `terminal_url` (each project view carries a new single-use ticket). */
const terminalUrl = async (origin?: string): Promise<string> => {
  const body = (await as("alice", "GET", `/projects/${projectId}`, origin)).json();
  expect(body.terminal_url).toMatch(new RegExp(`^ws://127\\.0\\.0\\.1:\\d+/terminal/${projectId}\\?token=`));
  return body.terminal_url;
};
const open = async (origin?: string) => {
  const client = connectTerminal(await terminalUrl(origin), origin ? { origin } : {});
  clients.push(client);
  return client;
};
let marks = 0;
/** Waits until the client's session answers: a fresh marker echoed back (not an earlier screen's). */
const attached = async (client: TerminalClient) => {
  const mark = `ready-${++marks}`;
  client.type(`\x15echo ${mark.replace("-", "-$(true)")}\r`);
  await client.waitFor(mark, 30_000);
};
/** The HTTP status a WebSocket upgrade is refused with (101 when it is accepted). */
const upgradeStatus = (url: string, origin: string) =>
  new Promise<number>((resolve, reject) => {
    const ws = new WebSocket(url, { origin });
    ws.once(
      "unexpected-response",
      (_request, response) => (resolve(response.statusCode ?? 0), ws.terminate()),
    );
    ws.once("open", () => (resolve(101), ws.close()));
    ws.once("error", (error) =>
      error.message.includes("Unexpected server response") ? undefined : reject(error),
    );
  });
const auditCount = async () =>
  (await h.db.query<{ n: number }>("select count(*)::int as n from terminal_audit")).rows[0]!.n;

beforeAll(async () => {
  platform = await testPlatform({
    subnetPool: "10.238.0.0/22",
    sshPortRange: [27400, 27440],
    leaseSeconds: 10,
  });
  const real = dockerAttacher(dockerClient());
  // The real attacher, counted: a refused socket must never reach the sandbox.
  const attacher: SandboxAttacher = {
    attach: (id) => {
      execCalls += 1;
      return real.attach(id);
    },
  };
  h = await apiHarness({
    database: await testDatabase("postgres", { under: platform.config.host.dataDir }),
    config: platform.config,
    users: ["alice", "bob"],
    reconciler: true,
    terminal: {
      attacher,
      inputRate: { bytesPerSecond: 64 * 1024, burstBytes: 256 * 1024 },
      slowClientMs: 3_000,
      recheckMs: 500,
      allowedOrigins: [ORIGIN],
    },
  });
  for (const who of ["alice", "bob"] as const) users[who] = h.users[who].id;
  const created = await h.as("alice", "POST", "/projects", { name: "terminal" });
  expect(created.statusCode, created.body).toBe(202);
  projectId = created.json().project_id;
  expect(created.json().terminal_url).toBeNull(); // not running yet: no ticket
  await h.waitForStatus("alice", projectId, "running");
}, 900_000);

afterAll(async () => {
  for (const client of clients) client.ws.terminate();
  await h?.close();
  await platform?.stop();
}, 300_000);

describe("terminal sessions through a real sandbox", () => {
  it("echo round-trip through tmux session main", async () => {
    const client = await open();
    client.resize(100, 30);
    client.type("echo round-$((40+2))\r");
    await client.waitFor("round-42");
    const { stdout } = await exec("docker", [
      "exec",
      "-u",
      "agent",
      `sbx-${projectId}`,
      "tmux",
      "list-sessions",
      "-F",
      "#{session_name}",
    ]);
    expect(stdout.trim().split("\n")).toEqual(["main"]);
  });

  it("a resize reaches the pty (stty size); an absurd one is ignored", async () => {
    const client = clients[0]!;
    // The pty changes at once; tmux resizes its pane a moment later: ask until the shell sees it.
    const sttySize = async (expected: string) => {
      await waitFor(`stty size ${expected}`, 20_000, async () => {
        const mark = client.output().length;
        // tmux may draw a space as a cursor movement: print the size without one.
        client.type("echo size-$(stty size | tr ' ' x)\r");
        return await client.waitFor(expected, 1_000, mark).then(
          () => true,
          () => undefined,
        );
      });
    };
    client.resize(123, 45);
    await sttySize("size-45x123");
    client.resize(100_000, -3);
    client.type('{"type":"resize","cols":"wide"}'); // not a valid resize: ignored, not typed
    await sttySize("size-45x123");
  });

  it("two clients share the session; a reconnect finds the earlier output", async () => {
    const first = clients[0]!;
    const second = await open();
    await second.waitFor("size-45x123"); // tmux redraws the screen for a newly attached client
    const mark = second.output().length;
    first.type("echo shared-$((1+1))\r");
    await second.waitFor("shared-2", 20_000, mark);
    first.close();
    second.close();
    expect(await first.closed).toMatchObject({ code: 1005 });
    await waitFor("sessions to end", 10_000, async () => (h.proxy!.liveSessions === 0 ? true : undefined));
    const later = await open();
    await later.waitFor("shared-2");
    later.close();
  });

  it("every refused ticket closes with 4401 and never touches the sandbox", async () => {
    await waitFor("sessions to end", 10_000, async () => (h.proxy!.liveSessions === 0 ? true : undefined));
    const execsBefore = execCalls;
    const auditBefore = await auditCount();
    const base = (await terminalUrl()).split("?")[0]!;
    const stale = new TicketIssuer(secret, 60, () => Date.now() - 120_000);
    const valid = new URL(await terminalUrl()).searchParams.get("token")!;
    const used = await terminalUrl();
    const firstUse = connectTerminal(used);
    clients.push(firstUse);
    await firstUse.waitFor("shared-2");
    firstUse.close();
    const execsAfterFirstUse = execCalls;
    const otherProject = crypto.randomUUID();
    const cases: [string, string, { origin?: string }][] = [
      ["no ticket", base, {}],
      ["garbage", `${base}?token=%00%ff-not-a-ticket`, {}],
      ["tampered", `${base}?token=${valid.slice(0, -2)}xx`, {}],
      ["expired", `${base}?token=${stale.issue(users.alice, projectId)}`, {}],
      ["replayed", used, {}],
      ["for another project", `${base.replace(projectId, otherProject)}?token=${valid}`, {}],
      [
        "a project the user does not own",
        `${base}?token=${new TicketIssuer(secret).issue(users.bob, projectId)}`,
        {},
      ],
      ["origin-bound, sent without one", await terminalUrl(ORIGIN), {}],
      [
        "signed with another key",
        `${base}?token=${new TicketIssuer(new Uint8Array(32)).issue(users.alice, projectId)}`,
        {},
      ],
    ];
    for (const [name, url, options] of cases) {
      const client = connectTerminal(url, options);
      clients.push(client);
      client.type("echo should-never-arrive\r"); // sent at once: must not reach the sandbox either
      const closed = await client.closed;
      expect(closed.code, name).toBe(CLOSE.unauthorized);
      expect(closed.reason, name).not.toBe("");
    }
    expect(execCalls).toBe(execsAfterFirstUse);
    expect(execsAfterFirstUse).toBe(execsBefore + 1);
    const audit = await h.db.query<{ data: Buffer }>("select data from terminal_audit");
    // Nothing at all was audited: the refused sockets' input never reached a session.
    expect(audit.rows.length).toBe(auditBefore);
    expect(audit.rows.map((r) => Buffer.from(r.data).toString())).not.toContain("echo should-never-arrive\r");
    // A page of another origin is refused at the upgrade, whatever its ticket says (issue 22.7: tickets
    // minted without an Origin, as the console's are, used to pass from anywhere).
    for (const ticketOrigin of [undefined, ORIGIN]) {
      const refusedAt = await upgradeStatus(await terminalUrl(ticketOrigin), "http://evil.example.test");
      expect(refusedAt, `ticket bound to ${ticketOrigin}`).toBe(403);
    }
    expect(execCalls).toBe(execsAfterFirstUse);
    // The right origin works.
    const bound = connectTerminal(await terminalUrl(ORIGIN), { origin: ORIGIN });
    clients.push(bound);
    await bound.waitFor("shared-2");
    bound.close();
  });

  it("every input frame is audited with user and time; sessions are recorded as asciinema v2 casts", async () => {
    const audit = (await as("alice", "GET", `/projects/${projectId}/audit?limit=1000`)).json();
    const typed = audit.entries.filter((e: { kind: string }) => e.kind === "input");
    // Frames that follow one another within a flush share a row (recording.ts), so a command the test typed
    // again (the size, asked until tmux has resized) may sit in one row with its repeat: each command is in
    // one row whole, and the rows hold nothing that was not typed.
    const typedRows: string[] = typed.map((e: { text: string }) => e.text);
    const commands = [
      "echo round-$((40+2))\r",
      "echo size-$(stty size | tr ' ' x)\r",
      "echo shared-$((1+1))\r",
    ];
    for (const command of commands)
      expect(
        typedRows.some((row) => row.includes(command)),
        command,
      ).toBe(true);
    expect(
      typedRows
        .filter((row) => row.startsWith("echo size-"))
        .join("")
        .split(commands[1]!)
        .join(""),
    ).toBe("");
    expect(typed[0]).toMatchObject({
      user_id: users.alice,
      at: expect.any(String),
      session_id: expect.any(String),
    });
    expect(
      audit.entries.some((e: { kind: string; text: string }) => e.kind === "resize" && e.text === "123x45"),
    ).toBe(true);
    expect((await as("bob", "GET", `/projects/${projectId}/audit`)).statusCode).toBe(404);
    expect((await as("bob", "GET", `/projects/${projectId}/sessions`)).statusCode).toBe(404);
    for (const url of [`/projects/${projectId}/audit`, `/projects/${projectId}/sessions`])
      expect((await h.app.inject({ method: "GET", url })).statusCode, url).toBe(401);
    const badQuery = await as("alice", "GET", `/projects/${projectId}/audit?limit=0&color=red`);
    expect(badQuery.statusCode).toBe(400);
    expect(
      badQuery
        .json()
        .details.map((d: { field: string }) => d.field)
        .sort(),
    ).toEqual(["color", "limit"]);
    const badSession = await as("alice", "GET", `/projects/${projectId}/sessions/not-a-session`);
    expect(badSession.statusCode).toBe(400);
    expect(badSession.json().details).toEqual([expect.objectContaining({ field: "sessionId" })]);
    await expect(h.db.query("update terminal_audit set data = 'x'")).rejects.toThrow(/append-only/);
    await expect(h.db.query("delete from terminal_audit")).rejects.toThrow(/append-only/);

    const sessions = (await as("alice", "GET", `/projects/${projectId}/sessions`)).json().sessions;
    const firstSession = sessions.at(-1);
    expect(firstSession).toMatchObject({ user_id: users.alice, end_code: expect.any(Number) });
    const cast = await as("alice", "GET", `/projects/${projectId}/sessions/${firstSession.session_id}`);
    expect(cast.statusCode).toBe(200);
    expect(cast.headers["content-type"]).toContain("application/x-asciicast");
    const [header, ...events] = cast.body
      .trim()
      .split("\n")
      .map((line) => JSON.parse(line));
    expect(header).toMatchObject({ version: 2, width: expect.any(Number), height: expect.any(Number) });
    expect(
      events.every((e: unknown[]) => typeof e[0] === "number" && ["o", "i", "r"].includes(e[1] as string)),
    ).toBe(true);
    expect(
      events
        .filter((e: unknown[]) => e[1] === "o")
        .map((e: unknown[]) => e[2])
        .join(""),
    ).toContain("round-42");
    expect(events).toContainEqual([expect.any(Number), "i", "echo round-$((40+2))\r"]);
    expect(events).toContainEqual([expect.any(Number), "r", "123x45"]);
    const { rows } = await h.db.query<{ last_connection_at: Date | null }>(
      "select last_connection_at from projects where id = $1",
      [projectId],
    );
    expect(Date.now() - rows[0]!.last_connection_at!.getTime()).toBeLessThan(120_000);
    const missing = await as("alice", "GET", `/projects/${projectId}/sessions/${crypto.randomUUID()}`);
    expect(missing.statusCode).toBe(404);
  });

  it("an oversize frame closes with 1009 and a flood with 4429; the proxy keeps serving others", async () => {
    const bystander = await open();
    await attached(bystander);
    const big = await open();
    await attached(big);
    big.ws.send(Buffer.alloc(65 * 1024, 0x61));
    expect((await big.closed).code).toBe(CLOSE.tooBig);
    const flood = await open();
    await attached(flood);
    for (let i = 0; i < 40; i++) flood.ws.send(Buffer.alloc(16 * 1024, 0x20)); // 640 KiB at once (spaces)
    expect(await flood.closed).toMatchObject({
      code: CLOSE.rateLimited,
      reason: "input rate limit exceeded",
    });
    bystander.type("\x15echo still-here\r"); // Ctrl-U drops whatever the flood left on the line
    await bystander.waitFor("still-here");
    bystander.close();
  });

  it("a client that never reads is cut off (4408) with bounded buffering; the others are unaffected", async () => {
    const before = process.memoryUsage().rss;
    const first = await open();
    await attached(first);
    first.close();
    // A real client with a 4 KiB receive buffer that types one command and then never reads. The command
    // prints until it is interrupted: a bounded one could end before the proxy holds a megabyte for the
    // client (tmux drops what its own client is behind on and redraws once), and the cut-off never come.
    const stalled = execFile("python3", [
      path.join(import.meta.dirname, "../helpers/stalled-terminal-client.py"),
      await terminalUrl(),
      "60",
      // The biggest terminal the proxy allows: every screen tmux redraws for it is ~0.5 MB.
      JSON.stringify({ type: "resize", cols: 1000, rows: 500 }),
      "\x15for ((i = 1; ; i++)); do printf '%0999d\\n' $i; done\r",
    ]);
    const ended = await waitFor("the stuck session to be cut off", 60_000, async () => {
      const { rows } = await h.db.query<{ end_code: number | null; output_bytes: string }>(
        "select end_code, output_bytes from terminal_sessions order by started_at desc limit 1",
      );
      if (rows[0]?.end_code === CLOSE.slowClient) return rows[0];
      // What the newest session did instead, for the failure's message.
      throw new Error(`the newest session: ${JSON.stringify(rows[0])}`);
    }).finally(() => stalled.kill());
    expect(ended.end_code).toBe(CLOSE.slowClient);
    expect(process.memoryUsage().rss - before).toBeLessThan(200 * 1024 * 1024);
    const after = await open();
    after.type("\x03");
    await new Promise((resolve) => setTimeout(resolve, 500));
    after.type("\x15clear; echo after-$((2*3))\r");
    await after.waitFor("after-6", 60_000);
    after.close();
  });

  it("revoked access ends a live session (4401); a stopped sandbox refuses new ones (4409)", async () => {
    const live = await open();
    await attached(live);
    await h.db.query("update users set deleted_at = now() where id = $1", [users.alice]);
    expect(await live.closed).toMatchObject({ code: CLOSE.unauthorized, reason: "access revoked" });
    await h.db.query("update users set deleted_at = null where id = $1", [users.alice]);
    const url = await terminalUrl();
    await h.db.query("update tenants set state = 'stopped' where project_id = $1", [projectId]);
    const refused = connectTerminal(url);
    clients.push(refused);
    expect(await refused.closed).toMatchObject({ code: CLOSE.notRunning });
    await h.db.query("update tenants set state = 'running' where project_id = $1", [projectId]);
  });

  it("a client gone while its session is being recorded leaves no timer, query or open file behind", async () => {
    // A proxy of its own whose database holds the session's insert until the client has gone.
    let reached!: () => void;
    const insertReached = new Promise<void>((resolve) => (reached = resolve));
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    let standingChecks = 0;
    const gated = new Proxy(h.db, {
      get(target, property, receiver) {
        if (property !== "query") return Reflect.get(target, property, receiver);
        return async (sql: string, params?: unknown[]) => {
          if (sql.startsWith("insert into terminal_sessions")) {
            reached();
            await released;
          }
          if (sql.includes("select exists (select 1 from users")) standingChecks += 1;
          return target.query(sql, params);
        };
      },
    });
    const castsDir = path.join(platform.config.host.dataDir, "casts-gated");
    const gatedProxy = new TerminalProxy({
      db: gated,
      tickets: new TicketIssuer(secret),
      attacher: dockerAttacher(dockerClient()),
      recordingsDir: castsDir,
      recheckMs: 100,
    });
    const port = await gatedProxy.listen(await freePort(), "127.0.0.1");
    try {
      const url = (await terminalUrl()).replace(/:\d+\/terminal\//, `:${port}/terminal/`);
      const client = connectTerminal(url);
      await insertReached;
      client.ws.terminate();
      await client.closed;
      await new Promise((resolve) => setTimeout(resolve, 200)); // the proxy sees the close first
      release();
      await waitFor("the session to end", 10_000, async () =>
        gatedProxy.liveSessions === 0 ? true : undefined,
      );
      const checksAtEnd = standingChecks;
      await new Promise((resolve) => setTimeout(resolve, 1_000)); // ten recheck intervals
      expect(standingChecks).toBe(checksAtEnd);
      const openCasts = (await fs.readdir("/proc/self/fd")).filter((fd) => {
        try {
          return readlinkSync(`/proc/self/fd/${fd}`).startsWith(castsDir);
        } catch {
          return false;
        }
      });
      expect(openCasts).toEqual([]);
      const { rows } = await h.db.query<{ ended_at: Date | null; end_reason: string | null }>(
        "select ended_at, end_reason from terminal_sessions where cast_path like $1",
        [`${castsDir}/%`],
      );
      expect(rows).toEqual([{ ended_at: expect.any(Date), end_reason: "client closed" }]);
    } finally {
      release();
      await gatedProxy.close();
    }
  });

  it("`yes` with a fast reader ends at the session's byte cap with its reason; the audit says so; disk barely touched", async () => {
    const CAP = 2 * 1024 * 1024;
    const castsDir = path.join(platform.config.host.dataDir, "casts-capped");
    const capped = new TerminalProxy({
      db: h.db,
      tickets: new TicketIssuer(secret),
      attacher: dockerAttacher(dockerClient()),
      recordingsDir: castsDir,
      maxSessionBytes: CAP,
      maxSessionsPerUser: 2,
    });
    const port = await capped.listen(await freePort(), "127.0.0.1");
    const onCapped = async () => {
      const client = connectTerminal((await terminalUrl()).replace(/:\d+\/terminal\//, `:${port}/terminal/`));
      clients.push(client);
      return client;
    };
    try {
      // What a session can write on the host: the platform's data (recordings, the database's files), the
      // container's log and its writable layer. Not the filesystem's free space: files beside this one
      // (a warm pool making sandboxes) take hundreds of MB of it meanwhile.
      const written = async () => {
        const du = (await exec("du", ["-sb", platform.config.host.dataDir])).stdout;
        const [info] = JSON.parse((await exec("docker", ["inspect", "--size", `sbx-${projectId}`])).stdout);
        const log = info.LogPath ? (await fs.stat(info.LogPath).catch(() => ({ size: 0 }))).size : 0;
        return Number(du.split("\t")[0]) + Number(info.SizeRw ?? 0) + log;
      };
      const writtenBefore = await written();
      const client = await onCapped();
      await attached(client);
      client.type("\x15yes\r");
      try {
        expect(await client.closed).toEqual({
          code: CLOSE.capReached,
          reason: "the session reached its recording cap of 2 MiB",
        });
      } finally {
        // `yes` still runs in the shared tmux session: interrupt it before anything else attaches.
        await exec("docker", [
          "exec",
          "-u",
          "agent",
          `sbx-${projectId}`,
          "tmux",
          "send-keys",
          "-t",
          "main",
          "C-c",
        ]);
      }
      await waitFor("the session's end recorded", 10_000, async () =>
        capped.liveSessions === 0 ? true : undefined,
      );
      // One output chunk of slack at most, and about that much written on the host.
      const [cast] = await fs.readdir(path.join(castsDir, projectId));
      const size = (await fs.stat(path.join(castsDir, projectId, cast!))).size;
      expect(size).toBeLessThanOrEqual(CAP);
      expect(size).toBeGreaterThan(CAP / 2);
      expect((await written()) - writtenBefore).toBeLessThan(64 * 1024 * 1024);
      const audit = (await as("alice", "GET", `/projects/${projectId}/audit?limit=1000`)).json();
      expect(audit.entries.at(-1)).toMatchObject({
        kind: "truncated",
        text: "the session reached its recording cap of 2 MiB",
      });

      // Sessions per user and project: the third live one is refused; when one ends, a new one is let in.
      const first = await onCapped();
      const second = await onCapped();
      await attached(first);
      await attached(second);
      const third = await onCapped();
      expect(await third.closed).toEqual({
        code: CLOSE.rateLimited,
        reason: "at most 2 terminal sessions per user and project",
      });
      first.close();
      await first.closed;
      await waitFor("the first session to end", 10_000, async () =>
        capped.liveSessions === 1 ? true : undefined,
      );
      const fourth = await onCapped();
      await attached(fourth);
      second.close();
      fourth.close();
    } finally {
      await capped.close();
    }
  });

  it("input frames sent one byte at a time share audit rows, and every byte is kept", async () => {
    const client = await open();
    await attached(client);
    const before = (await as("alice", "GET", `/projects/${projectId}/audit?limit=1000`)).json().entries
      .length;
    const line = `echo ${"x".repeat(300)}-one-by-one\r`;
    for (const byte of line) client.ws.send(byte);
    await client.waitFor("-one-by-one");
    client.close();
    await waitFor("the session to end", 10_000, async () => (h.proxy!.liveSessions === 0 ? true : undefined));
    const entries = (await as("alice", "GET", `/projects/${projectId}/audit?limit=1000`)).json().entries;
    const rows = entries.slice(before).filter((e: { kind: string }) => e.kind === "input");
    expect(rows.map((e: { text: string }) => e.text).join("")).toContain(line);
    expect(rows.length).toBeLessThan(line.length / 10);
    // Paging through the whole audit (more than ten rows by now) yields every row once, in order.
    const paged: number[] = [];
    for (let after = 0; ;) {
      const page = (await as("alice", "GET", `/projects/${projectId}/audit?limit=4&after=${after}`)).json();
      if (page.entries.length === 0) break;
      paged.push(...page.entries.map((e: { id: number }) => e.id));
      after = page.next_after;
    }
    expect(paged.length).toBeGreaterThan(10);
    expect(paged).toEqual(entries.map((e: { id: number }) => e.id));
    expect(paged).toEqual([...paged].sort((a, b) => a - b));
  });

  it("a sandbox that dies mid-session: the client is told why (4410); the proxy stays up", async () => {
    const live = await open();
    await attached(live);
    await exec("docker", ["stop", "-t", "1", `sbx-${projectId}`]);
    expect(await live.closed).toMatchObject({ code: CLOSE.gone, reason: "the sandbox stopped" });
    // The reconciler repairs the sandbox on the next operation; then terminals work again.
    expect((await as("alice", "POST", `/projects/${projectId}/start`)).statusCode).toBe(202);
    await waitFor("the sandbox to run again", 120_000, async () => {
      const { rows } = await h.db.query<{ state: string }>(
        "select state from operations where project_id = $1 order by seq desc limit 1",
        [projectId],
      );
      return rows[0]?.state === "succeeded" ? true : undefined;
    });
    const again = await open();
    again.type("echo back-$((3*3))\r");
    await again.waitFor("back-9");
    again.close();
  });

  it("delete: the project, its sandbox and its recordings go", async () => {
    const recordings = path.join(h.recordingsDir!, projectId);
    expect((await fs.readdir(recordings)).length).toBeGreaterThan(0);
    expect((await as("alice", "DELETE", `/projects/${projectId}`)).statusCode).toBe(202);
    await waitFor("the project to be deleted", 300_000, async () =>
      (await as("alice", "GET", `/projects/${projectId}`)).statusCode === 404 ? true : undefined,
    );
    await expect(exec("docker", ["inspect", `sbx-${projectId}`])).rejects.toThrow();
    expect(existsSync(recordings)).toBe(false);
  });
});
