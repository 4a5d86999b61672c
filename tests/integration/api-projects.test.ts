// The project API with the real reconciler behind it, on PGlite and on Postgres: register → login →
// create → running (and SSH in with the returned key) → stop → start → delete; scoping by user.
import { execFile } from "node:child_process";
import { promises as fs } from "node:fs";
import * as path from "node:path";
import { promisify } from "node:util";
import type { FastifyInstance } from "fastify";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Auth, DEFAULT_AUTH } from "../../runtime/api/auth.js";
import { dockerClient } from "../../lib/docker-client.js";
import { openDatabase, type Database } from "../../runtime/db.js";
import { waitFor } from "../../lib/process.js";
import { migrate } from "../../runtime/migrations.js";
import { Reconciler } from "../../runtime/reconciler/reconciler.js";
import { SecretBox } from "../../runtime/secrets.js";
import { tenantDefaults, tenantStackOptions } from "../../runtime/tenants/config.js";
import { buildServer } from "../../runtime/server.js";
import { buildSandboxImage } from "../../sandbox-image/build.js";
import { StackConfig } from "../../stacks/config.js";
import { isolatedSquidHost } from "../helpers/host.js";
import { freshPostgresDatabase } from "../helpers/postgres.js";

const exec = promisify(execFile);
const password = "correct horse battery staple";
let config: StackConfig;

let squid: Awaited<ReturnType<typeof isolatedSquidHost>>;

beforeAll(async () => {
  squid = await isolatedSquidHost();
  const image = (await buildSandboxImage({ base: "local", log: () => undefined })).tag;
  config = StackConfig.parse({
    target: "local",
    host: squid.host,
    tenants: { image, subnetPool: "10.236.0.0/22", sshPortRange: [27200, 27240], leaseSeconds: 10 },
  });
}, 900_000);

afterAll(() => squid?.stop(), 120_000);

