// Idle shutdown (seed 000 §5.3, issue 14): with the idle time shortened to seconds, the idle job snapshots
// and stops an unattended project, and leaves running one with an open terminal, one with an open SSH
// session and one whose owner opted out. Real reconciler, engine, registry, terminal proxy and sshd.
import { spawn, type ChildProcess } from "node:child_process";
import { promises as fs } from "node:fs";
import * as path from "node:path";
import type { FastifyInstance } from "fastify";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { dockerClient } from "../../lib/docker-client.js";
import { livePid, waitFor } from "../../lib/process.js";
import { imageRegistry } from "../../lib/host/registry.js";
import { Auth, DEFAULT_AUTH } from "../../runtime/api/auth.js";
import { openDatabase, type Database } from "../../runtime/db.js";
import { idleShutdownJob, sshSessions } from "../../runtime/jobs/idle.js";
import { JobScheduler } from "../../runtime/jobs/scheduler.js";
import { migrate } from "../../runtime/migrations.js";
import { Reconciler } from "../../runtime/reconciler/reconciler.js";
import { SecretBox } from "../../runtime/secrets.js";
import { buildServer } from "../../runtime/server.js";
import { dockerAttacher } from "../../runtime/terminal/attach.js";
import { TerminalProxy } from "../../runtime/terminal/proxy.js";
import { TicketIssuer } from "../../runtime/terminal/tickets.js";
import { snapshotOptions, tenantDefaults, tenantStackOptions } from "../../runtime/tenants/config.js";
import { buildSandboxImage } from "../../sandbox-image/build.js";
import { StackConfig } from "../../stacks/config.js";
import { freePort, isolatedSquidHost } from "../helpers/host.js";
import { connectTerminal, type TerminalClient } from "../helpers/terminal-client.js";

// Longer than the set-up after the last create (so the first run finds nothing idle yet), short for a test.
const IDLE_SECONDS = 15;
const secret = new TextEncoder().encode("a-test-signing-key-that-is-at-least-32-bytes");
let squid: Awaited<ReturnType<typeof isolatedSquidHost>>;
let config: StackConfig;
let db: Database;
let app: FastifyInstance;
let reconciler: Reconciler;
let proxy: TerminalProxy;
let token = "";
// Created in this order: the unattended one last, so that it is the youngest.
const ids = { optedOut: "", terminal: "", ssh: "", unattended: "" };
let terminal: TerminalClient | undefined;
let sshClient: ChildProcess | undefined;

const as = (method: "GET" | "POST" | "DELETE", url: string, payload?: object) =>
  app.inject({ method, url, payload, headers: { authorization: `Bearer ${token}` } });
const statusOf = async (id: string) => (await as("GET", `/projects/${id}`)).json().status as string;

