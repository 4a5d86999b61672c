// Snapshots, restores and backup status through the API with the real reconciler, engine and registry
// (an isolated registry of the test's own): seed 000 §5.2-§5.4.
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { waitFor } from "../../lib/process.js";
import { apiHarness, type ApiHarness } from "../helpers/api.js";
import { testPlatform, type TestPlatform } from "../helpers/host.js";
import { testDatabase } from "../helpers/postgres.js";

const exec = promisify(execFile);

let platform: TestPlatform;
let h: ApiHarness<"alice" | "bob">;
let projectId: string;
const tags: string[] = [];

const project = async () => (await h.as("alice", "GET", `/projects/${projectId}`)).json();
/** Waits for the project's newest operation (of `kind`) to finish, and for the status it settles on. */
const settled = async (kind: string, status: string) => {
  const done = await waitFor(`${kind} of ${projectId} to finish`, 300_000, async () => {
    const p = await project();
    return p.operation?.kind === kind && ["succeeded", "failed"].includes(p.operation.state) ? p : undefined;
  });
  expect(done.operation, JSON.stringify(done.operation)).toMatchObject({ state: "succeeded" });
  expect(done.status).toBe(status);
  return done;
};
const inSandbox = async (user: string, script: string) =>
  (await exec("docker", ["exec", "-u", user, `sbx-${projectId}`, "sh", "-c", script])).stdout.trim();
const registryPort = () => platform.config.host.registryPort;
const registryTags = async () => {
  const response = await fetch(`http://127.0.0.1:${registryPort()}/v2/sandboxes/${projectId}/tags/list`);
  if (response.status === 404) return [];
  return (((await response.json()) as { tags: string[] | null }).tags ?? []).sort();
};

beforeAll(async () => {
  platform = await testPlatform(
    {
      subnetPool: "10.237.0.0/22",
      sshPortRange: [27300, 27340],
      leaseSeconds: 10,
      backupIntervalSeconds: 3600,
      snapshotsKept: 2,
    },
    { registry: true },
  );
  h = await apiHarness({
    database: await testDatabase("postgres", { under: platform.config.host.dataDir }),
    config: platform.config,
    users: ["alice", "bob"],
    reconciler: true,
  });
  const created = await h.as("alice", "POST", "/projects", { name: "snapshots" });
  expect(created.statusCode, created.body).toBe(202);
  projectId = created.json().project_id;
  await settled("create", "running");
}, 900_000);

afterAll(async () => {
  await h?.close();
  await platform?.stop();
}, 300_000);