describe.each([
  ["pglite", undefined],
  ["postgres", process.env.TEST_DATABASE_URL],
])("project API on %s", (kind, url) => {
  let db: Database;
  let app: FastifyInstance;
  let reconciler: Reconciler;
  let dropDatabase: (() => Promise<void>) | undefined;
  const tokens: Record<"alice" | "bob", string> = { alice: "", bob: "" };
  let projectId: string;
  let privateKey: string;
  let sshPort: number;
  const run = `${kind}-${Date.now()}`;

  const as = (
    who: "alice" | "bob" | "nobody",
    method: "GET" | "POST" | "DELETE",
    url: string,
    payload?: object,
    headers: Record<string, string> = {},
  ) =>
    app.inject({
      method,
      url,
      payload,
      headers: { ...headers, ...(who === "nobody" ? {} : { authorization: `Bearer ${tokens[who]}` }) },
    });
  const statusOf = async (id: string) => {
    const response = await as("alice", "GET", `/projects/${id}`);
    return response.statusCode === 404 ? "gone" : (response.json() as { status: string }).status;
  };
  const until = (id: string, status: string) =>
    waitFor(`project ${id} to be ${status}`, 240_000, async () =>
      (await statusOf(id)) === status ? true : undefined,
    );

  beforeAll(async () => {
    if (kind === "postgres" && !url)
      throw new Error("TEST_DATABASE_URL is not set: run the suite with 'npm test'");
    const own = url ? await freshPostgresDatabase(url) : undefined;
    dropDatabase = own?.drop;
    db = await openDatabase({ url: own?.url, dataDir: path.join(config.host.dataDir, `api-db-${kind}`) });
    await migrate(db);
    const auth = new Auth(db, {
      ...DEFAULT_AUTH,
      secret: new TextEncoder().encode("a-test-signing-key-that-is-at-least-32-bytes"),
    });
    app = buildServer({
      prerequisites: [],
      auth,
      logger: false,
      projects: {
        db,
        defaults: tenantDefaults(config),
        secrets: SecretBox.fromDataDir(config.host.dataDir),
        publicHost: "127.0.0.1",
        docker: dockerClient(),
      },
    });
    reconciler = new Reconciler({ db, stack: tenantStackOptions(config), leaseMs: 10_000, pollMs: 200 });
    reconciler.start();
    for (const who of ["alice", "bob"] as const) {
      const email = `${who}-${run}@example.test`;
      expect(
        (await app.inject({ method: "POST", url: "/auth/register", payload: { email, password } }))
          .statusCode,
      ).toBe(201);
      tokens[who] = (
        await app.inject({ method: "POST", url: "/auth/login", payload: { email, password } })
      ).json().access_token;
    }
  });

  afterAll(async () => {
    await reconciler?.stop();
    await app?.close();
    await db?.close();
    await dropDatabase?.();
  });

  it("refuses requests without a valid token (401) and bad input (400 naming the field)", async () => {
    expect((await as("nobody", "GET", "/projects")).statusCode).toBe(401);
    expect((await as("nobody", "POST", "/projects", { name: "x" })).statusCode).toBe(401);
    const empty = await as("alice", "POST", "/projects", { name: "  " });
    expect(empty.statusCode).toBe(400);
    expect(empty.json().details).toEqual([expect.objectContaining({ field: "name" })]);
    const unknown = await as("alice", "POST", "/projects", { name: "ok", size: "huge" });
    expect(unknown.json().details).toEqual([expect.objectContaining({ field: "size" })]);
    const noBody = await as("alice", "POST", "/projects");
    expect(noBody.statusCode).toBe(400);
    const badKey = await as(
      "alice",
      "POST",
      "/projects",
      { name: "x" },
      { "idempotency-key": "spaces are not allowed" },
    );
    expect(badKey.statusCode).toBe(400);
    const badId = await as("alice", "GET", "/projects/not-a-uuid");
    expect(badId.statusCode).toBe(400);
    expect(badId.json().details).toEqual([expect.objectContaining({ field: "id" })]);
    const badAllowlist = await as("alice", "POST", "/projects", {
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
    expect((await as("alice", "GET", "/projects")).json()).toEqual({ projects: [] }); // nothing recorded
  });

  it("create answers at once with the seed's fields and the private key; the same Idempotency-Key creates nothing more", async () => {
    const response = await as(
      "alice",
      "POST",
      "/projects",
      { name: "My project ✨" },
      { "idempotency-key": `create-${run}` },
    );
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

    const again = await as(
      "alice",
      "POST",
      "/projects",
      { name: "My project ✨" },
      { "idempotency-key": `create-${run}` },
    );
    expect(again.statusCode).toBe(200);
    expect(again.json()).toMatchObject({ project_id: projectId, ssh: { private_key: privateKey } });
    expect(
      (await as("alice", "GET", "/projects"))
        .json()
        .projects.map((p: { project_id: string }) => p.project_id),
    ).toEqual([projectId]);
    // The key is kept encrypted, never in clear.
    const stored = (
      await db.query<{ ssh_private_key: string }>("select ssh_private_key from projects where id = $1", [
        projectId,
      ])
    ).rows[0];
    expect(stored?.ssh_private_key).toMatch(/^v1\./);
    expect(stored?.ssh_private_key).not.toContain("PRIVATE KEY");
  });

  it("the reconciler brings it to running, with the operation's progress; SSH works with the returned key", async () => {
    await until(projectId, "running");
    const project = (await as("alice", "GET", `/projects/${projectId}`)).json();
    expect(project.operation).toMatchObject({
      kind: "create",
      state: "succeeded",
      progress: { events: expect.any(Number) },
    });
    expect(project.operation.progress.events).toBeGreaterThan(5);
    const keyFile = path.join(config.host.dataDir, `key-${kind}`);
    await fs.writeFile(keyFile, privateKey, { mode: 0o600 });
    await waitFor("sshd in the sandbox", 30_000, () =>
      exec("ssh", [
        "-i",
        keyFile,
        "-p",
        String(sshPort),
        "-o",
        "BatchMode=yes",
        "-o",
        "StrictHostKeyChecking=no",
        "-o",
        "UserKnownHostsFile=/dev/null",
        "-o",
        "ConnectTimeout=5",
        "agent@127.0.0.1",
        "whoami",
      ]).then((r) => (r.stdout.trim() === "agent" ? true : undefined)),
    );
  });

  it("another user sees nothing of it: 404, never 403", async () => {
    expect((await as("bob", "GET", "/projects")).json()).toEqual({ projects: [] });
    for (const [method, url] of [
      ["GET", `/projects/${projectId}`],
      ["POST", `/projects/${projectId}/stop`],
      ["DELETE", `/projects/${projectId}`],
    ] as const) {
      const response = await as("bob", method, url);
      expect(response.statusCode, `${method} ${url}`).toBe(404);
      expect(response.json()).toEqual({ error: "not_found", message: "project not found" });
    }
    expect(await statusOf(projectId)).toBe("running");
  });

  it("stop, then start: the status changes when the sandbox has", async () => {
    const running = () =>
      exec("docker", ["inspect", "--format", "{{.State.Running}}", `sbx-${projectId}`]).then((r) =>
        r.stdout.trim(),
      );
    expect((await as("alice", "POST", `/projects/${projectId}/stop`)).statusCode).toBe(202);
    await until(projectId, "stopped");
    expect(await running()).toBe("false");
    expect((await as("alice", "POST", `/projects/${projectId}/start`)).statusCode).toBe(202);
    await until(projectId, "running");
    expect(await running()).toBe("true");
  });

  it("delete: the project goes, and with it the sandbox", async () => {
    const response = await as("alice", "DELETE", `/projects/${projectId}`);
    expect(response.statusCode).toBe(202);
    await until(projectId, "gone");
    expect((await as("alice", "GET", "/projects")).json()).toEqual({ projects: [] });
    await expect(exec("docker", ["inspect", `sbx-${projectId}`])).rejects.toThrow();
  });
});
