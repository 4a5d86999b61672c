// The idle action (pause, stop or none) and the memory a stop keeps (issue 44), on PGlite with the operations
// queue's own claim and finish playing the reconciler's worker (no stack runs here): what each asks of a
// microVM project's desired state, what the project's view says of a pause, and the memory retention's
// updates. Real microVMs paused, resumed and their images dropped: tests/integration/microvm-tenant.test.ts.
import { mkdtempSync, promises as fs, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { TenantSpec } from "../../components/tenant/spec.js";
import { microVmFiles } from "../../lib/microvm/launcher.js";
import { recordBoot } from "../../lib/microvm/suspend.js";
import { platformBackends } from "../../runtime/backends/registry.js";
import { idleShutdownJob, MEMORY_RETENTION, memoryRetentionJob } from "../../runtime/jobs/idle.js";
import { claimOperation, finishOperation, type Operation } from "../../runtime/store/operations.js";
import { getTenant, recordPause, setTenantState } from "../../runtime/store/tenants.js";
import { tenantDefaults } from "../../runtime/tenants/config.js";
import { requestOperation } from "../../runtime/tenants/service.js";
import { RuntimeConfig, StackConfig } from "../../stacks/config.js";
import { apiHarness, type ApiHarness } from "../helpers/api.js";
import { testDatabase } from "../helpers/postgres.js";

let h: ApiHarness<"alice">;
let dataDir: string;
let stateRoot: string;

/** The worker's part: the next operation claimed and finished, its tenant settled as its spec says. */
async function work(): Promise<Operation> {
  const operation = await claimOperation(h.db, "worker", 60_000, "any");
  if (!operation) throw new Error("no operation to work on");
  await finishOperation(h.db, operation.id, "worker", { state: "succeeded" });
  const { running } = await specOf(operation.project_id);
  await setTenantState(h.db, operation.project_id, running ? "running" : "stopped", null);
  return operation;
}

const specOf = async (id: string): Promise<TenantSpec> => (await getTenant(h.db, id))!.spec;
const view = async (id: string) => (await h.as("alice", "GET", `/projects/${id}`)).json();

/** A microVM project made and run (its create worked on). */
async function microVm(body: object = {}): Promise<string> {
  const made = await h.as("alice", "POST", "/projects", { name: "idle", backend: "microvm", ...body });
  expect(made.statusCode, made.body).toBe(202);
  await work();
  return made.json().project_id as string;
}

beforeAll(async () => {
  dataDir = mkdtempSync(path.join(tmpdir(), "idle-policy-"));
  stateRoot = path.join(dataDir, "vms");
  const config = StackConfig.parse({
    target: "local",
    host: { dataDir },
    tenants: { subnetPool: "10.97.0.0/16" },
  });
  const host = {
    kernel: "/boot/vmlinuz",
    initrd: "/boot/initrd",
    accelerator: "tcg" as const,
    stateRoot,
    platformKey: "ssh-ed25519 AAAA platform",
    platformPrivateKey: "",
    decision: { accelerator: "tcg" as const, reason: "a test", bootId: "b", probedAt: "t", probeMs: 0 },
  };
  h = await apiHarness({
    database: await testDatabase("pglite", { under: dataDir }),
    config,
    users: ["alice"],
    server: {
      limits: {
        ...RuntimeConfig.parse({}),
        projectQuota: 20,
        rateLimits: { register: { burst: 10, perHour: 20 }, createProject: { burst: 50, perHour: 100 } },
      },
      projects: {
        defaults: {
          ...tenantDefaults(config),
          hostUsage: undefined,
          microvm: () => ({ available: true, host }),
        },
      },
    },
  });
}, 120_000);

afterAll(async () => {
  await h?.close();
  rmSync(dataDir, { recursive: true, force: true });
});

describe("the idle action", () => {
  it("is pause by default, set by idle or the older idle_shutdown, and a contradiction of both is a 400 naming it", async () => {
    const id = await microVm();
    expect(await view(id)).toMatchObject({
      idle: "pause",
      idle_shutdown: true,
      pause: null,
      last_start: null,
    });
    expect((await specOf(id)).microvm?.keepMemory).toBe(true);
    const patch = (body: object) => h.as("alice", "PATCH", `/projects/${id}`, body);
    for (const [body, idle] of [
      [{ idle: "stop" }, "stop"],
      // The older switch's true keeps an action the project has.
      [{ idle_shutdown: true }, "stop"],
      [{ idle_shutdown: false }, "none"],
      [{ idle_shutdown: true }, "pause"],
      [{ idle: "none", idle_shutdown: false }, "none"],
      [{ idle: "pause" }, "pause"],
    ] as const) {
      const answer = await patch(body);
      expect(answer.statusCode, answer.body).toBe(200);
      expect(answer.json()).toMatchObject({ idle, idle_shutdown: idle !== "none" });
    }
    for (const [body, field] of [
      [{ idle: "sleep" }, "idle"],
      [{ idle: "pause", idle_shutdown: false }, "idle_shutdown"],
      [{ idle: "none", idle_shutdown: true }, "idle_shutdown"],
    ] as const) {
      const answer = await patch(body);
      expect({ body, status: answer.statusCode }).toEqual({ body, status: 400 });
      expect(answer.json().details.map((d: { field: string }) => d.field)).toContain(field);
    }
    const refused = await h.as("alice", "POST", "/projects", {
      name: "x",
      backend: "microvm",
      idle: "stop",
      idle_shutdown: false,
    });
    expect(refused.statusCode).toBe(400);
    expect(refused.json().details.map((d: { field: string }) => d.field)).toContain("idle_shutdown");
    const stopping = await h.as("alice", "POST", "/projects", {
      name: "y",
      backend: "microvm",
      idle: "stop",
    });
    expect(stopping.statusCode, stopping.body).toBe(202);
    expect(stopping.json()).toMatchObject({ idle: "stop", idle_shutdown: true });
    await work();
  });

  it("pause asks a snapshot and a stop that keeps the memory, stop one that drops it, none nothing; a start keeps it again", async () => {
    const paused = await microVm({ idle: "pause" });
    const stopped = await microVm({ idle: "stop" });
    const kept = await microVm({ idle: "none" });
    const job = idleShutdownJob(h.db, {
      idleMinutes: 0.001,
      intervalMs: 60_000,
      liveTerminal: () => false,
      backends: platformBackends({ docker: () => undefined as never }),
    });
    await new Promise((resolve) => setTimeout(resolve, 100));
    const ran = (await job.run()) as { stopped: string[] };
    expect(ran.stopped).toEqual(expect.arrayContaining([paused, stopped]));
    expect(ran.stopped).not.toContain(kept);
    for (const [id, keepMemory] of [
      [paused, true],
      [stopped, false],
    ] as const) {
      const spec = await specOf(id);
      expect({ id, running: spec.running, keepMemory: spec.microvm?.keepMemory }).toEqual({
        id,
        running: false,
        keepMemory,
      });
    }
    expect((await specOf(kept)).running).toBe(true);
    // The start after a stop that dropped the memory: the next stop keeps it again.
    while ((await h.db.query("select 1 from operations where state = 'pending'")).rows.length > 0)
      await work();
    expect((await h.as("alice", "POST", `/projects/${stopped}/start`)).statusCode).toBe(202);
    expect((await specOf(stopped)).microvm?.keepMemory).toBe(true);
    await work();
  });

  it("a stop keeps the memory unless keep_memory is false; its body is checked", async () => {
    const id = await microVm();
    const drop = await h.as("alice", "POST", `/projects/${id}/stop`, { keep_memory: false });
    expect(drop.statusCode, drop.body).toBe(202);
    expect((await specOf(id)).microvm?.keepMemory).toBe(false);
    await work();
    expect((await h.as("alice", "POST", `/projects/${id}/start`)).statusCode).toBe(202);
    await work();
    expect((await h.as("alice", "POST", `/projects/${id}/stop`)).statusCode).toBe(202);
    expect((await specOf(id)).microvm?.keepMemory).toBe(true);
    await work();
    // A restore runs it again too: its next stop keeps the memory once more.
    expect((await h.as("alice", "POST", `/projects/${id}/stop`, { keep_memory: false })).statusCode).toBe(
      202,
    );
    await work();
    await requestOperation(h.db, id, "restore", undefined, {
      image: "agent-sandbox/some:snapshot",
      running: true,
    });
    expect((await specOf(id)).microvm?.keepMemory).toBe(true);
    await work();
    const bad = await h.as("alice", "POST", `/projects/${id}/stop`, { keep_memory: "no" });
    expect(bad.statusCode).toBe(400);
    expect(bad.json().details.map((d: { field: string }) => d.field)).toContain("keep_memory");
  });
});

describe("a pause in the project's view, and the memory retention", () => {
  it("the microVM backend reads the kept image beside the disks: its size and save time, or files when it is cut", async () => {
    const id = await microVm();
    const spec = await specOf(id);
    const backend = platformBackends({ docker: () => undefined as never }).of(spec);
    expect(await backend.paused!(spec)).toEqual({ kind: "files" });
    const files = microVmFiles(path.join(stateRoot, id));
    await fs.mkdir(path.dirname(files.memory), { recursive: true });
    await fs.writeFile(files.memory, Buffer.alloc(4096, 7));
    const savedAt = "2026-12-01T10:00:00.000Z";
    await fs.writeFile(files.memoryInfo, JSON.stringify({ fingerprint: "f", bytes: 4096, savedAt }));
    expect(await backend.paused!(spec)).toEqual({ kind: "memory", bytes: 4096, saved_at: savedAt });
    // A cut image (its size is not the one written) is no pause with memory: the next start boots.
    await fs.truncate(files.memory, 100);
    expect(await backend.paused!(spec)).toEqual({ kind: "files" });
    // How its latest start went, as the provider recorded it beside the disks.
    expect(await backend.started!(spec)).toBeUndefined();
    await recordBoot(path.join(stateRoot, id), {
      resumed: false,
      coldReason: "it is 100 bytes where 4096 were written",
    });
    expect(await backend.started!(spec)).toEqual({
      from: "disks",
      cold_reason: "it is 100 bytes where 4096 were written",
      at: expect.any(String),
    });
    await recordBoot(path.join(stateRoot, id), { resumed: true });
    expect(await backend.started!(spec)).toMatchObject({ from: "memory", cold_reason: null });
  });

  it("shows how a stopped project sleeps; the retention drops an image past its hours by an update, once", async () => {
    const id = await microVm();
    expect((await h.as("alice", "POST", `/projects/${id}/stop`)).statusCode).toBe(202);
    await work();
    // What the stop's handler records after its up (runtime/reconciler/handlers.ts).
    const savedAt = new Date(Date.now() - 3 * 3600_000).toISOString();
    await recordPause(h.db, id, { kind: "memory", bytes: 1 << 20, saved_at: savedAt });
    expect((await view(id)).pause).toEqual({ kind: "memory", memory_bytes: 1 << 20, saved_at: savedAt });

    // Younger than its retention: kept.
    expect(await memoryRetentionJob(h.db, 4, 60_000).run()).toEqual({ dropped: [] });
    // 0 keeps images until the next start.
    expect(await memoryRetentionJob(h.db, 0, 60_000).run()).toEqual({ dropped: [] });
    const job = memoryRetentionJob(h.db, 2, 60_000);
    expect(await job.run()).toEqual({ dropped: [id] });
    // Pending: not asked again.
    expect(await job.run()).toEqual({ dropped: [] });
    const update = await work();
    expect(update).toMatchObject({
      kind: "update",
      idempotency_key: `${MEMORY_RETENTION}${id}-${Date.parse(savedAt)}`,
    });
    const spec = await specOf(id);
    expect([spec.running, spec.microvm?.keepMemory]).toEqual([false, false]);
    // The update's handler records what the provider left: its files alone.
    await recordPause(h.db, id, { kind: "files" });
    expect((await view(id)).pause).toEqual({ kind: "files", memory_bytes: null, saved_at: null });
    expect(await job.run()).toEqual({ dropped: [] });
    // It is still asleep as its owner left it (an update changes nothing of whether it runs); a start clears it.
    expect((await view(id)).status).toBe("stopped");
    expect((await h.as("alice", "POST", `/projects/${id}/start`)).statusCode).toBe(202);
    await work();
    await recordPause(h.db, id, null);
    expect((await view(id)).pause).toBeNull();
  });
});
