// Seed 000's clients, unchanged (issue 15). Its API (§3.1, §4): `POST /auth/login → {access_token,
// refresh_token}`, `POST /auth/refresh {refresh_token} → {access_token}`, `POST /projects → {project_id,
// status: "running", ssh, terminal_url}`; its web client (§11.4) opens `terminal_url` with xterm.js's
// AttachAddon (a resize message on open, raw frames both ways). Scripted here exactly so: the client keeps
// the refresh token login gave it and reads only `access_token` from a refresh. Its 15 minutes are the
// access tokens' lifetime in this test's Auth (2 s), so a cycle waits for its token to run out, not a
// quarter of an hour. Beside it: a client that rotates, replays and thieves, on PGlite and on Postgres;
// and how long a create waits (runtime.createWaitSeconds, Prefer).
import type { AddressInfo } from "node:net";
import type { FastifyInstance } from "fastify";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { waitFor } from "../../lib/process.js";
import { Auth, DEFAULT_AUTH } from "../../runtime/api/auth.js";
import type { Database } from "../../runtime/store/db.js";
import { StackConfig } from "../../stacks/config.js";
import { apiHarness, apiServer, TEST_SECRET, type ApiHarness } from "../helpers/api.js";
import { testPlatform, type TestPlatform } from "../helpers/host.js";
import { DATABASE_KINDS, testDatabase, type TestDatabase } from "../helpers/postgres.js";
import { connectTerminal } from "../helpers/terminal-client.js";

/** The seed's 15 minutes. */
const ACCESS_SECONDS = 2;
const PASSWORD = "correct horse battery staple";
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
/** Until an access token issued now has surely expired (its `exp` is whole seconds). */
const accessLifetime = () => sleep(ACCESS_SECONDS * 1000 + 150);

const shortLivedAuth = (db: Database, accessTtlSeconds = ACCESS_SECONDS) =>
  new Auth(db, { ...DEFAULT_AUTH, secret: TEST_SECRET, accessTtlSeconds });

