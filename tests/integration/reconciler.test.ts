// The reconciler: durable operations executed against real tenant stacks, on PGlite and on Postgres,
// and a worker killed with SIGKILL in the middle of a create whose operation another worker finishes.
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tenantNames } from "../../components/tenant/names.js";
import type { Database } from "../../runtime/store/db.js";
import { run, waitFor } from "../../lib/process.js";
import { getOperation, operationEvents } from "../../runtime/store/operations.js";
import type { Reconciler } from "../../runtime/reconciler/reconciler.js";
import { tenantDefaults } from "../../runtime/tenants/config.js";
import { requestCreate, requestOperation, TenantRequestError } from "../../runtime/tenants/service.js";
import { REPO_ROOT } from "../../lib/toolchain.js";
import type { StackConfig } from "../../stacks/config.js";
import { settledOperation as settled, testReconciler, writeStackFile } from "../helpers/api.js";
import { docker, uniqueName } from "../helpers/containers.js";
import { testPlatform, type TestPlatform } from "../helpers/host.js";
import { DATABASE_KINDS, testDatabase, type TestDatabase } from "../helpers/postgres.js";
import { getTenant } from "../../runtime/store/tenants.js";

let platform: TestPlatform;
let config: StackConfig;
let configFile: string;
const suffix = uniqueName("r").slice(2, 8);

beforeAll(async () => {
  platform = await testPlatform({
    subnetPool: "10.233.0.0/23",
    sshPortRange: [27100, 27140],
    backupIntervalSeconds: 300,
    leaseSeconds: 3,
    maxConcurrent: 2,
  });
  config = platform.config;
  configFile = await writeStackFile(config.host, "reconciler-test", {
    target: config.target,
    host: config.host,
    tenants: config.tenants,
  });
}, 900_000);

afterAll(() => platform?.stop(), 120_000);

const containerState = (projectId: string) =>
  docker("inspect", "--format", "{{.State.Running}}", tenantNames(projectId).container).catch(() => "absent");

