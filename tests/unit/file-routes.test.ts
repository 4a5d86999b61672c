// The files API's streams (runtime/api/file-routes.ts) against a fake sandbox that delivers a run as the
// engine does: stdout and stderr on one connection, which back-pressure pauses as a whole, and a stdin that
// takes bytes a little at a time and is gone once the command is. What they show: a read answers the whole
// file, to a client that reads late, whether its bytes come before its status line or after (bytes ahead of
// the status once hung the answer for good); an upload answers success only once the command had the whole
// body and its end; a run that ends before the whole body (a refusal, a tar at its end-of-archive, a command
// that dies) is answered at once with what it said, a death never as a success, and the rest of the body is
// read and dropped (the body was left unread, so a client that sends it all before it reads the answer was
// stuck sending, and a tar's early end hung the answer too); a body over the limit is 413; a client that
// leaves stops its run, before a read's status too. All in process; the leaving clients over loopback.
import { createHash, randomBytes } from "node:crypto";
import { request as httpRequest } from "node:http";
import type { AddressInfo } from "node:net";
import { constants } from "node:os";
import { Readable, Writable } from "node:stream";
import { finished } from "node:stream/promises";
import type { FastifyInstance } from "fastify";
import { afterEach, describe, expect, it } from "vitest";
import { waitFor } from "../../lib/process.js";
import { Auth, DEFAULT_AUTH } from "../../runtime/api/auth.js";
import { Routes } from "../../runtime/api/route.js";
import { registerFileRoutes } from "../../runtime/api/files/routes.js";
import { STATUS_LINE_BYTES, StatusLine } from "../../runtime/api/files/streams.js";
import type { Database } from "../../runtime/store/db.js";
import { HttpError } from "../../runtime/errors.js";
import type {
  OutputStream,
  SandboxCommand,
  SandboxProcess,
  SignalName,
} from "../../runtime/sandbox/process.js";
import type { SandboxRunner } from "../../runtime/sandbox/runner.js";
import { buildServer } from "../../runtime/server.js";
import { RuntimeConfig } from "../../stacks/config.js";

const USER = "7d1f4c2a-5b3e-4f60-9a8b-0c1d2e3f4a5b";
const PROJECT = "3f2504e0-4f89-41d3-9a0c-0305e82c3301";
const AUTHORIZATION = "Bearer file-routes-test";
const KiB = 1024;
const MiB = 1024 * KiB;
/** How long an answer may take: far below the 300 s request timeout, far above the ~0.1 s it takes. */
const PROMPT_MS = 5_000;
/** Each test's own limit, so that a hang fails it rather than the whole run. */
const TEST_MS = 10_000;

/** The one project, the only query the routes make (ownProject's); any other query fails the test. */
const db: Database = {
  kind: "pglite",
  location: "a fake (tests/unit/file-routes.test.ts)",
  query<Row>(sql: string, params?: unknown[]): Promise<{ rows: Row[] }> {
    if (sql.includes("from projects p") && params?.[0] === PROJECT && params[1] === USER) {
      const row = { id: PROJECT, name: "files", state: "ready", running: true, backend: "container" };
      return Promise.resolve({ rows: [row as Row] });
    }
    return Promise.reject(new Error(`unexpected query: ${sql.trim().slice(0, 80)}`));
  },
  transaction: () => Promise.reject(new Error("the files routes open no transaction")),
  close: () => Promise.resolve(),
};

/** Accepts one bearer token, as USER, without the accounts table. */
class OneUserAuth extends Auth {
  override authenticate(authorization: string | undefined): Promise<string> {
    if (authorization !== AUTHORIZATION)
      return Promise.reject(new HttpError(401, "unauthorized", "not the test's token"));
    return Promise.resolve(USER);
  }
}

