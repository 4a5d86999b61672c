// Idle shutdown (seed 000 §5.3, issue 14): with the idle time shortened to seconds, the idle job snapshots
// and stops an unattended project, and leaves running one with an open terminal, one with an open SSH
// session and one whose owner opted out. Real reconciler, engine, registry, terminal proxy and sshd.
import { spawn, type ChildProcess } from "node:child_process";
import { promises as fs } from "node:fs";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { dockerClient } from "../../lib/docker-client.js";
import { waitFor } from "../../lib/process.js";
import { idleShutdownJob } from "../../runtime/jobs/idle.js";
import { sshSessions } from "../../runtime/sandbox/ssh-sessions.js";
import { platformBackends } from "../../runtime/backends/registry.js";
import { JobScheduler } from "../../runtime/jobs/scheduler.js";
import { apiHarness, type ApiHarness } from "../helpers/api.js";
import { sshOptions } from "../helpers/containers.js";
import { testPlatform, type TestPlatform } from "../helpers/host.js";
import { testDatabase } from "../helpers/postgres.js";
import { connectTerminal, type TerminalClient } from "../helpers/terminal-client.js";

// Longer than the set-up after the last create (so the first run finds nothing idle yet), short for a test.
const IDLE_SECONDS = 15;
let platform: TestPlatform;
let h: ApiHarness<"owner">;
// Created in this order, the unattended one last, after the terminal and the SSH session are open: what came
// before it (sshd's start, on a loaded machine) once took longer than the idle time.
const ids = { optedOut: "", terminal: "", ssh: "", unattended: "" };
let terminal: TerminalClient | undefined;
let sshClient: ChildProcess | undefined;

const as = (method: "GET" | "POST" | "DELETE", url: string, payload?: object) =>
  h.as("owner", method, url, payload);
const statusOf = (id: string) => h.statusOf("owner", id);

beforeAll(async () => {
  platform = await testPlatform(
    {
      subnetPool: "10.233.12.0/22",
      sshPortRange: [27190, 27199],
      leaseSeconds: 10,
      backupIntervalSeconds: 3600,
      idleMinutes: IDLE_SECONDS / 60,
    },
    { registry: true },
  );
  const { config } = platform;
  h = await apiHarness({
    database: await testDatabase("pglite", { under: config.host.dataDir }),
    config,
    users: ["owner"],
    reconciler: true,
    terminal: true,
  });

  const keys = path.join(config.host.dataDir, "keys");
  await fs.mkdir(keys, { recursive: true });
  const create = async (which: keyof typeof ids) => {
    const created = await as("POST", "/projects", {
      name: which,
      ...(which === "optedOut" ? { idle_shutdown: false } : {}),
    });
    expect(created.statusCode, created.body).toBe(202);
    ids[which] = created.json().project_id;
    if (which === "ssh")
      await fs.writeFile(path.join(keys, "ssh"), created.json().ssh.private_key, { mode: 0o600 });
  };
  for (const which of ["optedOut", "terminal", "ssh"] as const) await create(which);
  for (const id of [ids.optedOut, ids.terminal, ids.ssh]) await h.waitForStatus("owner", id, "running");

  // An open terminal on one, an open SSH session on another.
  terminal = connectTerminal((await as("GET", `/projects/${ids.terminal}`)).json().terminal_url);
  terminal.type("echo attached-$((6*7))\r");
  await terminal.waitFor("attached-42", 30_000);
  const port = (await as("GET", `/projects/${ids.ssh}`)).json().ssh.port;
  // sshd starts a moment after the container reports running: connect until a session holds.
  await waitFor("the SSH session", 60_000, async () => {
    if (!sshClient || sshClient.exitCode !== null)
      sshClient = spawn("ssh", [
        "-i",
        path.join(keys, "ssh"),
        "-p",
        String(port),
        ...sshOptions(5),
        "agent@127.0.0.1",
        "sleep 600",
      ]);
    return (await sshSessions(dockerClient(), ids.ssh)) > 0 ? true : undefined;
  });
  await create("unattended");
  await h.waitForStatus("owner", ids.unattended, "running");
}, 900_000);

afterAll(async () => {
  sshClient?.kill();
  terminal?.ws.terminate();
  await h?.close();
  await platform?.stop();
}, 600_000);

describe("idle shutdown", () => {
  it("snapshots and stops only the unattended project; terminal, SSH and opt-out keep theirs running", async () => {
    const scheduler = new JobScheduler(h.db, [
      idleShutdownJob(h.db, {
        idleMinutes: IDLE_SECONDS / 60,
        intervalMs: 3_600_000,
        liveTerminal: (id) => h.proxy!.hasLiveSession(id),
        backends: platformBackends({ docker: dockerClient }),
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
    // A container's pause keeps its files alone (CRIU does not start on this kernel: docs/api.md).
    expect(idle).toMatchObject({
      idle: "pause",
      pause: { kind: "files", memory_bytes: null, saved_at: null },
    });
    for (const id of [ids.terminal, ids.ssh, ids.optedOut]) expect(await statusOf(id)).toBe("running");
    expect((await as("GET", `/projects/${ids.optedOut}`)).json()).toMatchObject({
      idle: "none",
      idle_shutdown: false,
      pause: null,
    });

    // A second run finds nothing more to do: the stopped one is not running, the others are still in use.
    expect((await scheduler.runNow("idle-shutdown"))?.last_detail).toEqual({ checked: 2, stopped: [] });
  });
});
