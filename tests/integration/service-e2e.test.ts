// The runtime service as `npm run local` runs it (a real process: API + reconciler in one), driven over
// HTTP: register → login → create (answered running) → stop → start → delete, on PGlite and on Postgres.
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { waitFor } from "../../lib/process.js";
import { startRuntime, type RuntimeProcess } from "../helpers/api.js";
import { testPlatform, type TestPlatform } from "../helpers/host.js";
import { DATABASE_KINDS, testDatabase, type TestDatabase } from "../helpers/postgres.js";

let platform: TestPlatform;

beforeAll(async () => {
  platform = await testPlatform({});
}, 900_000);

afterAll(() => platform?.stop(), 120_000);

describe.each(DATABASE_KINDS)("the runtime service on %s", (kind) => {
  let service: RuntimeProcess | undefined;
  let database: TestDatabase | undefined;
  let token: string;
  let projectId: string;

  const api = async (method: string, url: string, body?: unknown, auth = true) => {
    const response = await fetch(`${service!.base}${url}`, {
      method,
      headers: { "content-type": "application/json", ...(auth ? { authorization: `Bearer ${token}` } : {}) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await response.text();
    return { status: response.status, body: text ? JSON.parse(text) : undefined };
  };
  const until = (status: string) =>
    waitFor(`project to be ${status}`, 240_000, async () => {
      const response = await api("GET", `/projects/${projectId}`);
      const current = response.status === 404 ? "gone" : response.body.status;
      if (current === "error") throw new Error(`project failed: ${JSON.stringify(response.body)}`);
      return current === status ? true : undefined;
    });

  beforeAll(async () => {
    const { host, tenants } = platform.config;
    // The runtime makes PGlite in its data directory; on Postgres, an empty database of the test's own
    // (the runtime migrates it).
    if (kind === "postgres") database = await testDatabase(kind, { under: host.dataDir, migrate: false });
    service = await startRuntime(
      `service-${kind}`,
      {
        host: { ...host, dataDir: path.join(host.dataDir, `service-${kind}`) },
        tenants: {
          image: tenants.image,
          subnetPool: kind === "pglite" ? "10.226.0.0/23" : "10.226.2.0/23",
          sshPortRange: kind === "pglite" ? [28900, 28920] : [28950, 28970],
          leaseSeconds: 10,
        },
      },
      // The create waits for the sandbox (30 s by default); here long enough for a busy machine.
      { databaseUrl: database?.url, runtime: { createWaitSeconds: 120 } },
    );
  });

  afterAll(async () => {
    await service?.stop();
    await database?.close();
  });

  it(
    "register → login → create (answered running) → stop → start → delete",
    { timeout: 600_000 },
    async () => {
      const email = `e2e-${kind}-${Date.now()}@example.test`;
      const password = "correct horse battery staple";
      expect((await api("POST", "/auth/register", { email, password }, false)).status).toBe(201);
      const login = await api("POST", "/auth/login", { email, password }, false);
      expect(login.status).toBe(200);
      token = login.body.access_token;

      // Seed 000's answer: the sandbox runs by the time the create answers.
      const created = await api("POST", "/projects", { name: "end to end" });
      expect(created.status, JSON.stringify(created.body)).toBe(201);
      expect(created.body).toMatchObject({
        status: "running",
        ssh: { user: "agent", private_key: expect.stringContaining("PRIVATE KEY") },
        terminal_url: expect.stringMatching(/^ws:\/\/127\.0\.0\.1:\d+\/terminal\//),
        operation: { kind: "create", state: "succeeded" },
      });
      projectId = created.body.project_id;

      expect((await api("POST", `/projects/${projectId}/stop`)).status).toBe(202);
      await until("stopped");
      expect((await api("POST", `/projects/${projectId}/start`)).status).toBe(202);
      await until("running");

      expect((await api("DELETE", `/projects/${projectId}`)).status).toBe(202);
      await until("gone");
      expect((await api("GET", "/projects")).body).toEqual({ projects: [] });
    },
  );
});