/** What the fake command does; each hook may queue output or end it. */
interface Script {
  /** Once it started (a read's output is queued here). */
  started?(command: FakeCommand): void;
  /** After each chunk of stdin it took ({@link FakeCommand.taken} says how much in all). */
  took?(command: FakeCommand): void;
  /** Its stdin closed: the whole body is in. */
  inputEnded?(command: FakeCommand): void;
}

type Delivery = { readonly stream: OutputStream; readonly chunk: Buffer } | { readonly exit: number };

/**
 * One run as the engine delivers it: its output and then its end go out one chunk per tick on the one
 * connection, which pause() stops (a status line queued behind paused stdout waits too); its stdin is a
 * socket that takes 16 KiB at a time, one write per tick, and is gone once the command has ended.
 */
class FakeCommand implements SandboxProcess {
  readonly input: Writable | undefined;
  readonly exited: Promise<number>;
  readonly stdin: Buffer[] = [];
  taken = 0;
  /** Bytes of stdout the route was given (read from the engine). */
  delivered = 0;
  inputClosed = false;
  ended = false;
  readonly signals: SignalName[] = [];
  /** What happened, in order (stdin's end, the route's answer). */
  readonly events: string[];
  private readonly queue: Delivery[] = [];
  private paused = false;
  private detached = false;
  private scheduled = false;
  private settle!: (code: number) => void;

  constructor(
    readonly id: string,
    readonly command: SandboxCommand,
    private readonly onOutput: (stream: OutputStream, chunk: Buffer) => void,
    script: Script,
    events: string[],
  ) {
    this.events = events;
    this.exited = new Promise((resolve) => (this.settle = resolve));
    this.input =
      command.stdin === "stream"
        ? new Writable({
            highWaterMark: 16 * KiB,
            write: (chunk: Buffer, _encoding, done) => {
              this.stdin.push(chunk);
              this.taken += chunk.length;
              script.took?.(this);
              if (!this.ended) setImmediate(done);
            },
            final: (done) => {
              this.inputClosed = true;
              this.events.push("stdin closed");
              done();
              script.inputEnded?.(this);
            },
          })
        : undefined;
  }

  stdout(chunk: Buffer): void {
    this.deliver({ stream: "stdout", chunk });
  }

  status(line: string): void {
    this.deliver({ stream: "stderr", chunk: Buffer.from(`${line}\n`) });
  }

  deliverStderr(chunk: Buffer): void {
    this.deliver({ stream: "stderr", chunk });
  }

  /** The command exits: its stdin is gone at once, its end is delivered after the output before it. */
  end(code: number): void {
    if (this.ended) return;
    this.ended = true;
    this.input?.destroy();
    this.deliver({ exit: code });
  }

  /** Nothing more will come until someone reads: paused by back-pressure, or everything delivered. */
  get stalled(): boolean {
    return this.paused || this.queue.length === 0;
  }

  pause(): void {
    this.paused = true;
  }

  resume(): void {
    this.paused = false;
    this.schedule();
  }

  /** As the engine's stream destroyed: nothing more comes, and it settles (inspect has no exit code yet). */
  detach(): void {
    this.detached = true;
    this.queue.length = 0;
    this.settle(-1);
  }

  private deliver(delivery: Delivery): void {
    this.queue.push(delivery);
    this.schedule();
  }

  private schedule(): void {
    if (this.scheduled || this.paused || this.detached || this.queue.length === 0) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      if (this.paused || this.detached) return;
      const next = this.queue.shift()!;
      if ("exit" in next) return this.settle(next.exit);
      if (next.stream === "stdout") this.delivered += next.chunk.length;
      this.onOutput(next.stream, next.chunk);
      this.schedule();
    });
  }
}

/** A project's sandbox whose runs follow `script`; a signal ends a run as it would the real one. */
class FakeSandbox implements SandboxRunner {
  readonly commands: FakeCommand[] = [];
  readonly events: string[] = [];

  constructor(private readonly script: Script) {}

