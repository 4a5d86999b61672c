// One user cannot exhaust everyone's pools (issue 22.5), on PGlite and on Postgres: the per-user project
// quota, the registration modes (open, invite, closed) with invite codes as `npm run invite` mints them,
// and the rate limits on register (per address) and create (per user), each settled before ssh-keygen
// runs or anything is allocated. No reconciler runs: a create is only recorded.
import { execFile } from "node:child_process";
import { writeFileSync } from "node:fs";
import * as path from "node:path";
import { promisify } from "node:util";
import type { FastifyInstance } from "fastify";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { InviteCodes } from "../../runtime/api/invites.js";
import type { Database } from "../../runtime/store/db.js";
import { tokenSecret } from "../../runtime/secrets.js";
import type { AccountLimits } from "../../runtime/server.js";
import { REPO_ROOT } from "../../lib/toolchain.js";
import { StackConfig } from "../../stacks/config.js";
import { apiServer, PASSWORD as password } from "../helpers/api.js";
import { DATABASE_KINDS, testDatabase, type TestDatabase } from "../helpers/postgres.js";

// Every ssh-keygen the API runs is counted (and still run): a refused create must not have run one.
const keygen = vi.hoisted(() => ({ calls: 0 }));
vi.mock("../../lib/ssh-keygen.js", async (importOriginal) => {
  const original = await importOriginal<typeof import("../../lib/ssh-keygen.js")>();
  return {
    ...original,
    generateSshKeyPair: (comment: string) => {
      keygen.calls++;
      return original.generateSshKeyPair(comment);
    },
  };
});

const execFileAsync = promisify(execFile);
const WIDE = { burst: 1000, perHour: 1000 };