describe("snapshot, restore and backup status", () => {
  it("backup-status reads the sandbox's backup daemon: last backup time and size on the remote", async () => {
    await inSandbox("agent", "mkdir -p ~/work && head -c 200000 /dev/urandom > ~/work/data.bin");
    // The daemon backs up once at start; wait for that, then ask for one more through a snapshot later.
    const status = await waitFor("a first backup", 60_000, async () => {
      const body = (await h.as("alice", "GET", `/projects/${projectId}/backup-status`)).json();
      return body.last_result === "ok" ? body : undefined;
    });
    expect(status).toMatchObject({
      project_id: projectId,
      source: "sandbox",
      last_backup_at: expect.stringMatching(/^\d{4}-\d\d-\d\dT/),
      interval_seconds: 3600,
      // New tenants also back up a minute after a change (tenants.backupAfterChangeSeconds' default).
      after_change_seconds: 60,
      last_trigger: expect.stringMatching(/^(interval|change|once)$/),
      usage: { bytes: expect.any(Number), objects: expect.any(Number) },
    });
  });

  it("a snapshot commits the system state and pushes :<timestamp> and :latest; a final backup goes first", async () => {
    await inSandbox("0", "echo v1 > /opt/marker");
    const response = await h.as("alice", "POST", `/projects/${projectId}/snapshot`);
    expect(response.statusCode, response.body).toBe(202);
    const done = await settled("snapshot", "running");
    expect(done.last_snapshot).toMatchObject({ tag: expect.stringMatching(/^\d{8}-\d{6}-\d{3}$/) });
    tags.push(done.last_snapshot.tag);
    expect(await registryTags()).toEqual([tags[0], "latest"].sort());
    const backup = (await h.as("alice", "GET", `/projects/${projectId}/backup-status`)).json();
    // The final backup copied the 200 kB written above.
    expect(backup.usage.bytes).toBeGreaterThanOrEqual(200_000);
    const listed = (await h.as("alice", "GET", `/projects/${projectId}/snapshots`)).json();
    expect(listed.snapshots).toEqual([
      {
        tag: tags[0],
        image: `127.0.0.1:${registryPort()}/sandboxes/${projectId}:${tags[0]}`,
        digest: expect.stringMatching(/^sha256:[0-9a-f]{64}$/),
        created_at: expect.any(String),
      },
    ]);
  });

  it("only the newest snapshots are kept, in the registry and in the list", async () => {
    for (const marker of ["v2", "v3"]) {
      await inSandbox("0", `echo ${marker} > /opt/marker`);
      expect((await h.as("alice", "POST", `/projects/${projectId}/snapshot`, {})).statusCode).toBe(202);
      tags.push((await settled("snapshot", "running")).last_snapshot.tag);
    }
    // snapshotsKept is 2: the first is gone from the registry, the engine and the list.
    expect(await registryTags()).toEqual([tags[1], tags[2], "latest"].sort());
    const listed = (await h.as("alice", "GET", `/projects/${projectId}/snapshots`)).json();
    expect(listed.snapshots.map((s: { tag: string }) => s.tag)).toEqual([tags[2], tags[1]]);
    await expect(
      exec("docker", ["image", "inspect", `127.0.0.1:${registryPort()}/sandboxes/${projectId}:${tags[0]}`]),
    ).rejects.toThrow();
  });

  it("restore runs the chosen snapshot on the same volume: system state from the snapshot, files kept", async () => {
    await inSandbox("0", "echo v4 > /opt/marker");
    await inSandbox("agent", "echo newest > ~/work/notes.txt");
    const response = await h.as("alice", "POST", `/projects/${projectId}/restore`, { snapshot: tags[1] });
    expect(response.statusCode, response.body).toBe(202);
    await settled("restore", "running");
    expect(await inSandbox("agent", "cat /opt/marker")).toBe("v2");
    expect(await inSandbox("agent", "cat ~/work/notes.txt")).toBe("newest");
    // Without a name, the newest snapshot.
    expect((await h.as("alice", "POST", `/projects/${projectId}/restore`)).statusCode).toBe(202);
    await settled("restore", "running");
    expect(await inSandbox("agent", "cat /opt/marker")).toBe("v3");
  });

  it("bad input is refused with the field named; another user gets 404; no token gets 401", async () => {
    const unknownTag = await h.as("alice", "POST", `/projects/${projectId}/restore`, {
      snapshot: "20200101-000000-000",
    });
    expect(unknownTag.statusCode).toBe(409);
    expect(unknownTag.json()).toMatchObject({
      error: "snapshot_not_found",
      details: { snapshot: "20200101-000000-000" },
    });
    expect(unknownTag.json().message).toContain("20200101-000000-000");
    const badTag = await h.as("alice", "POST", `/projects/${projectId}/restore`, { snapshot: "latest" });
    expect(badTag.statusCode).toBe(400);
    expect(badTag.json().details).toEqual([expect.objectContaining({ field: "snapshot" })]);
    const extra = await h.as("alice", "POST", `/projects/${projectId}/snapshot`, { stop: true, now: 1 });
    expect(extra.statusCode).toBe(400);
    expect(extra.json().details).toEqual([expect.objectContaining({ field: "now" })]);
    const wrongType = await h.as("alice", "POST", `/projects/${projectId}/snapshot`, { stop: "yes" });
    expect(wrongType.json().details).toEqual([expect.objectContaining({ field: "stop" })]);
    for (const [method, url] of [
      ["POST", `/projects/${projectId}/snapshot`],
      ["POST", `/projects/${projectId}/restore`],
      ["GET", `/projects/${projectId}/snapshots`],
      ["GET", `/projects/${projectId}/backup-status`],
    ] as const) {
      expect((await h.as("bob", method, url)).statusCode, `${method} ${url}`).toBe(404);
      expect((await h.as("nobody", method, url)).statusCode, `${method} ${url}`).toBe(401);
    }
    // None of the refused requests recorded anything.
    expect((await project()).operation).toMatchObject({ kind: "restore", state: "succeeded" });
  });

  it("snapshot with stop (the idle shutdown) ends stopped; backup-status then answers what was recorded", async () => {
    expect((await h.as("alice", "POST", `/projects/${projectId}/snapshot`, { stop: true })).statusCode).toBe(
      202,
    );
    await settled("snapshot", "stopped");
    const status = (await h.as("alice", "GET", `/projects/${projectId}/backup-status`)).json();
    expect(status).toMatchObject({ source: "recorded", last_result: "ok" });
    expect(Date.parse(status.last_backup_at)).toBeGreaterThan(Date.now() - 120_000);
    const metrics = (await h.app.inject({ method: "GET", url: "/metrics" })).body;
    expect(metrics).toMatch(/^agent_sandbox_operations\{kind="snapshot",state="succeeded"\} 4$/m);
    expect(metrics).toMatch(/^agent_sandbox_operations\{kind="restore",state="succeeded"\} 2$/m);
    expect(metrics).toMatch(/^agent_sandbox_reconciler_queue_depth 0$/m);
  });

  it("delete removes the project's snapshots from the registry and the engine", async () => {
    expect((await h.as("alice", "DELETE", `/projects/${projectId}`)).statusCode).toBe(202);
    await waitFor("the project to be deleted", 300_000, async () =>
      (await h.as("alice", "GET", `/projects/${projectId}`)).statusCode === 404 ? true : undefined,
    );
    expect(await registryTags()).toEqual([]);
    const { stdout } = await exec("docker", [
      "images",
      "--format",
      "{{.Repository}}:{{.Tag}}",
      `127.0.0.1:${registryPort()}/sandboxes/${projectId}`,
    ]);
    expect(stdout.trim()).toBe("");
  });
});