  start(
    id: string,
    command: SandboxCommand,
    onOutput: (stream: OutputStream, chunk: Buffer) => void,
  ): Promise<SandboxProcess> {
    const fake = new FakeCommand(id, command, onOutput, this.script, this.events);
    this.commands.push(fake);
    this.script.started?.(fake);
    return Promise.resolve(fake);
  }

  signal(id: string, signal: SignalName): Promise<number> {
    const fake = this.commands.find((command) => command.id === id);
    if (!fake) return Promise.resolve(0);
    fake.signals.push(signal);
    fake.end(128 + constants.signals[`SIG${signal}`]);
    return Promise.resolve(1);
  }

  run(): Promise<never> {
    return Promise.reject(new Error("the files routes run nothing to its end"));
  }
}

const apps: FastifyInstance[] = [];

afterEach(async () => {
  for (const app of apps.splice(0)) {
    app.server.closeAllConnections();
    await app.close();
  }
});

/** The runtime's server (its error answers, its body parsers) with the files routes on a fake sandbox. */
function filesApi(script: Script, maxBytes?: number) {
  const sandbox = new FakeSandbox(script);
  const auth = new OneUserAuth(db, { ...DEFAULT_AUTH, secret: randomBytes(32) });
  const app = buildServer({ prerequisites: [], logger: false, auth });
  registerFileRoutes(new Routes(app, { auth, operators: new Set() }), {
    sandboxes: (projectId) =>
      projectId === PROJECT ? Promise.resolve(sandbox) : Promise.reject(new Error(`no project ${projectId}`)),
    limits: maxBytes === undefined ? undefined : { ...RuntimeConfig.parse({}).files, maxBytes },
  });
  apps.push(app);
  return { app, sandbox };
}

async function listening(app: FastifyInstance): Promise<number> {
  await app.listen({ host: "127.0.0.1", port: 0 });
  return (app.server.address() as AddressInfo).port;
}

/** `promise`, or a failure naming what never came once `ms` have passed. */
async function within<T>(ms: number, what: string, promise: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: nothing after ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, deadline]);
  } finally {
    clearTimeout(timer);
  }
}

const sha256 = (bytes: Buffer) => createHash("sha256").update(bytes).digest("hex");

/** A client's body in 64 KiB chunks, read only as fast as the server reads it. */
const upload = (body: Buffer) =>
  Readable.from(
    (function* () {
      for (let at = 0; at < body.length; at += 64 * KiB) yield body.subarray(at, at + 64 * KiB);
    })(),
    { objectMode: false },
  );

const content = (path: string) => `/projects/${PROJECT}/files/content?path=${path}`;

/** A request of a real client on loopback, which a test can leave mid-way (inject cannot). */
async function rawRequest(app: FastifyInstance, method: "GET" | "PUT", path: string) {
  const client = httpRequest({
    host: "127.0.0.1",
    port: await listening(app),
    method,
    path,
    headers: { authorization: AUTHORIZATION, "content-type": "application/octet-stream" },
  });
  client.on("error", () => undefined);
  return client;
}