describe.each(DATABASE_KINDS)("quota, registration modes and rate limits on %s", (kind) => {
  let database: TestDatabase;
  let dir: string;
  let db: Database;
  let secret: Uint8Array;
  let config: StackConfig;
  const servers: FastifyInstance[] = [];
  const run = `${kind}-${Date.now()}`;
  let users = 0;

  /** A server on the shared database with these limits (the defaults' wide rates unless given). */
  const server = (
    limits: Partial<AccountLimits> & { trustedProxies?: string[] } = {},
    invites?: InviteCodes,
  ) => {
    // No route below reaches a sandbox: the server has no engine.
    const app = apiServer({
      db,
      config,
      secret,
      invites,
      limits: {
        registration: "open",
        projectQuota: 5,
        ...limits,
        rateLimits: { register: WIDE, createProject: WIDE, ...limits.rateLimits },
      },
    });
    servers.push(app);
    return app;
  };

  const register = (app: FastifyInstance, body: object, address = "10.20.0.1") =>
    app.inject({ method: "POST", url: "/auth/register", payload: body, remoteAddress: address });

  /** A new account on `app` and its access token. */
  async function user(app: FastifyInstance): Promise<string> {
    const email = `user-${++users}-${run}@example.test`;
    expect((await register(app, { email, password }, `10.30.0.${users}`)).statusCode).toBe(201);
    return (await app.inject({ method: "POST", url: "/auth/login", payload: { email, password } })).json()
      .access_token as string;
  }

  const create = (app: FastifyInstance, token: string, name = "p") =>
    app.inject({
      method: "POST",
      url: "/projects",
      payload: { name },
      headers: { authorization: `Bearer ${token}` },
    });

  const counts = async () =>
    (
      await db.query<{ users: number; projects: number; tenants: number; operations: number }>(
        `select (select count(*)::int from users) as users, (select count(*)::int from projects) as projects,
                (select count(*)::int from tenants) as tenants, (select count(*)::int from operations) as operations`,
      )
    ).rows[0]!;

  beforeAll(async () => {
    database = await testDatabase(kind);
    ({ dir, db } = database);
    secret = tokenSecret(dir, {});
    config = StackConfig.parse({
      target: "local",
      host: { dataDir: dir, configDir: dir },
      tenants: { subnetPool: "10.240.0.0/20", sshPortRange: [27500, 27600] },
    });
  });

  afterAll(async () => {
    for (const app of servers) await app.close();
    await database?.close();
  });

  describe("per-user project quota", () => {
    it("a user at the quota gets 403 naming it and its key, nothing is recorded and no key made; another user still creates", async () => {
      const app = server({ projectQuota: 2 });
      const [alice, bob] = [await user(app), await user(app)];
      for (const name of ["one", "two"]) expect((await create(app, alice, name)).statusCode).toBe(202);
      const before = { ...(await counts()), keygen: keygen.calls };

      const refused = await create(app, alice, "three");
      expect(refused.statusCode).toBe(403);
      expect(refused.json()).toEqual({
        error: "quota_exceeded",
        message:
          "project quota reached: at most 2 projects per user (agent-sandbox:runtime.projectQuota is 2); delete one to create another",
        details: { quota: 2, config_key: "agent-sandbox:runtime.projectQuota" },
      });
      expect({ ...(await counts()), keygen: keygen.calls }).toEqual(before);

      expect((await create(app, bob, "bob's")).statusCode).toBe(202);
    });

    it("a project being deleted counts until its delete has finished", async () => {
      const app = server({ projectQuota: 1 });
      const token = await user(app);
      const created = await create(app, token);
      const id = created.json().project_id as string;
      const auth = { authorization: `Bearer ${token}` };
      expect((await app.inject({ method: "DELETE", url: `/projects/${id}`, headers: auth })).statusCode).toBe(
        202,
      );
      expect((await create(app, token)).statusCode).toBe(403);
      // What the reconciler records when the tenant's stack is destroyed.
      await db.query("update tenants set state = 'deleted' where project_id = $1", [id]);
      expect((await create(app, token)).statusCode).toBe(202);
    });

    it("creates sent at once cannot pass the quota together", async () => {
      const app = server({ projectQuota: 2 });
      const token = await user(app);
      const statuses = (
        await Promise.all(Array.from({ length: 6 }, (_, i) => create(app, token, `racing ${i}`)))
      ).map((r) => r.statusCode);
      expect(statuses.filter((s) => s === 202)).toHaveLength(2);
      expect(statuses.filter((s) => s === 403)).toHaveLength(4);
      const { rows } = await db.query<{ n: number }>(
        `select count(*)::int as n from projects p join users u on u.id = p.user_id
          where u.email = $1`,
        [`user-${users}-${run}@example.test`],
      );
      expect(rows[0]!.n).toBe(2);
    });

    it("the idempotent repeat of a create is answered at the quota (it creates nothing)", async () => {
      const app = server({ projectQuota: 1 });
      const token = await user(app);
      const headers = { authorization: `Bearer ${token}`, "idempotency-key": `quota-${run}` };
      const first = await app.inject({ method: "POST", url: "/projects", payload: { name: "p" }, headers });
      expect(first.statusCode).toBe(202);
      const again = await app.inject({ method: "POST", url: "/projects", payload: { name: "p" }, headers });
      expect(again.statusCode).toBe(200);
      expect(again.json().project_id).toBe(first.json().project_id);
    });
  });

  describe("rate limits", () => {
    it("creates per user: 429 with Retry-After past the burst, before ssh-keygen; another user is not slowed", async () => {
      const app = server({ rateLimits: { register: WIDE, createProject: { burst: 2, perHour: 60 } } });
      const [carol, dave] = [await user(app), await user(app)];
      for (const name of ["a", "b"]) expect((await create(app, carol, name)).statusCode).toBe(202);
      const before = { ...(await counts()), keygen: keygen.calls };
      const limited = await create(app, carol, "c");
      expect(limited.statusCode).toBe(429);
      // 60 an hour: one token a minute.
      expect(Number(limited.headers["retry-after"])).toBeGreaterThan(50);
      expect(Number(limited.headers["retry-after"])).toBeLessThanOrEqual(60);
      expect(limited.json()).toMatchObject({
        error: "rate_limited",
        message: expect.stringContaining(
          "agent-sandbox:runtime.rateLimits.createProject allows 2 at once, then 60 an hour",
        ),
        details: { retry_after: Number(limited.headers["retry-after"]) },
      });
      expect({ ...(await counts()), keygen: keygen.calls }).toEqual(before);
      expect((await create(app, dave, "d")).statusCode).toBe(202);
    });

    it("registrations per address: 429 with Retry-After past the burst; invalid requests spend nothing; another address registers", async () => {
      const app = server({ rateLimits: { register: { burst: 2, perHour: 1 }, createProject: WIDE } });
      const email = (n: string) => `rate-${n}-${run}@example.test`;
      for (let i = 0; i < 5; i++)
        expect((await register(app, { email: "not an email", password }, "10.40.0.1")).statusCode).toBe(400);
      for (const n of ["1", "2"])
        expect((await register(app, { email: email(n), password }, "10.40.0.1")).statusCode).toBe(201);
      const before = await counts();
      const limited = await register(app, { email: email("3"), password }, "10.40.0.1");
      expect(limited.statusCode).toBe(429);
      expect(Number(limited.headers["retry-after"])).toBeGreaterThan(3500);
      expect(limited.json().message).toContain("agent-sandbox:runtime.rateLimits.register");
      expect(await counts()).toEqual(before);
      expect((await register(app, { email: email("3"), password }, "10.40.0.2")).statusCode).toBe(201);
    });
  });

  describe("behind a reverse proxy (runtime.trustedProxies: the GCP host's front door)", () => {
    const ONE = { burst: 1, perHour: 1 };
    const email = (n: string) => `proxied-${n}-${run}@example.test`;
    /** A registration as the front door relays it: from its own address, naming the client. */
    const relayed = (app: FastifyInstance, n: string, client: string, from = "127.0.0.1") =>
      app.inject({
        method: "POST",
        url: "/auth/register",
        payload: { email: email(n), password },
        remoteAddress: from,
        headers: { "x-forwarded-for": client },
      });

    it("each client the trusted proxy names has its own limit; an untrusted peer's header changes nothing", async () => {
      const app = server({
        rateLimits: { register: ONE, createProject: WIDE },
        trustedProxies: ["127.0.0.1"],
      });
      expect((await relayed(app, "a1", "198.51.100.1")).statusCode).toBe(201);
      expect((await relayed(app, "a2", "198.51.100.1")).statusCode).toBe(429);
      expect((await relayed(app, "a3", "198.51.100.2")).statusCode).toBe(201);
      // A client that is not the proxy cannot choose its address by the header: its own counts.
      expect((await relayed(app, "a4", "198.51.100.3", "10.61.0.1")).statusCode).toBe(201);
      expect((await relayed(app, "a5", "198.51.100.4", "10.61.0.1")).statusCode).toBe(429);
    });

    it("without it, everyone the proxy relays shares the proxy's own address", async () => {
      const app = server({ rateLimits: { register: ONE, createProject: WIDE } });
      expect((await relayed(app, "b1", "198.51.100.5")).statusCode).toBe(201);
      expect((await relayed(app, "b2", "198.51.100.6")).statusCode).toBe(429);
    });
  });

  describe("registration modes", () => {
    it("closed: 403 naming the mode and its key; nothing is recorded; existing accounts still log in", async () => {
      const open = server();
      const email = `before-closing-${run}@example.test`;
      expect((await register(open, { email, password })).statusCode).toBe(201);
      const closed = server({ registration: "closed" });
      const before = await counts();
      const refused = await register(closed, { email: `after-${run}@example.test`, password });
      expect(refused.statusCode).toBe(403);
      expect(refused.json()).toEqual({
        error: "registration_closed",
        message:
          "registration is closed on this platform (agent-sandbox:runtime.registration is closed); ask its operator for an account",
      });
      expect(await counts()).toEqual(before);
      const login = await closed.inject({ method: "POST", url: "/auth/login", payload: { email, password } });
      expect(login.statusCode).toBe(200);
    });

    it("invite: a code as `npm run invite` prints it makes one account; none, a forged, an expired or a used one make none", async () => {
      // The operator's script, on a stack file whose dataDir holds the runtime's token secret.
      const stackFile = path.join(dir, "Pulumi.invite.yaml");
      writeFileSync(
        stackFile,
        `config:\n  agent-sandbox:target: local\n  agent-sandbox:host:\n    dataDir: ${dir}\n  agent-sandbox:runtime:\n    registration: invite\n`,
      );
      const { stdout } = await execFileAsync(
        process.execPath,
        ["--import", "tsx", "scripts/invite.ts", "--days", "2"],
        {
          cwd: REPO_ROOT,
          env: { ...process.env, AGENT_SANDBOX_CONFIG: stackFile, AGENT_SANDBOX_JWT_SECRET: "" },
        },
      );
      const code = stdout.trim();
      const app = server({ registration: "invite" }, new InviteCodes(secret));
      const email = (n: string) => `invited-${n}-${run}@example.test`;
      const before = await counts();

      const none = await register(app, { email: email("none"), password });
      expect(none.statusCode).toBe(403);
      expect(none.json()).toMatchObject({
        error: "invite_required",
        message: expect.stringContaining("agent-sandbox:runtime.registration is invite"),
      });
      const forged = await register(app, {
        email: email("forged"),
        password,
        invite: code.replace(/.$/, (c) => (c === "A" ? "B" : "A")),
      });
      expect(forged.json()).toMatchObject({ error: "invalid_invite" });
      const otherKey = new InviteCodes(
        new TextEncoder().encode("another-secret-that-is-at-least-32-bytes"),
      ).mint(1);
      expect(
        (await register(app, { email: email("other"), password, invite: otherKey })).json(),
      ).toMatchObject({
        error: "invalid_invite",
      });
      const expired = new InviteCodes(secret, () => Date.now() - 3 * 86_400_000).mint(1);
      const late = await register(app, { email: email("late"), password, invite: expired });
      expect(late.statusCode).toBe(403);
      expect(late.json().message).toContain("expired");
      const malformed = await register(app, { email: email("malformed"), password, invite: "not a code" });
      expect(malformed.statusCode).toBe(400);
      expect(await counts()).toEqual(before);

      expect((await register(app, { email: email("first"), password, invite: code })).statusCode).toBe(201);
      const reused = await register(app, { email: email("second"), password, invite: code });
      expect(reused.statusCode).toBe(403);
      expect(reused.json()).toMatchObject({ error: "invite_used" });
      expect((await counts()).users).toBe(before.users + 1);
    });

    it("one invite sent twice at once makes one account", async () => {
      const invites = new InviteCodes(secret);
      const app = server({ registration: "invite" }, invites);
      const code = invites.mint();
      const statuses = (
        await Promise.all(
          ["a", "b", "c"].map((n, i) =>
            register(app, { email: `race-${n}-${run}@example.test`, password, invite: code }, `10.50.0.${i}`),
          ),
        )
      ).map((r) => r.statusCode);
      expect(statuses.sort()).toEqual([201, 403, 403]);
    });

    it("invite mode without an invite key is refused when the server is built, not at the first request", () => {
      expect(() => server({ registration: "invite" })).toThrow(
        /agent-sandbox:runtime.registration is invite/,
      );
    });
  });
});