/** The server listening on a loopback port of its own; its base URL. */
async function listening(app: FastifyInstance): Promise<string> {
  await app.listen({ host: "127.0.0.1", port: 0 });
  return `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
}

interface Answer {
  readonly status: number;
  readonly body: Record<string, unknown>;
}

/**
 * Seed 000 §3.1's client: it keeps the access and refresh tokens login gave it; a refresh sends that
 * same refresh token and keeps only the `access_token` of the answer (the seed's refresh answers nothing
 * else). Everything else carries `Authorization: Bearer <access_token>`.
 */
class SeedClient {
  accessToken = "";
  refreshToken = "";
  /** Every refresh token it ever sent. */
  readonly sentRefreshTokens = new Set<string>();

  constructor(readonly base: string) {}

  async send(method: string, path: string, body?: unknown, token = this.accessToken): Promise<Answer> {
    const response = await fetch(`${this.base}${path}`, {
      method,
      headers: {
        ...(body === undefined ? {} : { "content-type": "application/json" }),
        ...(token ? { authorization: `Bearer ${token}` } : {}),
      },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await response.text();
    return { status: response.status, body: text ? (JSON.parse(text) as Record<string, unknown>) : {} };
  }

  async register(email: string): Promise<Answer> {
    return this.send("POST", "/auth/register", { email, password: PASSWORD }, "");
  }

  async login(email: string): Promise<void> {
    const answer = await this.send("POST", "/auth/login", { email, password: PASSWORD }, "");
    expect(answer.status, JSON.stringify(answer.body)).toBe(200);
    this.accessToken = answer.body.access_token as string;
    this.refreshToken = answer.body.refresh_token as string;
  }

  async refresh(): Promise<Answer> {
    this.sentRefreshTokens.add(this.refreshToken);
    const answer = await this.send("POST", "/auth/refresh", { refresh_token: this.refreshToken }, "");
    if (answer.status === 200) this.accessToken = answer.body.access_token as string;
    return answer;
  }
}

/** A client that rotates: it keeps the newest refresh token each answer brings. */
async function rotate(client: SeedClient, token: string): Promise<Answer & { next: string }> {
  const answer = await client.send("POST", "/auth/refresh", { refresh_token: token }, "");
  return { ...answer, next: answer.body.refresh_token as string };
}

describe("seed 000's web client, unchanged, against a real sandbox", () => {
  let platform: TestPlatform;
  let h: ApiHarness<never>;
  let base: string;

  beforeAll(async () => {
    platform = await testPlatform({
      subnetPool: "10.244.0.0/24",
      sshPortRange: [27800, 27805],
      leaseSeconds: 10,
    });
    const database = await testDatabase("postgres", { under: platform.config.host.dataDir });
    h = await apiHarness({
      database,
      config: platform.config,
      reconciler: true,
      terminal: true,
      // Long enough for a cold create on a busy machine (about 4 s alone here).
      server: { auth: shortLivedAuth(database.db), projects: { createWaitSeconds: 120 } },
    });
    base = await listening(h.app);
  }, 900_000);

  afterAll(async () => {
    await h?.close();
    await platform?.stop();
  }, 300_000);

  it(
    "register → login → create (running, ssh, terminal_url) → terminal → refresh with the first refresh token, cycle after cycle",
    { timeout: 600_000 },
    async () => {
      const client = new SeedClient(base);
      const email = `seed-${Date.now()}@example.test`;
      const registered = await client.register(email);
      expect(registered.status).toBe(201);
      expect(registered.body).toEqual({ user_id: expect.stringMatching(/^[0-9a-f-]{36}$/) });
      await client.login(email);
      const firstRefreshToken = client.refreshToken;

      // §4: the create answers the running sandbox.
      const created = await client.send("POST", "/projects", { name: "seed client" });
      expect(created.status, JSON.stringify(created.body)).toBe(201);
      expect(created.body).toMatchObject({
        project_id: expect.stringMatching(/^[0-9a-f-]{36}$/),
        status: "running",
        ssh: {
          host: "127.0.0.1",
          port: expect.any(Number),
          user: "agent",
          private_key: expect.stringContaining("BEGIN OPENSSH PRIVATE KEY"),
        },
        terminal_url: expect.stringMatching(/^ws:\/\/127\.0\.0\.1:\d+\/terminal\/[0-9a-f-]{36}\?token=/),
      });
      const projectId = created.body.project_id as string;

      // §11.4: the terminal view opens terminal_url as it came, tells the size, and types.
      const openTerminal = async (url: string, marker: string) => {
        const terminal = connectTerminal(url);
        terminal.ws.once("open", () => terminal.resize(120, 40));
        terminal.type(`echo ${marker}-$((6*7))\r`);
        await terminal.waitFor(`${marker}-42`, 30_000);
        terminal.close();
        await terminal.closed;
      };
      await openTerminal(created.body.terminal_url as string, "seed");

      // Several "15 minutes": each time the access token has run out, the first refresh token gets a new one.
      for (let cycle = 1; cycle <= 4; cycle++) {
        await accessLifetime();
        const expired = await client.send("GET", "/projects");
        expect(expired.status).toBe(401);
        expect(expired.body.message).toBe("access token expired");
        const refreshed = await client.refresh();
        expect(refreshed.status, `cycle ${cycle}: ${JSON.stringify(refreshed.body)}`).toBe(200);
        const listed = await client.send("GET", "/projects");
        expect(listed.status).toBe(200);
        expect(listed.body.projects).toEqual([
          expect.objectContaining({ project_id: projectId, status: "running" }),
        ]);
        if (cycle === 2) {
          // The project detail carries a fresh terminal_url; the terminal opens with it after refreshes.
          const detail = await client.send("GET", `/projects/${projectId}`);
          expect(detail.status).toBe(200);
          await openTerminal(detail.body.terminal_url as string, "again");
        }
      }
      expect([...client.sentRefreshTokens]).toEqual([firstRefreshToken]);

      const deleted = await client.send("DELETE", `/projects/${projectId}`);
      expect(deleted.status).toBe(202);
    },
  );
});

describe.each(DATABASE_KINDS)("refresh tokens: kept, rotated, replayed, stolen (%s)", (kind) => {
  let database: TestDatabase;
  let app: FastifyInstance;
  let base: string;
  let run = 0;

  /** A fresh account, logged in by a seed client. */
  const loggedIn = async () => {
    const client = new SeedClient(base);
    const email = `refresh-${kind}-${Date.now()}-${++run}@example.test`;
    expect((await client.register(email)).status).toBe(201);
    await client.login(email);
    return client;
  };

  beforeAll(async () => {
    database = await testDatabase(kind);
    app = apiServer({ db: database.db, auth: shortLivedAuth(database.db) });
    base = await listening(app);
  });

  afterAll(async () => {
    await app?.close();
    await database?.close();
  });

  it("a client that keeps its first refresh token refreshes once its access token has run out, again and again", async () => {
    const client = await loggedIn();
    const first = client.refreshToken;
    for (let cycle = 0; cycle < 3; cycle++) {
      await accessLifetime();
      expect((await client.send("GET", "/auth/me")).status).toBe(401);
      expect((await client.refresh()).status, `cycle ${cycle}`).toBe(200);
      expect((await client.send("GET", "/auth/me")).status).toBe(200);
    }
    expect([...client.sentRefreshTokens]).toEqual([first]);
  });

  it("three refreshes with the first refresh token within a minute all answer access_token, two of them at once", async () => {
    // A mobile app relaunched, two tabs, two requests answered 401 at the same moment: nothing waits for the
    // access token to run out, and nothing is revoked.
    const client = await loggedIn();
    const first = client.refreshToken;
    expect((await client.refresh()).status).toBe(200);
    const together = await Promise.all([client.refresh(), client.refresh()]);
    expect(together.map((answer) => answer.status)).toEqual([200, 200]);
    for (const answer of together) expect(answer.body.access_token).toEqual(expect.any(String));
    expect((await client.send("GET", "/auth/me")).status).toBe(200);
    expect([...client.sentRefreshTokens]).toEqual([first]);
    // Logout still ends it.
    expect((await client.send("POST", "/auth/logout", { refresh_token: first }, "")).status).toBe(204);
    expect((await client.refresh()).status).toBe(401);
  });

  it("it keeps working until the refresh token itself expires", async () => {
    const client = await loggedIn();
    expect((await client.refresh()).status).toBe(200);
    const { user_id } = (await client.send("GET", "/auth/me")).body;
    // Thirty days, passed: the tokens of this account expire.
    await database.db.query(
      "update refresh_tokens set expires_at = now() - interval '1 second' where user_id = $1",
      [user_id],
    );
    await accessLifetime();
    const refused = await client.refresh();
    expect(refused.status).toBe(401);
    expect(refused.body).toMatchObject({
      error: "invalid_refresh_token",
      message: "refresh token has expired (or its account is gone); log in again",
    });
  });

  it("a client that rotates gets rotation: each answer's refresh token works at once, without waiting", async () => {
    const client = await loggedIn();
    let token = client.refreshToken;
    for (let i = 0; i < 3; i++) {
      const rotated = await rotate(client, token);
      expect(rotated.status).toBe(200);
      expect(rotated.next).not.toBe(token);
      token = rotated.next;
    }
  });

  it("replaying a token older than the newest one the client has used revokes the family", async () => {
    const client = await loggedIn();
    const r0 = client.refreshToken;
    const r1 = (await rotate(client, r0)).next;
    const r2 = (await rotate(client, r1)).next;
    const replay = await rotate(client, r0);
    expect(replay.status).toBe(401);
    expect(replay.body.message).toMatch(
      /^refresh token was already used; its session has been revoked, log in again \(a newer refresh token of this session had been presented/,
    );
    const legitimate = await rotate(client, r2);
    expect(legitimate.status).toBe(401);
    expect(legitimate.body.message).toMatch(/belongs to a session that has ended/);
  });

  it("in a rotated family, the head presented again while the access token it gave is fresh revokes the family (two holders)", async () => {
    // The owner rotates; a thief who copied the owner's current head presents it while the owner's new
    // access token is still fresh: both are logged out, and the owner logs in again.
    const owner = await loggedIn();
    const head = (await rotate(owner, owner.refreshToken)).next;
    const newest = (await rotate(owner, head)).next;
    const thief = new SeedClient(base);
    const stolen = await rotate(thief, head);
    expect(stolen.status).toBe(401);
    expect(stolen.body.message).toMatch(
      /presented again while the access token it last gave was still fresh/,
    );
    const ownerNext = await rotate(owner, newest);
    expect(ownerNext.status).toBe(401);
    expect(ownerNext.body.message).toMatch(/belongs to a session that has ended/);
  });

  it("a thief who got in first is found out at the owner's next refresh; the thief's newer tokens die too", async () => {
    const owner = await loggedIn();
    const thief = new SeedClient(base);
    thief.refreshToken = owner.refreshToken;
    const stolen = await rotate(thief, owner.refreshToken);
    expect(stolen.status).toBe(200);
    const thiefNext = (await rotate(thief, stolen.next)).next; // a rotating thief
    await accessLifetime();
    const found = await owner.refresh();
    expect(found.status).toBe(401);
    expect(found.body.message).toMatch(/already used; its session has been revoked/);
    expect((await rotate(thief, thiefNext)).status).toBe(401);
  });

  it("a token the client passed over, presented by someone else, rotates the family: the client's next refresh ends it for both", async () => {
    // A seed client is handed a new refresh token by each refresh and ignores it. Whoever presents one of
    // those is not the client; the family rotates to them, and the client's first token, an ancestor of
    // what was presented, revokes the family when it comes back.
    const client = await loggedIn();
    const passedOver = (await rotate(client, client.refreshToken)).next;
    expect((await client.refresh()).status).toBe(200);
    const late = await rotate(new SeedClient(base), passedOver);
    expect(late.status).toBe(200);
    const found = await client.refresh();
    expect(found.status).toBe(401);
    expect(found.body.message).toMatch(/already used; its session has been revoked/);
    expect((await rotate(new SeedClient(base), late.next)).status).toBe(401);
  });

  it("bad input is a 400 naming the field; an unknown token a 401 saying so", async () => {
    const client = new SeedClient(base);
    const missing = await client.send("POST", "/auth/refresh", {}, "");
    expect(missing.status).toBe(400);
    expect(missing.body.details).toEqual([expect.objectContaining({ field: "refresh_token" })]);
    const extra = await client.send("POST", "/auth/refresh", { refresh_token: "x", access_token: "y" }, "");
    expect(extra.status).toBe(400);
    expect(extra.body.details).toEqual([expect.objectContaining({ field: "access_token" })]);
    const unknown = await client.send("POST", "/auth/refresh", { refresh_token: "never-issued" }, "");
    expect(unknown.status).toBe(401);
    expect(unknown.body).toEqual({ error: "invalid_refresh_token", message: "refresh token is not valid" });
  });
});

describe("POST /projects waits for the sandbox, up to runtime.createWaitSeconds", () => {
  // No reconciler: creates are only recorded, so every wait here runs to its end unless the test ends it.
  let h: ApiHarness<"alice">;
  let config: StackConfig;
  // Room for every create below.
  const limits = {
    registration: "open",
    projectQuota: 20,
    rateLimits: { register: { burst: 100, perHour: 100 }, createProject: { burst: 100, perHour: 100 } },
  } as const;
  /** A create as alice; its answer and how long it took. */
  const create = async (name: string, headers: Record<string, string> = {}, app = h.app) => {
    const started = Date.now();
    const response = await app.inject({
      method: "POST",
      url: "/projects",
      payload: { name },
      headers: { authorization: `Bearer ${h.users.alice.token}`, ...headers },
    });
    return { response, ms: Date.now() - started, body: response.json() as Record<string, unknown> };
  };

  beforeAll(async () => {
    const database = await testDatabase("postgres");
    config = StackConfig.parse({
      target: "local",
      host: { dataDir: database.dir, configDir: database.dir },
      tenants: { subnetPool: "10.244.16.0/20", sshPortRange: [27810, 27830] },
    });
    h = await apiHarness({
      database,
      config,
      users: ["alice"],
      server: {
        projects: { createWaitSeconds: 30 },
        limits,
      },
    });
  });

  afterAll(() => h?.close());

  it("not running when the wait ends: 202 as before, creating, with the key and no terminal_url", async () => {
    const shortWait = apiServer({ db: h.db, config, limits, projects: { createWaitSeconds: 2 } });
    const { response, ms, body } = await create("short wait", {}, shortWait);
    await shortWait.close();
    expect(response.statusCode, response.body).toBe(202);
    expect(ms).toBeGreaterThanOrEqual(1_900);
    expect(body).toMatchObject({
      status: "creating",
      terminal_url: null,
      ssh: { private_key: expect.stringContaining("PRIVATE KEY") },
      operation: { kind: "create", state: "pending" },
    });
    expect(response.headers["preference-applied"]).toBeUndefined();
  });

  it("Prefer: respond-async answers at once; wait=N waits at most N seconds", async () => {
    const async = await create("at once", { prefer: "respond-async" });
    expect(async.response.statusCode).toBe(202);
    expect(async.response.headers["preference-applied"]).toBe("respond-async");
    expect(async.ms).toBeLessThan(10_000); // not the 30 s configured

    const brief = await create("one second", { prefer: "wait=1" });
    expect(brief.response.statusCode).toBe(202);
    expect(brief.response.headers["preference-applied"]).toBe("wait=1");
    expect(brief.ms).toBeGreaterThanOrEqual(900);
    expect(brief.ms).toBeLessThan(10_000);
  });

  it("a create that ends while the request waits is answered then: a failed one as 202 with its error", async () => {
    const pending = create("fails");
    // The reconciler's part, played by hand: the create fails.
    const projectId = await waitFor("the create to be recorded", 20_000, async () => {
      const { rows } = await h.db.query<{ project_id: string }>(
        "select o.project_id from operations o join projects p on p.id = o.project_id where p.name = 'fails'",
      );
      return rows[0]?.project_id;
    });
    await sleep(300);
    await h.db.transaction(async (tx) => {
      await tx.query(
        "update tenants set state = 'error', last_error = 'engine said no' where project_id = $1",
        [projectId],
      );
      await tx.query(
        "update operations set state = 'failed', error = 'engine said no', finished_at = now() where project_id = $1",
        [projectId],
      );
    });
    const { response, ms, body } = await pending;
    expect(response.statusCode, response.body).toBe(202);
    expect(ms).toBeLessThan(10_000);
    expect(body).toMatchObject({
      project_id: projectId,
      status: "error",
      error: "engine said no",
      terminal_url: null,
    });
  });

  it("an Idempotency-Key repeat answers 200 with the same project and key; the same key twice at once makes one project", async () => {
    const key = { "idempotency-key": `wait-${Date.now()}`, prefer: "respond-async" };
    const first = await create("keyed", key);
    expect(first.response.statusCode).toBe(202);
    const again = await create("keyed", key);
    expect(again.response.statusCode).toBe(200);
    expect(again.body).toMatchObject({
      project_id: first.body.project_id,
      ssh: { private_key: (first.body.ssh as { private_key: string }).private_key },
    });

    const together = { "idempotency-key": `together-${Date.now()}`, prefer: "respond-async" };
    const both = await Promise.all([create("together", together), create("together", together)]);
    expect(
      both.map((b) => b.response.statusCode).sort(),
      both.map((b) => b.response.body).join("\n"),
    ).toEqual([200, 202]);
    expect(both[0].body.project_id).toBe(both[1].body.project_id);
    const { rows } = await h.db.query<{ n: number }>(
      "select count(*)::int as n from projects where name = 'together'",
    );
    expect(rows[0]!.n).toBe(1);
  });

  it("a server that closes answers its waiting creates at once (202) rather than hold its shutdown", async () => {
    const closing = apiServer({ db: h.db, config, limits, projects: { createWaitSeconds: 60 } });
    const pending = create("closing", {}, closing);
    await sleep(1_000);
    const closed = closing.close();
    const { response, ms } = await pending;
    await closed;
    expect(response.statusCode, response.body).toBe(202);
    expect(ms).toBeLessThan(20_000);
  });

  it("bad input is still refused before anything waits: 400 naming the field", async () => {
    const { response, ms } = await create("");
    expect(response.statusCode).toBe(400);
    expect(response.json().details).toEqual([expect.objectContaining({ field: "name" })]);
    expect(ms).toBeLessThan(10_000);
    const badKey = await create("x", { "idempotency-key": "has spaces" });
    expect(badKey.response.statusCode).toBe(400);
    expect(badKey.response.json().details).toEqual([expect.objectContaining({ field: "idempotency-key" })]);
  });
});