describe.each(DATABASE_KINDS)("reconciled tenants on %s", (kind) => {
  let database: TestDatabase;
  let db: Database;
  let reconciler: Reconciler;
  const projectId = `rec-${kind.slice(0, 2)}-${suffix}`;

  beforeAll(async () => {
    // Reconcilers claim from the whole table: a database of its own on the shared server.
    database = await testDatabase(kind, { under: config.host.dataDir });
    db = database.db;
    reconciler = testReconciler(db, config);
  });

  afterAll(async () => {
    await reconciler?.stop();
    await database?.close();
  });

  it("create: desired state recorded at once, the operation runs, the sandbox ends up running", async () => {
    const { operation, created } = await requestCreate(db, tenantDefaults(config), {
      projectId,
      ownerId: "user-1",
      idempotencyKey: `create-${projectId}`,
    });
    expect(created).toBe(true);
    expect((await getTenant(db, projectId))?.state).toBe("creating");
    const again = await requestCreate(db, tenantDefaults(config), {
      projectId,
      ownerId: "user-1",
      idempotencyKey: `create-${projectId}`,
    });
    expect(again).toMatchObject({ created: false, operation: { id: operation.id } });

    const done = await settled(db, operation);
    expect(done).toMatchObject({ state: "succeeded", attempt: 1, error: null });
    const tenant = await getTenant(db, projectId);
    expect(tenant).toMatchObject({ state: "running", subnet: "10.233.0.0/24" });
    expect(await containerState(projectId)).toBe("true");
    const events = await operationEvents(db, operation.id);
    expect(events.map((e) => `${e.event.op} ${e.event.resource} ${e.event.status}`)).toContain(
      "create sandbox:docker:Container done",
    );
    expect(events.at(-1)?.event.type).toBe("summary");
  });

  it("stop, then start, change the run state in place", async () => {
    const stop = await requestOperation(db, projectId, "stop");
    expect((await getTenant(db, projectId))?.spec.running).toBe(false);
    const stopped = await settled(db, stop.operation);
    expect(stopped).toMatchObject({ state: "succeeded" });
    // The engine's own count of the changes (its summary event; the stack is not read back after an up).
    expect(stopped.result).toMatchObject({ changes: { update: 1, same: expect.any(Number) } });
    expect(await containerState(projectId)).toBe("false");
    expect((await getTenant(db, projectId))?.state).toBe("stopped");
    const start = await requestOperation(db, projectId, "start");
    expect(await settled(db, start.operation)).toMatchObject({ state: "succeeded" });
    expect(await containerState(projectId)).toBe("true");
    expect((await getTenant(db, projectId))?.state).toBe("running");
  });

  it("check-drift reports nothing, then a container removed behind its back", async () => {
    const clean = await requestOperation(db, projectId, "check-drift");
    // Untouched, the stack is answered in-process (runtime/tenants/drift-precheck.ts), without the engine.
    expect((await settled(db, clean.operation)).result).toEqual({
      drifted: false,
      changes: {},
      resources: [],
      checked: "in-process",
    });
    await docker("rm", "--force", tenantNames(projectId).container);
    const drifted = await requestOperation(db, projectId, "check-drift");
    expect((await settled(db, drifted.operation)).result).toEqual({
      drifted: true,
      changes: { delete: 1 },
      resources: [
        {
          type: "sandbox:docker:Container",
          urn: expect.stringContaining("sandbox:docker:Container"),
          change: "deleted",
          properties: [],
        },
      ],
      checked: "engine",
      precheck: expect.stringMatching(/sandbox:docker:Container.* no longer exists$/),
    });
    const repair = await requestOperation(db, projectId, "update");
    expect(await settled(db, repair.operation)).toMatchObject({ state: "succeeded" });
    expect(await containerState(projectId)).toBe("true");
  });

  it("bad requests are refused before anything is recorded", async () => {
    const refused = (promise: Promise<unknown>) =>
      promise.then(
        () => undefined,
        (error: unknown) => error as TenantRequestError,
      );
    expect(
      await refused(requestCreate(db, tenantDefaults(config), { projectId: "Bad_Id", ownerId: "u" })),
    ).toMatchObject({
      status: 400,
      message: expect.stringContaining("projectId"),
    });
    expect(
      await refused(requestCreate(db, tenantDefaults(config), { projectId, ownerId: "u" })),
    ).toMatchObject({ status: 409 });
    expect(await refused(requestOperation(db, "no-such-project", "start"))).toMatchObject({ status: 404 });
    const exhausted = { ...tenantDefaults(config), subnetPool: "10.233.0.0/24" };
    expect(
      await refused(requestCreate(db, exhausted, { projectId: `other-${suffix}`, ownerId: "u" })),
    ).toMatchObject({
      status: 503,
      capacity: "agent-sandbox:tenants.subnetPool",
      message:
        "subnet pool 10.233.0.0/24 is exhausted: all 1 /24 subnets are allocated (agent-sandbox:tenants.subnetPool); one frees when a project is deleted",
    });
    expect(await getTenant(db, `other-${suffix}`)).toBeUndefined();
  });

  it("delete removes the sandbox and releases its subnet and port; the project is then gone", async () => {
    const { operation } = await requestOperation(db, projectId, "delete");
    // A failed delete's error and events are the message (a full run once failed it with neither shown).
    const deleted = await settled(db, operation);
    const events = (await operationEvents(db, operation.id)).map((e) => JSON.stringify(e.event));
    expect(deleted, `${deleted.error ?? ""}\n${events.slice(-10).join("\n")}`).toMatchObject({
      state: "succeeded",
      result: { outcome: "deleted" },
    });
    expect(await getTenant(db, projectId)).toMatchObject({ state: "deleted", subnet: null, ssh_port: null });
    expect(await containerState(projectId)).toBe("absent");
    expect(existsSync(path.join(config.host.dataDir, "backups", projectId))).toBe(false);
    expect(existsSync(path.join(path.resolve(config.host.dataDir), "disks", projectId))).toBe(false);
    await expect(requestOperation(db, projectId, "delete")).rejects.toMatchObject({ status: 404 });
  });
});