describe("GET /files/content", () => {
  const FILE = randomBytes(4 * MiB);
  const CHUNK = 32 * KiB;

  // The script prints its status before its bytes, but the engine copies stdout and stderr apart: the bytes
  // may come first, and once they filled the answer's buffer the connection was paused with the status
  // line behind them. The client reads only once the run has stalled, so that the answer's back-pressure
  // pauses the run and only the client's reading resumes it.
  it.each([
    ["first", 0],
    ["after 64 KiB of the file", 64 * KiB],
    ["after the whole file", FILE.length],
  ])(
    "answers 200 with the whole file when the status line comes %s, to a client that reads late",
    async (_, ahead) => {
      const { app, sandbox } = filesApi({
        started(command) {
          for (let at = 0; at <= FILE.length; at += CHUNK) {
            if (at === ahead) command.status(`ok ${FILE.length}`);
            if (at < FILE.length) command.stdout(FILE.subarray(at, at + CHUNK));
          }
          command.end(0);
        },
      });
      const response = await within(
        PROMPT_MS,
        "the answer to GET /files/content",
        app.inject({
          method: "GET",
          url: content("notes.bin"),
          headers: { authorization: AUTHORIZATION },
          payloadAsStream: true,
        }),
      );
      expect(response.statusCode).toBe(200);
      expect(response.headers["content-type"]).toBe("application/octet-stream");
      expect(response.headers["cache-control"]).toBe("no-store");
      await waitFor("the run to stall", PROMPT_MS, async () => sandbox.commands[0]?.stalled || undefined);
      const chunks: Buffer[] = await within(PROMPT_MS, "the whole file", response.stream().toArray());
      const file = Buffer.concat(chunks);
      expect(file.length).toBe(FILE.length);
      expect(sha256(file)).toBe(sha256(FILE));
    },
    TEST_MS,
  );

  it(
    "a client that leaves before the status line ends the run (KILL)",
    async () => {
      // A read that has not answered yet (a slow disk): only the client's leaving can end it.
      const { app, sandbox } = filesApi({});
      const client = await rawRequest(app, "GET", content("slow.bin"));
      client.end();
      const command = await waitFor("the read's start", PROMPT_MS, async () => sandbox.commands[0]);
      client.destroy();
      await waitFor("KILL to the run", PROMPT_MS, async () => command.signals.includes("KILL") || undefined);
    },
    TEST_MS,
  );
});

