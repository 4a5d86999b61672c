// The project API with the real reconciler behind it, on PGlite and on Postgres: register → login →
// create → running (and SSH in with the returned key) → stop → start → delete; scoping by user.
import { execFile } from "node:child_process";
import { promises as fs } from "node:fs";
import * as path from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { waitFor } from "../../lib/process.js";
import { apiHarness, type ApiHarness } from "../helpers/api.js";
import { sshOptions } from "../helpers/containers.js";
import { testPlatform, type TestPlatform } from "../helpers/host.js";
import { DATABASE_KINDS, testDatabase } from "../helpers/postgres.js";

const exec = promisify(execFile);
let platform: TestPlatform;

beforeAll(async () => {
  platform = await testPlatform({
    subnetPool: "10.236.0.0/22",
    sshPortRange: [27200, 27240],
    leaseSeconds: 10,
  });
}, 900_000);

afterAll(() => platform?.stop(), 120_000);

describe.each(DATABASE_KINDS)("project API on %s", (kind) => {
  let h: ApiHarness<"alice" | "bob">;
  let projectId: string;
  let privateKey: string;
  let sshPort: number;
  const run = `${kind}-${Date.now()}`;
  const until = (id: string, status: string) => h.waitForStatus("alice", id, status, 240_000);

  beforeAll(async () => {
    h = await apiHarness({
      database: await testDatabase(kind, { under: platform.config.host.dataDir }),
      config: platform.config,
      users: ["alice", "bob"],
      reconciler: true,
    });
  });

  afterAll(() => h?.close());

  it("refuses requests without a valid token (401) and bad input (400 naming the field)", async () => {
    expect((await h.as("nobody", "GET", "/projects")).statusCode).toBe(401);
    expect((await h.as("nobody", "POST", "/projects", { name: "x" })).statusCode).toBe(401);
    const empty = await h.as("alice", "POST", "/projects", { name: "  " });
    expect(empty.statusCode).toBe(400);
    expect(empty.json().details).toEqual([expect.objectContaining({ field: "name" })]);
    const unknown = await h.as("alice", "POST", "/projects", { name: "ok", size: "huge" });
    expect(unknown.json().details).toEqual([expect.objectContaining({ field: "size" })]);
    const noBody = await h.as("alice", "POST", "/projects");
    expect(noBody.statusCode).toBe(400);
    const badKey = await h.as(
      "alice",
      "POST",
      "/projects",
      { name: "x" },
      { "idempotency-key": "spaces are not allowed" },
    );
    expect(badKey.statusCode).toBe(400);
    const badId = await h.as("alice", "GET", "/projects/not-a-uuid");
    expect(badId.statusCode).toBe(400);
    expect(badId.json().details).toEqual([expect.objectContaining({ field: "id" })]);
    const badAllowlist = await h.as("alice", "POST", "/projects", {
      name: "x",
      allowlist: ["github.com", "1.2.3.4"],
    });
    expect(badAllowlist.statusCode).toBe(400);
    expect(badAllowlist.json().details).toEqual([
      {
        field: "allowlist.1",
        message: "must be a host name like api.example.com or .example.com (no IP addresses, no wildcards)",
      },
    ]);
    expect((await h.as("alice", "GET", "/projects")).json()).toEqual({ projects: [] }); // nothing recorded
  });

  it("create answers at once with the seed's fields and the private key; the same Idempotency-Key creates nothing more", async () => {
    const create = () =>
      h.as("alice", "POST", "/projects", { name: "My project ✨" }, { "idempotency-key": `create-${run}` });
    const response = await create();
    expect(response.statusCode, response.body).toBe(202);
    const body = response.json();
    expect(body).toMatchObject({
      project_id: expect.stringMatching(/^[0-9a-f-]{36}$/),
      name: "My project ✨",
      status: "creating",
      ssh: {
        host: "127.0.0.1",
        port: expect.any(Number),
        user: "agent",
        private_key: expect.stringContaining("BEGIN OPENSSH PRIVATE KEY"),
      },
      terminal_url: null,
      operation: { kind: "create" },
    });
    ({
      project_id: projectId,
      ssh: { private_key: privateKey, port: sshPort },
    } = body);

    const again = await create();
    expect(again.statusCode).toBe(200);
    expect(again.json()).toMatchObject({ project_id: projectId, ssh: { private_key: privateKey } });
    expect(
      (await h.as("alice", "GET", "/projects"))
        .json()
        .projects.map((p: { project_id: string }) => p.project_id),
    ).toEqual([projectId]);
    // The key is kept encrypted, never in clear.
    const stored = (
      await h.db.query<{ ssh_private_key: string }>("select ssh_private_key from projects where id = $1", [
        projectId,
      ])
    ).rows[0];
    expect(stored?.ssh_private_key).toMatch(/^v1\./);
    expect(stored?.ssh_private_key).not.toContain("PRIVATE KEY");
  });

  it("the reconciler brings it to running, with the operation's progress; SSH works with the returned key", async () => {
    await until(projectId, "running");
    const project = (await h.as("alice", "GET", `/projects/${projectId}`)).json();
    expect(project.operation).toMatchObject({
      kind: "create",
      state: "succeeded",
      progress: { events: expect.any(Number) },
    });
    expect(project.operation.progress.events).toBeGreaterThan(5);
    const keyFile = path.join(platform.config.host.dataDir, `key-${kind}`);
    await fs.writeFile(keyFile, privateKey, { mode: 0o600 });
    await waitFor("sshd in the sandbox", 30_000, () =>
      exec("ssh", ["-i", keyFile, "-p", String(sshPort), ...sshOptions(5), "agent@127.0.0.1", "whoami"]).then(
        (r) => (r.stdout.trim() === "agent" ? true : undefined),
      ),
    );
  });

  it("another user sees nothing of it: 404, never 403", async () => {
    expect((await h.as("bob", "GET", "/projects")).json()).toEqual({ projects: [] });
    for (const [method, url] of [
      ["GET", `/projects/${projectId}`],
      ["POST", `/projects/${projectId}/stop`],
      ["DELETE", `/projects/${projectId}`],
    ] as const) {
      const response = await h.as("bob", method, url);
      expect(response.statusCode, `${method} ${url}`).toBe(404);
      expect(response.json()).toEqual({ error: "not_found", message: "project not found" });
    }
    expect(await h.statusOf("alice", projectId)).toBe("running");
  });

  it("stop, then start: the status changes when the sandbox has", async () => {
    const running = () =>
      exec("docker", ["inspect", "--format", "{{.State.Running}}", `sbx-${projectId}`]).then((r) =>
        r.stdout.trim(),
      );
    expect((await h.as("alice", "POST", `/projects/${projectId}/stop`)).statusCode).toBe(202);
    await until(projectId, "stopped");
    expect(await running()).toBe("false");
    expect((await h.as("alice", "POST", `/projects/${projectId}/start`)).statusCode).toBe(202);
    await until(projectId, "running");
    expect(await running()).toBe("true");
  });

  it("delete: the project goes, and with it the sandbox", async () => {
    const response = await h.as("alice", "DELETE", `/projects/${projectId}`);
    expect(response.statusCode).toBe(202);
    await until(projectId, "gone");
    expect((await h.as("alice", "GET", "/projects")).json()).toEqual({ projects: [] });
    await expect(exec("docker", ["inspect", `sbx-${projectId}`])).rejects.toThrow();
  });
});

