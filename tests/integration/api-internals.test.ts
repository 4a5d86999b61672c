// The runtime's internals are not public (issue 15): /healthz tells anyone ready or not, and its checks
// (versions, paths, addresses) only to a caller on the runtime's own host, an operator or the holder of
// the metrics token; /metrics answers only those three. Requests come "from" the addresses a socket would
// show (Fastify inject's remoteAddress); a loopback request that a proxy relayed is not local.
import type { FastifyInstance } from "fastify";
import { SignJWT } from "jose";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DEFAULT_AUTH } from "../../runtime/api/auth.js";
import { databasePrerequisite } from "../../runtime/health.js";
import { apiHarness, emailOf, TEST_SECRET, type ApiHarness } from "../helpers/api.js";
import { testDatabase } from "../helpers/postgres.js";

const METRICS_TOKEN = "a-metrics-token-for-this-test-only-0123456789";
const REMOTE = "203.0.113.7";

let h: ApiHarness<"operator" | "user">;
let app: FastifyInstance;

beforeAll(async () => {
  const database = await testDatabase("pglite");
  h = await apiHarness({
    database,
    users: ["operator", "user"],
    server: {
      prerequisites: [databasePrerequisite(database.db)],
      admins: [emailOf("operator")],
      metricsToken: METRICS_TOKEN,
    },
  });
  app = h.app;
});

afterAll(() => h?.close());

const get = (url: string, from: string, headers: Record<string, string> = {}) =>
  app.inject({ method: "GET", url, remoteAddress: from, headers });
const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