describe("a worker killed in the middle of a create", () => {
  let database: TestDatabase;
  let db: Database;
  const workers: ChildProcess[] = [];
  const projectId = `kill9-${suffix}`;

  /** What the workers logged (their lines and any error), for a failure's message. */
  let said = "";
  const startWorker = () => {
    const worker = spawn(process.execPath, ["--import", "tsx", "runtime/reconciler/worker.ts"], {
      cwd: REPO_ROOT,
      env: { ...process.env, AGENT_SANDBOX_CONFIG: configFile, DATABASE_URL: database.url },
      stdio: ["ignore", "pipe", "pipe"],
    });
    for (const stream of [worker.stdout, worker.stderr])
      stream.on("data", (chunk: Buffer) => (said = (said + chunk.toString("utf8")).slice(-4000)));
    workers.push(worker);
    return worker;
  };

  beforeAll(async () => {
    database = await testDatabase("postgres");
    db = database.db;
  });

  afterAll(async () => {
    for (const worker of workers) worker.kill("SIGKILL");
    await database?.close();
  });

  it("the operation is taken over when the lease expires and finishes by itself, with nothing duplicated", async () => {
    const { operation } = await requestCreate(db, tenantDefaults(config), { projectId, ownerId: "user-9" });
    const first = startWorker();
    // Kill it as soon as the engine has created the bridge, with the rest of the stack still to come.
    // A worker that never got there says why: what it logged is the error.
    await waitFor("the first resources of the create", 120_000, async () => {
      const events = await operationEvents(db, operation.id);
      return events.some((e) => e.event.resource === "sandbox:docker:Network" && e.event.status === "done")
        ? true
        : undefined;
    }).catch((error: Error) => {
      throw new Error(`${error.message}; the worker logged:\n${said}`);
    });
    first.kill("SIGKILL");
    await new Promise((resolve) => first.once("exit", resolve));
    const orphaned = await getOperation(db, operation.id);
    expect(orphaned).toMatchObject({ state: "running", attempt: 1 });

    startWorker();
    const done = await settled(db, operation);
    expect(done).toMatchObject({ state: "succeeded", error: null });
    expect(done.attempt).toBe(2);
    expect(done.lease_owner).not.toBe(orphaned?.lease_owner);
    expect(await getTenant(db, projectId)).toMatchObject({ state: "running" });
    expect(await containerState(projectId)).toBe("true");
    // The dead worker's engine was stopped, not left to race the new one.
    const engines = await run("ps", ["-eo", "args="]).then((r) =>
      r.stdout.split("\n").filter((l) => l.includes(`tenant-${projectId}`)),
    );
    expect(engines).toEqual([]);
    // Nor are its provider plugins left behind, re-parented to init.
    await waitFor("orphaned plugins to exit", 10_000, async () => {
      const { stdout } = await run("ps", ["-eo", "ppid=,args="]);
      const orphans = stdout.split("\n").filter((l) => /^\s*1\s/.test(l) && l.includes("dist/plugins/"));
      return orphans.length === 0 ? true : undefined;
    });
    // One of everything: the takeover adopted what the dead worker had made.
    const networks = await docker(
      "network",
      "ls",
      "--filter",
      `label=dev.agent-sandbox.tenant=${projectId}`,
      "--format",
      "{{.Name}}",
    );
    expect(networks.split("\n")).toEqual([tenantNames(projectId).network]);

    const removal = await requestOperation(db, projectId, "delete");
    expect(await settled(db, removal.operation)).toMatchObject({ state: "succeeded" });
    expect(await containerState(projectId)).toBe("absent");
  });
});