describe("host capacity", () => {
  // No reconciler: a create records its allocation (subnet, SSH port) and nothing runs. The ranges are the
  // file's own, at the ends the tests above never reach.
  it.each([
    [{ sshPortRange: [27240, 27240] as [number, number] }, "agent-sandbox:tenants.sshPortRange"],
    [{ subnetPool: "10.236.3.0/24" }, "agent-sandbox:tenants.subnetPool"],
  ])(
    "a create past the host's room (%o) is 503 naming what ran out, with Retry-After; nothing is left made",
    async (tenants, key) => {
      const config = { ...platform.config, tenants: { ...platform.config.tenants, ...tenants } };
      const h = await apiHarness({
        database: await testDatabase("pglite", { under: platform.config.host.dataDir }),
        config,
        users: ["carol"],
      });
      try {
        const fits = await h.as("carol", "POST", "/projects", { name: "fits" }, { prefer: "respond-async" });
        expect(fits.statusCode, fits.body).toBe(202);
        for (const path of ["/projects", "/e2b/v2/sandboxes"]) {
          const full = await h.as(
            "carol",
            "POST",
            path,
            path === "/projects" ? { name: "no-room" } : { templateID: "base" },
          );
          expect(full.statusCode, full.body).toBe(503);
          expect(full.headers["retry-after"]).toBe("30");
          expect(full.json().message).toContain(key);
          if (path === "/projects")
            expect(full.json()).toMatchObject({ error: "capacity_exhausted", details: { capacity: key } });
        }
        // Nothing half made: the one project, the one tenant.
        expect((await h.as("carol", "GET", "/projects")).json().projects).toHaveLength(1);
        const { rows } = await h.db.query<{ n: number }>("select count(*)::int as n from tenants");
        expect(rows[0]!.n).toBe(1);
      } finally {
        await h.close();
      }
    },
    120_000,
  );
});
