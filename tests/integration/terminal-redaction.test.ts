// Audit redaction (issue 15) through a real sandbox: a project secret's value typed into the browser
// terminal, one character per frame or pasted in one frame, reaches the sandbox and the client as typed, and
// leaves only a marker in the audit rows and the session's asciicast recording.
import { randomBytes } from "node:crypto";
import { promises as fs } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { dockerClient } from "../../lib/docker-client.js";
import { waitFor } from "../../lib/process.js";
import { SecretBox } from "../../runtime/secrets.js";
import { dockerAttacher } from "../../runtime/terminal/attach.js";
import { CLOSE, TerminalProxy } from "../../runtime/terminal/proxy.js";
import { REDACTION_MARKER as MARK } from "../../runtime/terminal/redact.js";
import { TicketIssuer } from "../../runtime/terminal/tickets.js";
import { projectSecretValues, putSecret } from "../../runtime/tenants/project-secrets.js";
import { apiHarness, TEST_SECRET, type ApiHarness } from "../helpers/api.js";
import { freePort, testPlatform, type TestPlatform } from "../helpers/host.js";
import { testDatabase } from "../helpers/postgres.js";
import { connectTerminal, type TerminalClient } from "../helpers/terminal-client.js";

let platform: TestPlatform;
let h: ApiHarness<"alice">;
let box: SecretBox;
let projectId: string;
const clients: TerminalClient[] = [];
/** Every read of the project's secret values by the proxy's sessions, in order. */
const secretReads: (readonly string[])[] = [];
/** Random, so no 8-byte piece of it can turn up in a recording by chance (a UUID, a timestamp). */
const secretValue = () => `s3cr3t-${randomBytes(18).toString("base64url")}`;
const TOKEN = secretValue();

const terminalUrl = async (): Promise<string> => {
  const body = (await h.as("alice", "GET", `/projects/${projectId}`)).json();
  expect(body.terminal_url).toEqual(expect.any(String));
  return body.terminal_url;
};
const open = async (url?: string) => {
  const client = connectTerminal(url ?? (await terminalUrl()));
  clients.push(client);
  return client;
};
let marks = 0;
/**
 * Waits until the client's session answers: a fresh marker echoed back (not an earlier screen's). No Ctrl-U
 * first (terminal.test.ts's sends one): on an empty line readline rings the bell, and tmux sends a bell on
 * its own schedule, which can land inside the echo of a value and so keep it from being found.
 */
/**
 * Resolves once the shell reads again after `after` was output: readline's next prompt turning bracketed paste
 * back on. Keys typed before that are echoed by the tty itself and then redrawn by readline after its
 * prompt (CI saw `echo typed-<prompt>echo typed-…`), which is not the line the test means to check.
 */
const reading = (client: TerminalClient, after: string, timeoutMs?: number) =>
  client.waitFor(
    new RegExp(String.raw`${after.replace(/[$()*+.?[\\\]^{|}]/g, "\\$&")}\r?\n[\s\S]*\x1b\[\?2004h`),
    timeoutMs,
  );
const attached = async (client: TerminalClient) => {
  const mark = `ready-${++marks}`;
  client.type(`echo ${mark.replace("-", "-$(true)")}\r`);
  await reading(client, mark, 30_000);
};
/**
 * Types `text` one character per WebSocket frame, as a browser terminal sends keystrokes (after what
 * `client.type` queued: it sends once the socket's open promise settles).
 */
const typeByKey = async (client: TerminalClient, text: string) => {
  for (const character of text) {
    await new Promise((resolve) => setTimeout(resolve, 5));
    client.ws.send(character);
  }
};
const sessionsEnded = () =>
  waitFor("the sessions to end", 10_000, async () => (h.proxy!.liveSessions === 0 ? true : undefined));

/** What was kept of a session: its audit rows' input joined, and its recording's input and output. */
async function keptOf(sessionId: string) {
  const audit = await h.db.query<{ data: Buffer }>(
    "select data from terminal_audit where session_id = $1 and kind = 'input' order by id",
    [sessionId],
  );
  const { rows } = await h.db.query<{ cast_path: string }>(
    "select cast_path from terminal_sessions where id = $1",
    [sessionId],
  );
  const file = await fs.readFile(rows[0]!.cast_path, "utf8");
  const events = file
    .trim()
    .split("\n")
    .slice(1)
    .map((line) => JSON.parse(line) as [number, string, string]);
  return {
    audit: Buffer.concat(audit.rows.map((row) => Buffer.from(row.data))).toString("utf8"),
    file,
    times: events.map((event) => event[0]),
    input: events
      .filter((event) => event[1] === "i")
      .map((event) => event[2])
      .join(""),
    output: events
      .filter((event) => event[1] === "o")
      .map((event) => event[2])
      .join(""),
  };
}
/** The value is nowhere in `text`: not whole, and no 8 bytes of it in a row. */
const expectNoPieceOf = (value: string, text: string, where: string) => {
  for (let at = 0; at + 8 <= value.length; at++)
    expect(text.includes(value.slice(at, at + 8)), `${where} holds ${value.slice(at, at + 8)}`).toBe(false);
};
const latestSession = async (): Promise<string> => {
  const { rows } = await h.db.query<{ id: string }>(
    "select id from terminal_sessions where project_id = $1 order by started_at desc limit 1",
    [projectId],
  );
  return rows[0]!.id;
};

