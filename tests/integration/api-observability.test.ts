// Structured JSON request logs keyed by request id, and GET /metrics in the Prometheus text format with
// the operation and queue gauges read from the database (PGlite; no engine needed: nothing is reconciled).
import { Writable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildServer } from "../../runtime/server.js";
import { StackConfig } from "../../stacks/config.js";
import { apiHarness, apiServer, emailOf, type ApiHarness } from "../helpers/api.js";
import { testDatabase } from "../helpers/postgres.js";

const lines: Record<string, unknown>[] = [];
const logStream = new Writable({
  write(chunk: Buffer, _encoding, done) {
    for (const line of chunk.toString("utf8").split("\n").filter(Boolean))
      lines.push(JSON.parse(line) as Record<string, unknown>);
    done();
  },
});

let h: ApiHarness<"o">;
let token: string;
let inFlight = 0;

beforeAll(async () => {
  const database = await testDatabase("pglite");
  const { dir } = database;
  h = await apiHarness({
    database,
    config: StackConfig.parse({ target: "local", host: { dataDir: dir, configDir: dir } }),
    users: ["o"],
    // No route below reaches a sandbox: the server has no engine.
    server: { logger: { level: "info", stream: logStream }, reconcilerInFlight: () => inFlight },
  });
  token = h.users.o.token;
});

afterAll(() => h?.close());

const logsOf = (requestId: string) => lines.filter((l) => l.reqId === requestId);

describe("request logs", () => {
  it("are JSON lines carrying the request id, which the response echoes; a sane caller id is kept", async () => {
    const response = await h.app.inject({
      method: "GET",
      url: "/projects",
      headers: { authorization: `Bearer ${token}`, "x-request-id": "trace-abc.123" },
    });
    expect(response.statusCode).toBe(200);
    expect(response.headers["x-request-id"]).toBe("trace-abc.123");
    const logged = logsOf("trace-abc.123");
    expect(logged.map((l) => l.msg)).toEqual(["request completed"]);
    expect(logged[0]).toMatchObject({
      level: 30,
      req: { method: "GET", url: "/projects" },
      route: "/projects",
      res: { statusCode: 200 },
      responseTime: expect.any(Number),
    });
  });

  it("an unusable caller id (too long, control characters, log injection) is replaced by a fresh uuid", async () => {
    for (const bad of ["x".repeat(200), 'a"b\\nfake', "line\nbreak", ""]) {
      const response = await h.app.inject({
        method: "GET",
        url: "/healthz",
        headers: { "x-request-id": bad.replace("\n", " ") },
      });
      const id = response.headers["x-request-id"] as string;
      expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-/);
      expect(logsOf(id)).toHaveLength(1);
    }
  });

  it("never contain passwords, tokens or the Authorization header", async () => {
    const secretPassword = "a password nobody should ever read in a log";
    await h.app.inject({
      method: "POST",
      url: "/auth/login",
      payload: { email: emailOf("o"), password: secretPassword },
      headers: { "x-request-id": "login-attempt" },
    });
    await h.app.inject({
      method: "GET",
      url: "/projects",
      headers: { authorization: `Bearer ${token}`, "x-request-id": "with-token" },
    });
    const everything = JSON.stringify(lines);
    expect(everything).not.toContain(secretPassword);
    expect(everything).not.toContain(token);
    expect(everything.toLowerCase()).not.toContain("bearer");
    expect(logsOf("login-attempt").at(-1)).toMatchObject({ res: { statusCode: 401 } });
  });

  it("an unexpected error is logged in full with the request id; the client gets only the id", async () => {
    const broken = buildServer({ prerequisites: [], logger: { level: "info", stream: logStream } });
    broken.get("/boom", async () => {
      throw new Error("secret internal detail");
    });
    const response = await broken.inject({
      method: "GET",
      url: "/boom",
      headers: { "x-request-id": "boom-1" },
    });
    expect(response.statusCode).toBe(500);
    expect(response.json()).toEqual({ error: "internal", message: "internal error", request_id: "boom-1" });
    expect(logsOf("boom-1").find((l) => l.msg === "unhandled error")).toMatchObject({
      level: 50,
      err: { message: "secret internal detail" },
    });
    await broken.close();
  });
});