describe("PUT /files/content and /files/archive", () => {
  const BODY = randomBytes(8 * MiB);
  const put = (app: FastifyInstance, url: string, body: Readable, type = "application/octet-stream") =>
    app.inject({
      method: "PUT",
      url,
      headers: { authorization: AUTHORIZATION, "content-type": type },
      payload: body,
    });

  it(
    "answers success only once the command had the whole body and its end",
    async () => {
      const { app, sandbox } = filesApi({
        inputEnded(command) {
          command.status("ok /home/agent/blob.bin");
          command.end(0);
        },
      });
      const response = await within(
        PROMPT_MS,
        "the answer to the upload",
        put(app, content("blob.bin"), upload(BODY)).then((answer) => {
          sandbox.events.push("answered");
          return answer;
        }),
      );
      expect(response.statusCode).toBe(200);
      expect(response.json()).toEqual({ path: "/home/agent/blob.bin", size: BODY.length, mode: "644" });
      const command = sandbox.commands[0]!;
      expect(command.taken).toBe(BODY.length);
      expect(sha256(Buffer.concat(command.stdin))).toBe(sha256(BODY));
      expect(sandbox.events).toEqual(["stdin closed", "answered"]);
      expect(command.signals).toEqual([]);
    },
    TEST_MS,
  );

  it(
    "a refusal before the whole body is answered at once, and the rest of the body is read and dropped",
    async () => {
      // The path leads out of the home (a symlink): the script refuses and exits without reading its stdin.
      const { app } = filesApi({
        took(command) {
          if (command.taken < 64 * KiB) return;
          command.status("err outside /etc/blob.bin");
          command.end(1);
        },
      });
      const body = upload(BODY);
      const response = await within(PROMPT_MS, "the refusal", put(app, content("link/blob.bin"), body));
      expect(response.statusCode).toBe(403);
      expect(response.json()).toMatchObject({
        error: "path_outside",
        message: "path link/blob.bin: resolves to /etc/blob.bin, outside /home/agent and /workspace",
      });
      await within(PROMPT_MS, "the rest of the body read", finished(body));
    },
    TEST_MS,
  );

  it(
    "a tar that stops at its end-of-archive marker is answered with its status at once, the rest dropped",
    async () => {
      // tar -x stops reading at the archive's end; what follows (a client's padding) is never read.
      const { app, sandbox } = filesApi({
        took(command) {
          if (command.taken < 1 * MiB) return;
          command.status("ok 3");
          command.end(0);
        },
      });
      const body = upload(BODY);
      const response = await within(
        PROMPT_MS,
        "the answer to the archive",
        put(app, `/projects/${PROJECT}/files/archive?path=d`, body, "application/x-tar"),
      );
      expect(response.statusCode).toBe(200);
      expect(response.json()).toEqual({ path: "d", entries: 3 });
      expect(sandbox.commands[0]!.signals).toEqual([]);
      await within(PROMPT_MS, "the rest of the body read", finished(body));
    },
    TEST_MS,
  );

  it(
    "a command that dies mid-upload is answered with an error at once, never a success",
    async () => {
      const { app } = filesApi({
        took(command) {
          if (command.taken >= 1 * MiB) command.end(137);
        },
      });
      const body = upload(BODY);
      const response = await within(
        PROMPT_MS,
        "the answer to the upload",
        put(app, content("blob.bin"), body),
      );
      expect(response.statusCode).toBe(500);
      expect(response.json()).toMatchObject({ error: "internal" });
      await within(PROMPT_MS, "the rest of the body read", finished(body));
    },
    TEST_MS,
  );

  it(
    "a body over the limit is 413, and the run is stopped (TERM) without its stdin closed",
    async () => {
      // A run never closed keeps nothing: the script's trap removes its temporary file.
      const { app, sandbox } = filesApi({}, 1 * MiB);
      const response = await within(
        PROMPT_MS,
        "the answer to the upload",
        put(app, content("blob.bin"), upload(BODY.subarray(0, 3 * MiB))),
      );
      expect(response.statusCode).toBe(413);
      expect(response.json()).toMatchObject({ error: "payload_too_large", details: { max_bytes: 1 * MiB } });
      const command = sandbox.commands[0]!;
      expect(command.signals).toEqual(["TERM"]);
      expect(command.inputClosed).toBe(false);
    },
    TEST_MS,
  );

  it(
    "a client that leaves mid-upload stops the run (TERM) without its stdin closed",
    async () => {
      // Its stdin closed, the script would keep half a file as the whole.
      const { app, sandbox } = filesApi({});
      const client = await rawRequest(app, "PUT", content("blob.bin"));
      client.write(BODY.subarray(0, 1 * MiB));
      const command = await waitFor("the run's first bytes", PROMPT_MS, async () =>
        (sandbox.commands[0]?.taken ?? 0) > 0 ? sandbox.commands[0] : undefined,
      );
      client.destroy();
      await waitFor("TERM to the run", PROMPT_MS, async () => command.signals.includes("TERM") || undefined);
      expect(command.inputClosed).toBe(false);
    },
    TEST_MS,
  );
});

