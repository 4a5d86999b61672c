// The operator's view (issue 14): /admin/* answers 404 to everyone but the configured operators; an
// operator sees every user's projects with owner, status, drift and last operation, the queue, cancels a
// waiting operation (a finished one is a 409), clears a stalled project, and runs a job now (that a job asked
// twice runs once is tests/integration/jobs.test.ts's). The API on a real database; no reconciler, so the
// operations stay in the queue.
import { mkdtempSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import type { FastifyInstance } from "fastify";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { dockerClient } from "../../lib/docker-client.js";
import { Auth, DEFAULT_AUTH } from "../../runtime/api/auth.js";
import { openDatabase, type Database } from "../../runtime/store/db.js";
import { driftSweepJob } from "../../runtime/jobs/drift.js";
import { sandboxRevivalJob } from "../../runtime/jobs/revive.js";
import { platformBackends } from "../../runtime/backends/registry.js";
import { JobScheduler } from "../../runtime/jobs/scheduler.js";
import { migrate } from "../../runtime/store/migrations.js";
import { SecretBox } from "../../runtime/secrets.js";
import { buildServer } from "../../runtime/server.js";
import { tenantDefaults } from "../../runtime/tenants/config.js";
import { StackConfig } from "../../stacks/config.js";
import { recordDriftFailure } from "../../runtime/store/drift.js";

const run = Date.now();
const emails = { operator: `operator-${run}@example.test`, alice: `alice-${run}@example.test` };
const tokens = { operator: "", alice: "" };
const projects: string[] = [];
let db: Database;
let app: FastifyInstance;

const as = (who: keyof typeof tokens, method: "GET" | "POST", url: string) =>
  app.inject({ method, url, headers: { authorization: `Bearer ${tokens[who]}` } });

beforeAll(async () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), "admin-"));
  db = await openDatabase({ dataDir: path.join(dir, "db") });
  await migrate(db);
  const config = StackConfig.parse({
    target: "local",
    host: { dataDir: dir, configDir: dir },
    tenants: { subnetPool: "10.239.8.0/22", sshPortRange: [27460, 27470] },
  });
  app = buildServer({
    prerequisites: [],
    logger: false,
    auth: new Auth(db, {
      ...DEFAULT_AUTH,
      secret: new TextEncoder().encode("a-test-signing-key-that-is-at-least-32-bytes"),
    }),
    admins: [emails.operator.toUpperCase()], // matched whatever the case
    jobs: new JobScheduler(db, [
      driftSweepJob(db, 3_600_000),
      sandboxRevivalJob(db, platformBackends({ docker: dockerClient }), 3_600_000),
    ]),
    projects: {
      db,
      defaults: tenantDefaults(config),
      secrets: SecretBox.fromDataDir(dir),
      publicHost: "127.0.0.1",
      docker: dockerClient(),
    },
  });
  for (const who of ["operator", "alice"] as const) {
    const credentials = { email: emails[who], password: "correct horse battery staple" };
    await app.inject({ method: "POST", url: "/auth/register", payload: credentials });
    tokens[who] = (
      await app.inject({ method: "POST", url: "/auth/login", payload: credentials })
    ).json().access_token;
  }
  for (const name of ["one", "two"]) {
    const created = await app.inject({
      method: "POST",
      url: "/projects",
      payload: { name },
      headers: { authorization: `Bearer ${tokens.alice}` },
    });
    expect(created.statusCode, created.body).toBe(202);
    projects.push(created.json().project_id);
  }
});

afterAll(async () => {
  await app?.close();
  await db?.close();
});