/** The value of one sample, by its exact name and labels. */
function sample(text: string, series: string): number | undefined {
  const line = text.split("\n").find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

describe("GET /metrics", () => {
  it("counts requests by method, route pattern and status, with duration histograms", async () => {
    const before = await h.app.inject({ method: "GET", url: "/metrics" });
    expect(before.headers["content-type"]).toBe("text/plain; version=0.0.4; charset=utf-8");
    const series = 'agent_sandbox_http_requests_total{method="GET",route="/projects/:id",status="404"}';
    const count = sample(before.body, series) ?? 0;
    for (let i = 0; i < 3; i++)
      await h.app.inject({
        method: "GET",
        url: `/projects/${crypto.randomUUID()}`,
        headers: { authorization: `Bearer ${token}` },
      });
    await h.app.inject({ method: "GET", url: "/no/such/path/1" });
    await h.app.inject({ method: "GET", url: "/no/such/path/2" });
    const after = (await h.app.inject({ method: "GET", url: "/metrics" })).body;
    // Ids are not labels: all three land on the route's pattern.
    expect(sample(after, series)).toBe(count + 3);
    expect(
      sample(after, 'agent_sandbox_http_requests_total{method="GET",route="unmatched",status="404"}'),
    ).toBeGreaterThanOrEqual(2);
    expect(after).not.toContain("/no/such/path");
    const inf = sample(
      after,
      'agent_sandbox_http_request_duration_seconds_bucket{method="GET",route="/projects/:id",le="+Inf"}',
    );
    const total = sample(
      after,
      'agent_sandbox_http_request_duration_seconds_count{method="GET",route="/projects/:id"}',
    );
    expect(inf).toBe(total);
    expect(total).toBeGreaterThanOrEqual(3);
    // Buckets are cumulative.
    const buckets = after
      .split("\n")
      .filter((l) =>
        l.startsWith('agent_sandbox_http_request_duration_seconds_bucket{method="GET",route="/projects/:id"'),
      )
      .map((l) => Number(l.split(" ").at(-1)));
    expect(buckets).toEqual([...buckets].sort((a, b) => a - b));
  });

  it("reports operations by kind and state and the reconciler's queue depth, from the database", async () => {
    const empty = (await h.app.inject({ method: "GET", url: "/metrics" })).body;
    expect(sample(empty, "agent_sandbox_reconciler_queue_depth")).toBe(0);
    expect(sample(empty, 'agent_sandbox_operations{kind="create",state="pending"}')).toBe(0);
    // Two creates recorded and nobody reconciling: both wait in the queue.
    for (const name of ["one", "two"])
      expect(
        (
          await h.app.inject({
            method: "POST",
            url: "/projects",
            payload: { name },
            headers: { authorization: `Bearer ${token}` },
          })
        ).statusCode,
      ).toBe(202);
    inFlight = 3;
    const queued = (await h.app.inject({ method: "GET", url: "/metrics" })).body;
    expect(sample(queued, "agent_sandbox_reconciler_queue_depth")).toBe(2);
    expect(sample(queued, 'agent_sandbox_operations{kind="create",state="pending"}')).toBe(2);
    expect(sample(queued, 'agent_sandbox_projects{state="creating"}')).toBe(2);
    expect(sample(queued, "agent_sandbox_reconciler_in_flight")).toBe(3);
    expect(sample(queued, "agent_sandbox_reconciler_queue_oldest_seconds")).toBeGreaterThanOrEqual(0);
    // Every line is a comment or `name{labels} value`.
    for (const line of queued.trim().split("\n"))
      expect(line).toMatch(/^(# (HELP|TYPE) \w+ .+|\w+(\{[^}]*\})? -?[0-9.e+-]+|\w+(\{[^}]*\})? \+?Inf)$/);
  });

  it("answers 503 with a clear message while the database is down; the service keeps serving", async () => {
    // A database closed under a running server stands for the database going away.
    const down = await testDatabase("pglite");
    const server = apiServer({ db: down.db });
    await down.db.close();
    const response = await server.inject({ method: "GET", url: "/metrics" });
    expect(response.statusCode).toBe(503);
    expect(response.json()).toEqual({
      error: "unavailable",
      message: "the database is unavailable; try again shortly",
    });
    // The process is still serving.
    expect((await server.inject({ method: "GET", url: "/openapi.json" })).statusCode).toBe(200);
    await server.close();
    await down.close();
  });
});