describe("GET /healthz", () => {
  it("tells anyone elsewhere only whether the runtime is ready", async () => {
    const response = await get("/healthz", REMOTE);
    expect(response.statusCode).toBe(200);
    expect(response.json()).toEqual({ status: "ready" });
    // A signed-in user who is not an operator learns no more.
    expect((await get("/healthz", REMOTE, bearer(h.users.user.token))).json()).toEqual({ status: "ready" });
  });

  it.each([
    ["a caller on this host (IPv4)", "127.0.0.1", {}],
    ["a caller on this host (IPv6)", "::1", {}],
    ["a caller on this host (IPv4-mapped)", "::ffff:127.0.0.1", {}],
    ["an operator, from elsewhere", REMOTE, "operator"],
    ["the metrics token, from elsewhere", REMOTE, "metrics"],
  ] as const)("gives %s every check with its detail", async (_who, from, credential) => {
    const headers =
      credential === "operator"
        ? bearer(h.users.operator.token)
        : credential === "metrics"
          ? bearer(METRICS_TOKEN)
          : {};
    const response = await get("/healthz", from, headers);
    expect(response.statusCode).toBe(200);
    expect(response.json()).toEqual({
      status: "ready",
      checks: [{ name: "database", ready: true, detail: expect.stringMatching(/^pglite \(\//) }],
    });
  });

  it("a loopback request a proxy relayed (Forwarded, X-Forwarded-For, X-Real-IP) is not local", async () => {
    for (const relayed of [
      { forwarded: "for=203.0.113.9" } as Record<string, string>,
      { "x-forwarded-for": "203.0.113.9" },
      { "x-real-ip": "203.0.113.9" },
    ])
      expect((await get("/healthz", "127.0.0.1", relayed)).json(), JSON.stringify(relayed)).toEqual({
        status: "ready",
      });
  });

  it("an Authorization that is neither an access token nor the metrics token is a 401 saying so", async () => {
    const wrong = await get("/healthz", REMOTE, bearer("not-the-metrics-token-and-not-a-jwt-either"));
    expect(wrong.statusCode).toBe(401);
    expect(wrong.json()).toEqual({
      error: "unauthorized",
      message: "access token is not valid, and not the metrics token",
    });
    const expired = await new SignJWT({})
      .setProtectedHeader({ alg: "HS256", typ: "at+jwt" })
      .setSubject(h.users.operator.id)
      .setIssuer(DEFAULT_AUTH.issuer)
      .setAudience(DEFAULT_AUTH.audience)
      .setIssuedAt(Math.floor(Date.now() / 1000) - 3600)
      .setExpirationTime(Math.floor(Date.now() / 1000) - 60)
      .sign(TEST_SECRET);
    const late = await get("/healthz", REMOTE, bearer(expired));
    expect(late.statusCode).toBe(401);
    expect(late.json().message).toBe("access token expired, and not the metrics token");
    const basic = await get("/healthz", "127.0.0.1", { authorization: "Basic YTpi" });
    expect(basic.statusCode).toBe(401);
    expect(basic.json().message).toMatch(/^missing or malformed Authorization: Bearer header/);
  });

  it("not ready is 503 to everyone; only the checks say which prerequisite and why", async () => {
    const down = await apiHarness({
      database: await testDatabase("pglite"),
      server: {
        prerequisites: [
          {
            name: "squid",
            probe: async () => ({ name: "squid", ready: false, detail: "not running (/run/x.pid)" }),
          },
        ],
      },
    });
    const remote = await down.app.inject({ method: "GET", url: "/healthz", remoteAddress: REMOTE });
    expect([remote.statusCode, remote.json()]).toEqual([503, { status: "not ready" }]);
    const local = await down.app.inject({ method: "GET", url: "/healthz", remoteAddress: "127.0.0.1" });
    expect([local.statusCode, local.json()]).toEqual([
      503,
      { status: "not ready", checks: [{ name: "squid", ready: false, detail: "not running (/run/x.pid)" }] },
    ]);
    await down.close();
  });

  it("with the database down, an operator's token cannot be checked: the answer is the public one, not an error", async () => {
    const database = await testDatabase("pglite");
    const down = await apiHarness({
      database,
      users: ["operator"],
      server: { prerequisites: [databasePrerequisite(database.db)], admins: [emailOf("operator")] },
    });
    await database.db.close();
    const remote = await down.app.inject({
      method: "GET",
      url: "/healthz",
      remoteAddress: REMOTE,
      headers: bearer(down.users.operator.token),
    });
    expect([remote.statusCode, remote.json()]).toEqual([503, { status: "not ready" }]);
    const local = await down.app.inject({ method: "GET", url: "/healthz", remoteAddress: "127.0.0.1" });
    expect(local.statusCode).toBe(503);
    expect(local.json().checks).toEqual([expect.objectContaining({ name: "database", ready: false })]);
    await down.close();
  });
});

describe("GET /metrics", () => {
  it("refuses anyone elsewhere without a credential: 401 naming what it needs", async () => {
    const response = await get("/metrics", REMOTE);
    expect(response.statusCode).toBe(401);
    expect(response.json()).toEqual({
      error: "unauthorized",
      message:
        "GET /metrics needs the metrics token or an operator's access token (Authorization: Bearer ...), or a request from this host",
    });
    expect(response.body).not.toContain("agent_sandbox_");
    const relayed = await get("/metrics", "127.0.0.1", { "x-forwarded-for": REMOTE });
    expect(relayed.statusCode).toBe(401);
  });

  it("refuses a signed-in user who is not an operator: 403 naming the key", async () => {
    const response = await get("/metrics", REMOTE, bearer(h.users.user.token));
    expect(response.statusCode).toBe(403);
    expect(response.json()).toEqual({
      error: "forbidden",
      message: "metrics are for operators (agent-sandbox:runtime.admins) and the holder of the metrics token",
    });
  });

  it("refuses a wrong metrics token (401), one character off included", async () => {
    for (const token of [`${METRICS_TOKEN}x`, METRICS_TOKEN.slice(0, -1), METRICS_TOKEN.toUpperCase()]) {
      const response = await get("/metrics", REMOTE, bearer(token));
      expect(response.statusCode, token).toBe(401);
      expect(response.json().message).toMatch(/, and not the metrics token$/);
    }
  });

  it.each([
    ["the metrics token", REMOTE, () => bearer(METRICS_TOKEN)],
    ["an operator", REMOTE, () => bearer(h.users.operator.token)],
    ["a caller on this host", "127.0.0.1", () => ({})],
  ] as const)("answers %s", async (_who, from, headers) => {
    const response = await get("/metrics", from, headers());
    expect(response.statusCode, response.body).toBe(200);
    expect(response.headers["content-type"]).toBe("text/plain; version=0.0.4; charset=utf-8");
    expect(response.body).toMatch(/^agent_sandbox_reconciler_queue_depth 0$/m);
  });
});