beforeAll(async () => {
  platform = await testPlatform({
    subnetPool: "10.227.0.0/24",
    sshPortRange: [27900, 27905],
    leaseSeconds: 10,
  });
  h = await apiHarness({
    database: await testDatabase("postgres", { under: platform.config.host.dataDir }),
    config: platform.config,
    users: ["alice"],
    reconciler: true,
    terminal: {
      secretsRefreshMs: 500,
      // As the harness reads them, each read kept: a test waits on the read itself, not on a clock.
      secretValues: async (id) => {
        const values = await projectSecretValues(
          h.db,
          SecretBox.fromDataDir(platform.config.host.dataDir),
          id,
        );
        secretReads.push(values);
        return values;
      },
    },
  });
  const created = await h.as("alice", "POST", "/projects", { name: "redaction" });
  expect(created.statusCode, created.body).toBe(202);
  projectId = created.json().project_id;
  await h.waitForStatus("alice", projectId, "running");
  box = SecretBox.fromDataDir(platform.config.host.dataDir);
  await putSecret(h.db, box, projectId, "DEPLOY_TOKEN", TOKEN, "file");
}, 900_000);

afterAll(async () => {
  for (const client of clients) client.ws.terminate();
  await h?.close();
  await platform?.stop();
}, 300_000);

describe("a secret's value typed into the terminal is redacted from the audit and the recording", () => {
  it("typed one character per frame and pasted in one frame: the sandbox and the client get it, the kept copies only the marker", async () => {
    const client = await open();
    try {
      client.resize(200, 50);
      await attached(client);
      client.type("echo typed-");
      await typeByKey(client, TOKEN);
      client.type("-end-$((2*3))\r");
      // The live stream is not touched: the shell ran what was typed (its output is the line with `-end-6`;
      // the echo of the command line says `$((2*3))`), and the client sees it.
      await reading(client, `typed-${TOKEN}-end-6`);
      client.type(`echo pasted-${TOKEN}-end-$((3*3)); echo plain-$((6*7))\r`);
      await client.waitFor(`pasted-${TOKEN}-end-9`);
      await client.waitFor("plain-42");
    } finally {
      client.close();
    }
    const sessionId = await latestSession();
    await sessionsEnded();

    const kept = await keptOf(sessionId);
    // Input around the value is kept as typed; the value is a marker, in the audit and in the recording.
    for (const [where, text] of [
      ["audit", kept.audit],
      ["recorded input", kept.input],
    ] as const) {
      expect(text, where).toContain(`echo typed-${MARK}-end-$((2*3))\r`);
      expect(text, where).toContain(`echo pasted-${MARK}-end-$((3*3)); echo plain-$((6*7))\r`);
      expectNoPieceOf(TOKEN, text, where);
    }
    // The output: the echo of the command line and the command's own output.
    expect(kept.output).toContain(`echo typed-${MARK}-end-$((2*3))`);
    expect(kept.output).toContain(`typed-${MARK}-end-6`);
    expect(kept.output).toContain(`pasted-${MARK}-end-9`);
    expect(kept.output).toContain("plain-42");
    expectNoPieceOf(TOKEN, kept.output, "recorded output");
    expectNoPieceOf(TOKEN, kept.file, "the recording's file");
    // Held and released later, never stamped out of order.
    expect(kept.times).toEqual([...kept.times].sort((a, b) => a - b));
  });

  it("a value set while a session is open is redacted once the session has re-read the values", async () => {
    const client = await open();
    const later = secretValue();
    try {
      await attached(client);
      const readsBefore = secretReads.length;
      await putSecret(h.db, box, projectId, "SET_DURING_SESSION", later, "file");
      // The session re-reads the values every 500 ms, one read at a time: once a read after the one that
      // returned the new value has started, the new value is in use.
      await waitFor("the session to re-read its project's secrets", 60_000, async () => {
        const at = secretReads.findIndex((values, i) => i >= readsBefore && values.includes(later));
        return at !== -1 && secretReads.length > at + 1 ? true : undefined;
      });
      // The value goes to cat, not to the shell: the shell has run the line (and given the terminal back to
      // the kernel's line discipline) once its echo is on the screen. A pause of 300 ms here was not always
      // enough on a busy host, and the shell then took the value as a command and the Ctrl-D as its exit.
      client.type("echo cat-$((2+2))-reads; cat > /dev/null\r");
      await client.waitFor("cat-4-reads", 30_000);
      await typeByKey(client, `${later}\r`);
      client.type("\x04");
      client.type("echo done-$((1+1))\r");
      await client.waitFor("done-2");
    } finally {
      client.close();
    }
    const sessionId = await latestSession();
    await sessionsEnded();
    const kept = await keptOf(sessionId);
    expect(kept.audit).toContain(`${MARK}\r\x04echo done-$((1+1))\r`);
    expect(kept.output).toContain(MARK);
    for (const [where, text] of Object.entries(kept))
      if (typeof text === "string") expectNoPieceOf(later, text, where);
  });

  it("a session whose project's secrets cannot be read is not started (1011), and nothing of it is audited", async () => {
    let attaches = 0;
    const real = dockerAttacher(dockerClient());
    const unreadable = new TerminalProxy({
      db: h.db,
      tickets: new TicketIssuer(TEST_SECRET),
      attacher: {
        attach: (id) => {
          attaches += 1;
          return real.attach(id);
        },
      },
      recordingsDir: h.recordingsDir!,
      secretValues: () => Promise.reject(new Error("unsupported state or unable to authenticate data")),
    });
    const port = await unreadable.listen(await freePort(), "127.0.0.1");
    try {
      const before = (await h.db.query("select id from terminal_sessions")).rows.length;
      const client = await open((await terminalUrl()).replace(/:\d+\/terminal\//, `:${port}/terminal/`));
      client.type("echo never-audited\r");
      expect(await client.closed).toEqual({
        code: CLOSE.internal,
        reason: "the project's secrets could not be read for the audit",
      });
      expect(attaches).toBe(0);
      expect((await h.db.query("select id from terminal_sessions")).rows.length).toBe(before);
    } finally {
      await unreadable.close();
    }
  });
});