beforeAll(async () => {
  squid = await isolatedSquidHost();
  const image = (await buildSandboxImage({ base: "local", log: () => undefined })).tag;
  config = StackConfig.parse({
    target: "local",
    host: squid.host,
    tenants: {
      image,
      subnetPool: "10.233.12.0/22",
      sshPortRange: [27190, 27199],
      leaseSeconds: 10,
      backupIntervalSeconds: 3600,
      idleMinutes: IDLE_SECONDS / 60,
    },
  });
  await imageRegistry({ port: config.host.registryPort, ...config.host }).ensure(() => undefined);
  db = await openDatabase({ dataDir: path.join(config.host.dataDir, "db") });
  await migrate(db);
  const tickets = new TicketIssuer(secret);
  proxy = new TerminalProxy({
    db,
    tickets,
    attacher: dockerAttacher(dockerClient()),
    recordingsDir: path.join(config.host.dataDir, "casts"),
  });
  const terminalPort = await proxy.listen(await freePort(), "127.0.0.1");
  app = buildServer({
    prerequisites: [],
    logger: false,
    auth: new Auth(db, { ...DEFAULT_AUTH, secret }),
    projects: {
      db,
      defaults: tenantDefaults(config),
      secrets: SecretBox.fromDataDir(config.host.dataDir),
      publicHost: "127.0.0.1",
      docker: dockerClient(),
      terminal: { urlBase: `ws://127.0.0.1:${terminalPort}/terminal`, tickets },
    },
  });
  reconciler = new Reconciler({
    db,
    stack: tenantStackOptions(config),
    leaseMs: 10_000,
    pollMs: 200,
    snapshots: snapshotOptions(config),
  });
  reconciler.start();
  const credentials = { email: `idle-${Date.now()}@example.test`, password: "correct horse battery staple" };
  await app.inject({ method: "POST", url: "/auth/register", payload: credentials });
  token = (await app.inject({ method: "POST", url: "/auth/login", payload: credentials })).json()
    .access_token;

  const keys = path.join(config.host.dataDir, "keys");
  await fs.mkdir(keys, { recursive: true });
  for (const which of Object.keys(ids) as (keyof typeof ids)[]) {
    const created = await as("POST", "/projects", {
      name: which,
      ...(which === "optedOut" ? { idle_shutdown: false } : {}),
    });
    expect(created.statusCode, created.body).toBe(202);
    ids[which] = created.json().project_id;
    if (which === "ssh")
      await fs.writeFile(path.join(keys, "ssh"), created.json().ssh.private_key, { mode: 0o600 });
  }
  for (const id of Object.values(ids))
    await waitFor(`project ${id} running`, 300_000, async () =>
      (await statusOf(id)) === "running" ? true : undefined,
    );

  // An open terminal on one, an open SSH session on another.
  terminal = connectTerminal((await as("GET", `/projects/${ids.terminal}`)).json().terminal_url);
  terminal.type("echo attached-$((6*7))\r");
  await terminal.waitFor("attached-42", 30_000);
  const port = (await as("GET", `/projects/${ids.ssh}`)).json().ssh.port;
  // sshd starts a moment after the container reports running: connect until a session holds.
  await waitFor("the SSH session", 60_000, async () => {
    if (!sshClient || sshClient.exitCode !== null)
      sshClient = spawn("ssh", [
        ...[
          "-i",
          path.join(keys, "ssh"),
          "-p",
          String(port),
          "-o",
          "BatchMode=yes",
          "-o",
          "ConnectTimeout=5",
        ],
        ...[
          "-o",
          "StrictHostKeyChecking=no",
          "-o",
          "UserKnownHostsFile=/dev/null",
          "agent@127.0.0.1",
          "sleep 600",
        ],
      ]);
    return (await sshSessions(dockerClient(), ids.ssh)) > 0 ? true : undefined;
  });
}, 900_000);

afterAll(async () => {
  sshClient?.kill();
  terminal?.ws.terminate();
  for (const id of Object.values(ids)) if (id) await as("DELETE", `/projects/${id}`);
  await waitFor("every project deleted", 300_000, async () => {
    const { rows } = await db.query<{ n: number }>(
      "select count(*)::int as n from tenants where state <> 'deleted'",
    );
    return rows[0]!.n === 0 ? true : undefined;
  }).catch(() => undefined);
  await proxy?.close();
  await reconciler?.stop();
  await app?.close();
  await db?.close();
  const pid = await livePid(path.join(config.host.runDir, "registry.pid")).catch(() => undefined);
  if (pid) process.kill(pid, "SIGTERM");
  await squid?.stop();
}, 600_000);

describe("idle shutdown", () => {
  it("snapshots and stops only the unattended project; terminal, SSH and opt-out keep theirs running", async () => {
    const scheduler = new JobScheduler(db, [
      idleShutdownJob(db, {
        idleMinutes: IDLE_SECONDS / 60,
        intervalMs: 3_600_000,
        liveTerminal: (id) => proxy.hasLiveSession(id),
        docker: dockerClient(),
      }),
    ]);
    // Not yet idle: nothing is stopped (the opted-out one has been unattended longest).
    const early = await scheduler.runNow("idle-shutdown");
    expect(early?.last_detail).toEqual({ checked: 3, stopped: [] });
    await new Promise((resolve) => setTimeout(resolve, (IDLE_SECONDS + 1) * 1000));
    const run = await scheduler.runNow("idle-shutdown");
    // The opted-out project is not a candidate at all; the other three are checked.
    expect(run?.last_detail).toEqual({ checked: 3, stopped: [ids.unattended] });

    await waitFor("the idle project stopped", 300_000, async () =>
      (await statusOf(ids.unattended)) === "stopped" ? true : undefined,
    );
    const idle = (await as("GET", `/projects/${ids.unattended}`)).json();
    expect(idle.operation).toMatchObject({ kind: "snapshot", state: "succeeded" });
    expect(idle.last_snapshot).toMatchObject({ tag: expect.stringMatching(/^\d{8}-\d{6}-\d{3}$/) });
    for (const id of [ids.terminal, ids.ssh, ids.optedOut]) expect(await statusOf(id)).toBe("running");
    expect((await as("GET", `/projects/${ids.optedOut}`)).json().idle_shutdown).toBe(false);

    // A second run finds nothing more to do: the stopped one is not running, the others are still in use.
    expect((await scheduler.runNow("idle-shutdown"))?.last_detail).toEqual({ checked: 2, stopped: [] });
  });
});