describe("/admin", () => {
  it("is a 404 for anyone but an operator, and a 401 without a token", async () => {
    const operation = (await as("alice", "GET", `/projects/${projects[0]}`)).json().operation.id;
    const routes: ["GET" | "POST", string][] = [
      ["GET", "/admin/projects"],
      ["GET", "/admin/operations"],
      ["GET", "/admin/jobs"],
      ["POST", `/admin/operations/${operation}/cancel`],
      ["POST", `/admin/projects/${projects[0]}/unstall`],
      ["POST", "/admin/jobs/drift-sweep/run"],
    ];
    for (const [method, url] of routes) {
      const refused = await as("alice", method, url);
      expect({ url, status: refused.statusCode, error: refused.json().error }).toEqual({
        url,
        status: 404,
        error: "not_found",
      });
      expect((await app.inject({ method, url })).statusCode, url).toBe(401);
    }
    // Nothing was done on her behalf: her operation still waits.
    expect((await as("alice", "GET", `/projects/${projects[0]}`)).json().operation.state).toBe("pending");
  });

  it("an operator sees every project with its owner, and the queue", async () => {
    const listed = (await as("operator", "GET", "/admin/projects")).json().projects;
    expect(listed).toEqual(
      projects.map((id) =>
        expect.objectContaining({
          project_id: id,
          owner: emails.alice,
          status: "creating",
          program_version: null, // not applied yet
          drift: null,
          operation: expect.objectContaining({ kind: "create", state: "pending" }),
        }),
      ),
    );
    const queue = (await as("operator", "GET", "/admin/operations")).json().operations;
    expect(queue.map((o: { project_id: string; kind: string }) => [o.project_id, o.kind])).toEqual(
      projects.map((id) => [id, "create"]),
    );
  });

  it("cancels a waiting operation; a finished one is a 409; a bad or unknown id is a 400 or 404", async () => {
    const operation = (await as("alice", "GET", `/projects/${projects[1]}`)).json().operation.id;
    const cancelled = await as("operator", "POST", `/admin/operations/${operation}/cancel`);
    expect(cancelled.statusCode).toBe(202);
    expect(cancelled.json()).toEqual({ id: operation, state: "cancelled", cancel_requested: true });
    expect((await as("alice", "GET", `/projects/${projects[1]}`)).json().operation.state).toBe("cancelled");
    await db.query("update operations set state = 'succeeded' where id = $1", [
      (await as("alice", "GET", `/projects/${projects[0]}`)).json().operation.id,
    ]);
    const finished = await as(
      "operator",
      "POST",
      `/admin/operations/${(await as("alice", "GET", `/projects/${projects[0]}`)).json().operation.id}/cancel`,
    );
    expect(finished.statusCode).toBe(409);
    expect(finished.json().message).toBe("the operation has already succeeded");
    expect((await as("operator", "POST", "/admin/operations/not-an-id/cancel")).json().details).toEqual([
      expect.objectContaining({ field: "operationId" }),
    ]);
    expect((await as("operator", "POST", `/admin/operations/${crypto.randomUUID()}/cancel`)).statusCode).toBe(
      404,
    );
  });

  it("clears a stalled project, so that sweeps check it again", async () => {
    await db.query("update tenants set state = 'running' where project_id = $1", [projects[0]]);
    for (let i = 0; i < 2; i++) await recordDriftFailure(db, projects[0]!, "corrupt state", 2);
    expect((await as("alice", "GET", `/projects/${projects[0]}/drift`)).json()).toMatchObject({
      status: "failed",
      stalled: true,
    });
    const sweep = await as("operator", "POST", "/admin/jobs/drift-sweep/run");
    expect(sweep.json()).toMatchObject({
      job: "drift-sweep",
      ran: true,
      outcome: "succeeded",
      detail: { enqueued: 0 },
    });
    const cleared = await as("operator", "POST", `/admin/projects/${projects[0]}/unstall`);
    expect(cleared.json()).toEqual({ project_id: projects[0], stalled: false });
    expect((await as("alice", "GET", `/projects/${projects[0]}/drift`)).json()).toMatchObject({
      stalled: false,
    });
    expect((await as("operator", "POST", "/admin/jobs/drift-sweep/run")).json().detail).toEqual({
      enqueued: 1,
    });
    // Both runs are in the job's record, as operators see it.
    const jobs = (await as("operator", "GET", "/admin/jobs")).json().jobs;
    expect(jobs).toEqual([
      expect.objectContaining({
        job: "drift-sweep",
        runs: 2,
        failures: 0,
        last_outcome: "succeeded",
        last_detail: { enqueued: 1 },
        last_duration_ms: expect.any(Number),
        last_finished_at: expect.stringMatching(/^\d{4}-\d\d-\d\dT/),
      }),
    ]);
  });

  it("an unknown job is refused naming the field; one this runtime does not run, by name", async () => {
    const unknown = await as("operator", "POST", "/admin/jobs/everything/run");
    expect(unknown.statusCode).toBe(400);
    expect(unknown.json().details).toEqual([expect.objectContaining({ field: "job" })]);
    const unconfigured = await as("operator", "POST", "/admin/jobs/idle-shutdown/run");
    expect(unconfigured.statusCode).toBe(404);
    expect(unconfigured.json().message).toBe("this runtime does not run the job idle-shutdown");
  });

  it("an operator runs the sandbox revival now (after a Docker restart, say) instead of waiting for it", async () => {
    const revival = await as("operator", "POST", "/admin/jobs/sandbox-revival/run");
    expect(revival.statusCode, revival.body).toBe(200);
    // No sandbox of this file has a container (there is no reconciler here): nothing exited, nothing revived.
    expect(revival.json()).toMatchObject({ job: "sandbox-revival", ran: true, outcome: "succeeded" });
    expect(revival.json().detail.revived).toEqual([]);
  });
});