describe("GET /files", () => {
  const CHUNK = 32 * KiB;
  const LIMIT = RuntimeConfig.parse({}).files.maxListEntries;
  /** The script's record of a file `name` (its `entry`: name, type, size, mode, time, link target). */
  const record = (name: string, type = "f", link = "") =>
    `${name}/${type}\t12\t644\t1700000000.25\t${link}\0`;
  const names = Array.from({ length: 100_000 }, (_, i) => `file-${String(i).padStart(6, "0")}.txt`);
  const RECORD_BYTES = Buffer.byteLength(record(names[0]!));
  const list = (app: FastifyInstance, query: string) =>
    within(
      PROMPT_MS,
      "the listing",
      app.inject({
        method: "GET",
        url: `/projects/${PROJECT}/files?${query}`,
        headers: { authorization: AUTHORIZATION },
      }),
    );
  /**
   * A run that lists `records` whatever it was asked (as a sandbox whose script went wrong could), its
   * status line first or after the listing (the engine copies stdout and stderr apart).
   */
  const listing = (records: string | Buffer, statusLast = false) => ({
    started(command: FakeCommand) {
      if (!statusLast) command.status("ok directory /home/agent/many");
      const all = Buffer.isBuffer(records) ? records : Buffer.from(records);
      for (let at = 0; at < all.length; at += CHUNK) command.stdout(all.subarray(at, at + CHUNK));
      if (statusLast) command.status("ok directory /home/agent/many");
      command.end(0);
    },
  });

  it(
    "a directory with more entries than the bound answers the bound and a cursor, and reads no more of its listing",
    async () => {
      const { app, sandbox } = filesApi(listing(names.map((n) => record(n)).join("")));
      const response = await list(app, "path=many");
      expect(response.statusCode, response.body).toBe(200);
      const body = response.json();
      expect(body).toMatchObject({ path: "/home/agent/many", type: "directory" });
      expect(body.entries.map((e: { name: string }) => e.name)).toEqual(names.slice(0, LIMIT));
      expect(Buffer.from(body.next_cursor, "base64url").toString()).toBe(names[LIMIT - 1]);
      const command = sandbox.commands[0]!;
      // The script is asked for one entry more than the answer holds, from the start.
      expect(command.command.argv.slice(-4)).toEqual(["stat", "many", String(LIMIT + 1), ""]);
      // What the runtime read of find's output: those entries, and at most the rest of the chunk that
      // brought the last of them (100,000 entries were on offer); then the run is ended.
      expect(command.delivered).toBeLessThanOrEqual((LIMIT + 1) * RECORD_BYTES + CHUNK);
      expect(command.signals).toEqual(["KILL"]);
    },
    TEST_MS,
  );

  it(
    "a listing longer than the bound that comes before its status line is answered, not left waiting",
    async () => {
      // Once full, the listing's connection was paused, and the status line behind it never came.
      const { app, sandbox } = filesApi(
        listing(
          names
            .slice(0, 3 * LIMIT)
            .map((n) => record(n))
            .join(""),
          true,
        ),
      );
      const response = await list(app, "path=many");
      expect(response.statusCode, response.body).toBe(200);
      expect(response.json().entries).toHaveLength(LIMIT);
      expect(Buffer.from(response.json().next_cursor, "base64url").toString()).toBe(names[LIMIT - 1]);
      expect(sandbox.commands[0]!.signals).toEqual(["KILL"]);
    },
    TEST_MS,
  );

  it(
    "a listing within the bound is whole, without a cursor; `limit` and `cursor` go to the script",
    async () => {
      const few = names.slice(0, 5);
      const { app, sandbox } = filesApi(listing(few.map((n) => record(n)).join("")));
      const whole = await list(app, "path=many");
      expect(whole.json().entries).toHaveLength(5);
      expect(whole.json().next_cursor).toBeNull();
      expect(sandbox.commands[0]!.signals).toEqual([]);

      const paged = await list(app, "path=many&limit=2");
      expect(paged.json().entries.map((e: { name: string }) => e.name)).toEqual(few.slice(0, 2));
      const cursor = paged.json().next_cursor as string;
      expect(sandbox.commands[1]!.command.argv.slice(-2)).toEqual(["3", ""]);
      await list(app, `path=many&limit=2&cursor=${cursor}`);
      // The name's bytes, as the script's base64 -d takes them.
      expect(sandbox.commands[2]!.command.argv.slice(-2)).toEqual([
        "3",
        Buffer.from(few[1]!).toString("base64"),
      ]);
      // More than the bound is the bound; a cursor no answer made is cut where no name could go on.
      await list(app, `path=many&limit=${LIMIT * 10}`);
      expect(sandbox.commands[3]!.command.argv.at(-2)).toBe(String(LIMIT + 1));
      await list(app, `path=many&cursor=${Buffer.from("ab/cd").toString("base64url")}`);
      expect(sandbox.commands[4]!.command.argv.at(-1)).toBe(Buffer.from("ab").toString("base64"));
    },
    TEST_MS,
  );

  it("reads names as bytes: tabs, newlines and bytes that are not UTF-8 in names, anything in link targets", async () => {
    const odd = Buffer.concat([
      Buffer.from(record("tab\there")),
      Buffer.from(record("new\nline")),
      Buffer.from("bad-"),
      Buffer.from([0xff, 0xfe]),
      Buffer.from(record("", "l", "/x/~\tand/y")),
      Buffer.from(record("é")),
    ]);
    const { app } = filesApi(listing(odd));
    const response = await list(app, "path=many&limit=2");
    const body = response.json();
    expect(body.entries.map((e: { name: string }) => e.name)).toEqual(["bad-\ufffd\ufffd", "new\nline"]);
    expect(body.entries[0]).toMatchObject({ type: "symlink", link_target: "/x/~\tand/y" });
    expect(Buffer.from(body.next_cursor, "base64url")).toEqual(Buffer.from("new\nline"));
  });

  it(
    "a run whose stderr goes on after its status (a tar's complaint about each unreadable file) keeps none of it",
    async () => {
      // Each chunk of stderr was once appended to all before it: quadratic copying, all of it kept.
      const STDERR_CHUNKS = 2000;
      const complaint = Buffer.alloc(1 * KiB, "tar: ./secret: Cannot open: Permission denied\n");
      const { app } = filesApi({
        started(command) {
          command.status("ok /home/agent/d");
          for (let i = 0; i < STDERR_CHUNKS; i++) {
            command.deliverStderr(complaint);
            if (i % 100 === 0) command.stdout(Buffer.alloc(512));
          }
          command.end(0);
        },
      });
      const concat = Buffer.concat;
      let copied = 0;
      Buffer.concat = (list: readonly Uint8Array[], totalLength?: number) => {
        const joined = concat.call(Buffer, list, totalLength);
        copied += joined.length;
        return joined;
      };
      try {
        const response = await within(
          PROMPT_MS,
          "the archive",
          app.inject({
            method: "GET",
            url: `/projects/${PROJECT}/files/archive?path=d`,
            headers: { authorization: AUTHORIZATION },
          }),
        );
        expect(response.statusCode).toBe(200);
        expect(response.rawPayload.length).toBe(20 * 512);
      } finally {
        Buffer.concat = concat;
      }
      // 2 MiB of stderr came; what was copied is the answer's own bytes and the status line, not 2 GB.
      expect(copied).toBeLessThan(256 * KiB);
    },
    TEST_MS,
  );
});

describe("the files script's status line", () => {
  it("is the first line of stderr, however it is cut; what follows is never kept", () => {
    const status = new StatusLine();
    const text = Buffer.from("ok directory /home/agent/a b\nfind: something after\n");
    const lines = [...text].map((byte) => status.push(Buffer.from([byte])));
    expect(lines.filter((l) => l !== undefined)).toEqual(["ok directory /home/agent/a b"]);
    expect(status.keptBytes).toBe(0);
  });

  it("keeps at most STATUS_LINE_BYTES of a first line that never ends, and is then a failure naming the bound", () => {
    const status = new StatusLine();
    const chunk = Buffer.alloc(1 * KiB, "x");
    let line: string | undefined;
    let most = 0;
    for (let i = 0; i < 100_000 && line === undefined; i++) {
      line = status.push(chunk);
      most = Math.max(most, status.keptBytes);
    }
    expect(most).toBeLessThanOrEqual(STATUS_LINE_BYTES);
    expect(line).toBe(`err exit the file operation's status line is longer than ${STATUS_LINE_BYTES} bytes`);
    const after = Array.from({ length: 10_000 }, () => status.push(chunk));
    expect(after.every((l) => l === undefined)).toBe(true);
    expect(status.keptBytes).toBe(0);
  });
});
