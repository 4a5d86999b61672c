// The runtime service as `npm run local` runs it (a real process: API + reconciler in one), driven over
// HTTP: register → login → create → running → stop → start → delete, on PGlite and on Postgres.
import { spawn, type ChildProcess } from "node:child_process";
import { promises as fs } from "node:fs";
import * as path from "node:path";
import { stringify } from "yaml";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { waitFor } from "../../lib/process.js";
import { REPO_ROOT } from "../../lib/toolchain.js";
import { buildSandboxImage } from "../../sandbox-image/build.js";
import { StackConfig, type HostConfig } from "../../stacks/config.js";
import { tenantStackOptions } from "../../runtime/tenants/config.js";
import { destroyTenant, TENANT_PROJECT } from "../../runtime/tenants/stack.js";
import { freePort, isolatedSquidHost } from "../helpers/host.js";
import { freshPostgresDatabase } from "../helpers/postgres.js";

let host: HostConfig;
let image: string;
let squid: Awaited<ReturnType<typeof isolatedSquidHost>>;

beforeAll(async () => {
  squid = await isolatedSquidHost();
  host = squid.host;
  image = (await buildSandboxImage({ base: "local", log: () => undefined })).tag;
}, 900_000);

afterAll(() => squid?.stop(), 120_000);

describe.each([
  ["pglite", undefined],
  ["postgres", process.env.TEST_DATABASE_URL],
])("the runtime service on %s", (kind, serverUrl) => {
  let service: ChildProcess;
  let base: string;
  let dropDatabase: (() => Promise<void>) | undefined;
  let token: string;
  let projectId: string;
  let config: StackConfig;

  const api = async (method: string, url: string, body?: unknown, auth = true) => {
    const response = await fetch(`${base}${url}`, {
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
    if (kind === "postgres" && !serverUrl)
      throw new Error("TEST_DATABASE_URL is not set: run the suite with 'npm test'");
    const own = serverUrl ? await freshPostgresDatabase(serverUrl) : undefined;
    dropDatabase = own?.drop;
    const apiPort = await freePort();
    const dataDir = path.join(host.dataDir, `service-${kind}`);
    const configFile = path.join(path.dirname(host.configDir), `Pulumi.service-${kind}.yaml`);
    const sshBase = kind === "pglite" ? 27300 : 27350;
    config = StackConfig.parse({
      target: "local",
      host: { ...host, dataDir },
      tenants: {
        image,
        subnetPool: "10.237.0.0/22",
        sshPortRange: [sshBase, sshBase + 20],
        leaseSeconds: 10,
      },
    });
    await fs.writeFile(
      configFile,
      stringify({
        config: {
          "agent-sandbox:target": "local",
          "agent-sandbox:host": { ...host, dataDir },
          "agent-sandbox:runtime": {
            apiPort,
            terminalPort: await freePort(),
            listenHost: "127.0.0.1",
            publicHost: "127.0.0.1",
          },
          "agent-sandbox:tenants": {
            image,
            subnetPool: kind === "pglite" ? "10.237.0.0/23" : "10.237.2.0/23",
            sshPortRange: [sshBase, sshBase + 20],
            leaseSeconds: 10,
          },
        },
      }),
    );
    service = spawn(process.execPath, ["--import", "tsx", "runtime/main.ts"], {
      cwd: REPO_ROOT,
      env: { ...process.env, AGENT_SANDBOX_CONFIG: configFile, DATABASE_URL: own?.url ?? "" },
      stdio: "ignore",
    });
    base = `http://127.0.0.1:${apiPort}`;
    await waitFor("the runtime service", 60_000, () => fetch(`${base}/healthz`).then(() => true));
  });

  afterAll(async () => {
    service?.kill("SIGTERM");
    if (service) await new Promise((resolve) => service.once("exit", resolve));
    // A failed run must not leave sandboxes behind: destroy whatever stacks the service still holds.
    const options = tenantStackOptions(config);
    const stateDir = path.join(config.host.dataDir, "state", ".pulumi", "stacks", TENANT_PROJECT);
    for (const file of await fs.readdir(stateDir).catch(() => [] as string[])) {
      const match = /^tenant-(.+)\.json$/.exec(file);
      if (match) await destroyTenant(match[1]!, options).catch(() => undefined);
    }
    await dropDatabase?.();
  });

  it("register → login → create → running → stop → start → delete", { timeout: 600_000 }, async () => {
    const email = `e2e-${kind}-${Date.now()}@example.test`;
    const password = "correct horse battery staple";
    expect((await api("POST", "/auth/register", { email, password }, false)).status).toBe(201);
    const login = await api("POST", "/auth/login", { email, password }, false);
    expect(login.status).toBe(200);
    token = login.body.access_token;

    const created = await api("POST", "/projects", { name: "end to end" });
    expect(created.status).toBe(202);
    expect(created.body).toMatchObject({
      status: "creating",
      ssh: { user: "agent", private_key: expect.stringContaining("PRIVATE KEY") },
    });
    projectId = created.body.project_id;
    await until("running");

    expect((await api("POST", `/projects/${projectId}/stop`)).status).toBe(202);
    await until("stopped");
    expect((await api("POST", `/projects/${projectId}/start`)).status).toBe(202);
    await until("running");

    expect((await api("DELETE", `/projects/${projectId}`)).status).toBe(202);
    await until("gone");
    expect((await api("GET", "/projects")).body).toEqual({ projects: [] });
  });
});
