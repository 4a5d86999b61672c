// API keys (POST/GET/DELETE /auth/api-keys) in-process, on PGlite and on Postgres: a key made by a session
// opens every route a session's access token opens (as `X-API-Key` or as a bearer), with the owner scoping
// unchanged; it is shown once, listed without its secret, refused once revoked or expired, and cannot make
// more keys; `sbx api-key` makes, lists and revokes them.
import type { FastifyInstance } from "fastify";
import { randomUUID } from "node:crypto";
import * as fs from "node:fs/promises";
import type { AddressInfo } from "node:net";
import * as os from "node:os";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Database } from "../../runtime/store/db.js";
import { apiHarness, emailOf, PASSWORD, type ApiHarness } from "../helpers/api.js";
import { DATABASE_KINDS, testDatabase } from "../helpers/postgres.js";
import { sbx } from "../helpers/sbx.js";

describe.each(DATABASE_KINDS)("API keys on %s", (kind) => {
  let h: ApiHarness<"alice" | "bob">;
  let db: Database;
  let app: FastifyInstance;
  let aliceKey: { id: string; key: string };
  let bobProject: string;

  const withHeaders = (
    method: "GET" | "POST" | "DELETE",
    url: string,
    headers: Record<string, string>,
    payload?: object,
  ) => app.inject({ method, url, headers, ...(payload ? { payload } : {}) });
  const make = async (who: "alice" | "bob", body: object) => {
    const response = await h.as(who, "POST", "/auth/api-keys", body);
    expect(response.statusCode, response.body).toBe(201);
    return response.json() as {
      id: string;
      key: string;
      name: string;
      prefix: string;
      expires_at: string | null;
    };
  };

  beforeAll(async () => {
    h = await apiHarness({ database: await testDatabase(kind), users: ["alice", "bob"] });
    ({ db, app } = h);
    aliceKey = await make("alice", { name: "ci" });
    // A project of bob's, recorded as the create route would leave it (no sandbox is needed to ask for it).
    bobProject = randomUUID();
    await db.query(
      "insert into tenants (project_id, owner_id, spec, state) values ($1, $2, '{}', 'running')",
      [bobProject, h.users.bob.id],
    );
    await db.query("insert into projects (id, user_id, name, ssh_private_key) values ($1, $2, 'bobs', 'x')", [
      bobProject,
      h.users.bob.id,
    ]);
  });

  afterAll(() => h?.close());

  it("is shown once, recognisable by its prefix, and listed without its secret", async () => {
    expect(aliceKey.key).toMatch(/^sbx_[A-Za-z0-9_-]{43}$/);
    const listed = await h.as("alice", "GET", "/auth/api-keys");
    expect(listed.statusCode).toBe(200);
    const keys = (listed.json() as { api_keys: Record<string, unknown>[] }).api_keys;
    expect(keys).toEqual([
      {
        id: aliceKey.id,
        name: "ci",
        prefix: aliceKey.key.slice(0, 12),
        created_at: expect.any(String),
        expires_at: null,
        last_used_at: null,
      },
    ]);
    expect(listed.body).not.toContain(aliceKey.key);
    // Stored as its hash only.
    const { rows } = await db.query<{ key_hash: string }>("select key_hash from api_keys where id = $1", [
      aliceKey.id,
    ]);
    expect(rows[0]!.key_hash).not.toContain(aliceKey.key.slice(4));
    expect(rows[0]!.key_hash).toMatch(/^[0-9a-f]{64}$/);
  });

  it.each([
    ["X-API-Key", (key: string) => ({ "x-api-key": key })],
    ["Authorization: Bearer", (key: string) => ({ authorization: `Bearer ${key}` })],
  ])("opens what a session opens, sent as %s, and marks the key used", async (_, header) => {
    const me = await withHeaders("GET", "/auth/me", header(aliceKey.key));
    expect(me.statusCode, me.body).toBe(200);
    expect(me.json()).toEqual({ user_id: h.users.alice.id });
    const projects = await withHeaders("GET", "/projects", header(aliceKey.key));
    expect(projects.statusCode, projects.body).toBe(200);
    const listed = (await h.as("alice", "GET", "/auth/api-keys")).json() as {
      api_keys: { last_used_at: string }[];
    };
    expect(listed.api_keys[0]!.last_used_at).not.toBeNull();
  });

  it("keeps the owner scoping: another user's project is 404, the owner's own key sees it", async () => {
    const bobKey = await make("bob", { name: "bob's" });
    const asAlice = await withHeaders("GET", `/projects/${bobProject}`, { "x-api-key": aliceKey.key });
    expect(asAlice.statusCode).toBe(404);
    expect(asAlice.json()).toMatchObject({ error: "not_found" });
    const listAlice = (await withHeaders("GET", "/projects", { "x-api-key": aliceKey.key })).json() as {
      projects: { project_id: string }[];
    };
    expect(listAlice.projects.map((p) => p.project_id)).not.toContain(bobProject);
    const listBob = (await withHeaders("GET", "/projects", { "x-api-key": bobKey.key })).json() as {
      projects: { project_id: string }[];
    };
    expect(listBob.projects.map((p) => p.project_id)).toContain(bobProject);
    // Nor can alice revoke bob's key.
    const revoke = await h.as("alice", "DELETE", `/auth/api-keys/${bobKey.id}`);
    expect(revoke.statusCode).toBe(404);
    expect((await withHeaders("GET", "/auth/me", { "x-api-key": bobKey.key })).statusCode).toBe(200);
  });

  it("cannot make keys itself (a leaked key must not outlive its revocation): 403 naming why", async () => {
    const response = await withHeaders(
      "POST",
      "/auth/api-keys",
      { "x-api-key": aliceKey.key },
      { name: "more" },
    );
    expect(response.statusCode).toBe(403);
    expect(response.json()).toMatchObject({ error: "session_required" });
    expect(response.json().message).toMatch(/signed-in session's access token, not an API key/);
  });

  it.each([
    [{ "x-api-key": "sbx_short" }, /X-API-Key is not an API key/],
    [
      { "x-api-key": `sbx_${"A".repeat(43)}` },
      /X-API-Key is not a valid API key \(unknown, revoked or expired\)/,
    ],
    [{ authorization: `Bearer sbx_${"B".repeat(43)}` }, /bearer API key is not a valid API key/],
    [{ "x-api-key": "nonsense" }, /X-API-Key is not an API key/],
  ])("refuses %o with 401 naming what was wrong", async (headers, message) => {
    const response = await withHeaders("GET", "/auth/me", headers);
    expect(response.statusCode).toBe(401);
    expect(response.json()).toMatchObject({ error: "unauthorized", message: expect.stringMatching(message) });
  });

  it("refuses two credentials at once rather than picking one", async () => {
    const response = await withHeaders("GET", "/auth/me", {
      "x-api-key": aliceKey.key,
      authorization: `Bearer ${h.users.bob.token}`,
    });
    expect(response.statusCode).toBe(401);
    expect(response.json().message).toMatch(/send one credential/);
  });

  it("takes effect at once when revoked: the next request is refused, and the list no longer has it", async () => {
    const key = await make("alice", { name: "short-lived" });
    expect((await withHeaders("GET", "/auth/me", { "x-api-key": key.key })).statusCode).toBe(200);
    const revoked = await h.as("alice", "DELETE", `/auth/api-keys/${key.id}`);
    expect(revoked.statusCode).toBe(204);
    const after = await withHeaders("GET", "/auth/me", { "x-api-key": key.key });
    expect(after.statusCode).toBe(401);
    expect(after.json().message).toMatch(/unknown, revoked or expired/);
    const ids = ((await h.as("alice", "GET", "/auth/api-keys")).json() as { api_keys: { id: string }[] })
      .api_keys;
    expect(ids.map((k) => k.id)).not.toContain(key.id);
    expect((await h.as("alice", "DELETE", `/auth/api-keys/${key.id}`)).statusCode).toBe(404);
  });

  it("expires after expires_in_days (its expiry recorded; refused once it passes)", async () => {
    const key = await make("alice", { name: "week", expires_in_days: 7 });
    const days = (Date.parse(key.expires_at!) - Date.now()) / 86_400_000;
    expect(days).toBeGreaterThan(6.99);
    expect(days).toBeLessThan(7.01);
    expect((await withHeaders("GET", "/auth/me", { "x-api-key": key.key })).statusCode).toBe(200);
    await db.query("update api_keys set expires_at = now() - interval '1 second' where id = $1", [key.id]);
    expect((await withHeaders("GET", "/auth/me", { "x-api-key": key.key })).statusCode).toBe(401);
  });

  it("stops working with its account", async () => {
    const bobKey = await make("bob", { name: "until deleted" });
    await db.query("update users set deleted_at = now() where id = $1", [h.users.bob.id]);
    try {
      expect((await withHeaders("GET", "/auth/me", { "x-api-key": bobKey.key })).statusCode).toBe(401);
    } finally {
      await db.query("update users set deleted_at = null where id = $1", [h.users.bob.id]);
    }
  });

  it.each([
    [{}, /name/],
    [{ name: "" }, /name/],
    [{ name: "x\u0000" }, /must not contain control characters/],
    [{ name: "   " }, /must not be blank/],
    [{ name: "x", expires_in_days: 0 }, /expires_in_days/],
    [{ name: "x", expires_in_days: 3651 }, /expires_in_days/],
    [{ name: "x", extra: 1 }, /extra/],
  ])("refuses the body %o with 400 naming the field", async (body, field) => {
    const response = await h.as("alice", "POST", "/auth/api-keys", body);
    expect(response.statusCode).toBe(400);
    expect(response.body).toMatch(field);
  });

  it("refuses a malformed key id with 400 and an unknown one with 404", async () => {
    expect((await h.as("alice", "DELETE", "/auth/api-keys/not-a-uuid")).statusCode).toBe(400);
    expect((await h.as("alice", "DELETE", `/auth/api-keys/${randomUUID()}`)).statusCode).toBe(404);
  });
});

describe("sbx api-key", () => {
  let h: ApiHarness<"carol">;
  let base: string;
  let home: string;

  beforeAll(async () => {
    h = await apiHarness({ database: await testDatabase("pglite"), users: ["carol"] });
    await h.app.listen({ host: "127.0.0.1", port: 0 });
    base = `http://127.0.0.1:${(h.app.server.address() as AddressInfo).port}`;
    home = await fs.mkdtemp(path.join(os.tmpdir(), "sbx-api-key-"));
    const login = await sbx(
      home,
      home,
      ["login", "--api", base, "--email", emailOf("carol"), "--password-stdin"],
      {
        input: `${PASSWORD}\n`,
      },
    );
    expect(login.code, login.stderr).toBe(0);
  });

  afterAll(async () => {
    await h?.close();
    if (home) await fs.rm(home, { recursive: true, force: true });
  });

  it("creates a key (printed once), lists it by its prefix, and revokes it", async () => {
    const created = await sbx(home, home, ["api-key", "create", "laptop-agent", "--expires-in-days", "30"]);
    expect(created.code, created.stderr).toBe(0);
    const key = created.stdout.split("\n")[0]!;
    expect(key).toMatch(/^sbx_[A-Za-z0-9_-]{43}$/);
    expect(created.stdout).toMatch(/"laptop-agent", expires \d{4}-\d\d-\d\d: shown this once/);
    const me = await h.app.inject({ method: "GET", url: "/auth/me", headers: { "x-api-key": key } });
    expect(me.json()).toEqual({ user_id: h.users.carol.id });

    const listed = await sbx(home, home, ["api-key", "list", "--json"]);
    expect(listed.code, listed.stderr).toBe(0);
    const [only] = listed.json<{ api_keys: { id: string; prefix: string; name: string }[] }>().api_keys;
    expect(only).toMatchObject({ name: "laptop-agent", prefix: key.slice(0, 12) });
    expect(listed.stdout).not.toContain(key);
    const text = await sbx(home, home, ["api-key", "list"]);
    expect(text.stdout).toContain(`${key.slice(0, 12)}…  laptop-agent`);

    const revoked = await sbx(home, home, ["api-key", "revoke", only!.id]);
    expect(revoked.code, revoked.stderr).toBe(0);
    expect(
      (await h.app.inject({ method: "GET", url: "/auth/me", headers: { "x-api-key": key } })).statusCode,
    ).toBe(401);
    const again = await sbx(home, home, ["api-key", "revoke", only!.id]);
    expect(again.code).toBe(4);
    expect(again.stderr).toMatch(/404 API key not found/);
  });

  it("refuses bad input before asking the runtime: a days value that is not a whole number (exit 2)", async () => {
    const bad = await sbx(home, home, ["api-key", "create", "x", "--expires-in-days", "soon"]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/must be a whole number of days/);
    const tooLong = await sbx(home, home, ["api-key", "create", "x", "--expires-in-days", "99999"]);
    expect(tooLong.code).toBe(5);
    expect(tooLong.stderr).toMatch(/expires_in_days/);
  });
});
