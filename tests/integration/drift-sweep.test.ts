// The drift sweep (issue 14): ten tenant stacks up; four changed out of band (a container removed, an
// iptables rule deleted, a Squid fragment edited, a memory limit changed), one with corrupt state, one busy
// with a live operation. One sweep reports exactly the four, each with the right resource and property,
// reports the corrupt one as failed (and, checks failing in a row, stalled) without stopping, and checks
// the busy one only after its operation; `repair` puts the four back and the next sweep is clean. An
// owner sees only their own drift. Real reconciler, engine, provider, iptables and Squid.
import { execFile } from "node:child_process";
import { promises as fs } from "node:fs";
import * as path from "node:path";
import { promisify } from "node:util";
import type { FastifyInstance } from "fastify";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tenantNames } from "../../components/tenant/names.js";
import { dockerClient } from "../../lib/docker-client.js";
import { waitFor } from "../../lib/process.js";
import { Auth, DEFAULT_AUTH } from "../../runtime/api/auth.js";
import { openDatabase, type Database } from "../../runtime/db.js";
import { driftSweepJob } from "../../runtime/jobs/drift.js";
import { JobScheduler } from "../../runtime/jobs/scheduler.js";
import { Metrics } from "../../runtime/metrics.js";
import { migrate } from "../../runtime/migrations.js";
import { getOperation } from "../../runtime/reconciler/operations.js";
import { Reconciler } from "../../runtime/reconciler/reconciler.js";
import { SecretBox } from "../../runtime/secrets.js";
import { buildServer } from "../../runtime/server.js";
import { tenantDefaults, tenantStackOptions } from "../../runtime/tenants/config.js";
import { TENANT_PROJECT } from "../../runtime/tenants/stack.js";
import { requestOperation } from "../../runtime/tenants/service.js";
import { buildSandboxImage } from "../../sandbox-image/build.js";
import { StackConfig } from "../../stacks/config.js";
import { isolatedSquidHost } from "../helpers/host.js";

const exec = promisify(execFile);
const TENANTS = 10;
let squid: Awaited<ReturnType<typeof isolatedSquidHost>>;
let config: StackConfig;
let db: Database;
let app: FastifyInstance;
let reconciler: Reconciler;
const tokens = { alice: "", bob: "" };
/** Project ids, alice's first five, bob's last five. */
const ids: string[] = [];
const [removed, ruleDeleted, fragmentEdited, memoryChanged, corrupt, busy] = [0, 1, 2, 3, 5, 6];
let stateFile: string;
let goodState: string;

const as = (who: "alice" | "bob", method: "GET" | "POST" | "DELETE", url: string, payload?: object) =>
  app.inject({ method, url, payload, headers: { authorization: `Bearer ${tokens[who]}` } });
const ownerOf = (index: number) => (index < 5 ? "alice" : "bob");
const driftOf = async (index: number) =>
  (await as(ownerOf(index), "GET", `/projects/${ids[index]}/drift`)).json();
const startReconciler = (remediation: "report" | "repair") => {
  reconciler = new Reconciler({
    db,
    stack: tenantStackOptions(config),
    leaseMs: 10_000,
    pollMs: 200,
    maxConcurrent: 3,
    driftRemediation: remediation,
    driftStallAfter: 2,
  });
  reconciler.start();
};
let sweeper: JobScheduler;
/** Runs a sweep and waits until every check it enqueued (and any repair they asked for) has finished. */
async function sweepAndSettle(): Promise<number> {
  const run = await sweeper.runNow("drift-sweep");
  await waitFor("the sweep's checks and repairs", 600_000, async () => {
    const { rows } = await db.query<{ n: number }>(
      "select count(*)::int as n from operations where state in ('pending', 'running')",
    );
    return rows[0]!.n === 0 ? true : undefined;
  });
  return (run?.last_detail as { enqueued: number }).enqueued;
}

beforeAll(async () => {
  squid = await isolatedSquidHost();
  const image = (await buildSandboxImage({ base: "local", log: () => undefined })).tag;
  config = StackConfig.parse({
    target: "local",
    host: squid.host,
    tenants: { image, subnetPool: "10.233.32.0/20", sshPortRange: [27240, 27259], leaseSeconds: 10 },
  });
  db = await openDatabase({ dataDir: path.join(config.host.dataDir, "db") });
  await migrate(db);
  app = buildServer({
    prerequisites: [],
    logger: false,
    auth: new Auth(db, {
      ...DEFAULT_AUTH,
      secret: new TextEncoder().encode("a-test-signing-key-that-is-at-least-32-bytes"),
    }),
    projects: {
      db,
      defaults: tenantDefaults(config),
      secrets: SecretBox.fromDataDir(config.host.dataDir),
      publicHost: "127.0.0.1",
      docker: dockerClient(),
    },
  });
  sweeper = new JobScheduler(db, [driftSweepJob(db, 3_600_000)]);
  startReconciler("report");
  for (const who of ["alice", "bob"] as const) {
    const credentials = {
      email: `${who}-drift-${Date.now()}@example.test`,
      password: "correct horse battery staple",
    };
    await app.inject({ method: "POST", url: "/auth/register", payload: credentials });
    tokens[who] = (
      await app.inject({ method: "POST", url: "/auth/login", payload: credentials })
    ).json().access_token;
  }
  for (let i = 0; i < TENANTS; i++) {
    const created = await as(ownerOf(i), "POST", "/projects", { name: `drift-${i}` });
    expect(created.statusCode, created.body).toBe(202);
    ids.push(created.json().project_id);
  }
  for (let i = 0; i < TENANTS; i++)
    await waitFor(`project ${i} running`, 600_000, async () => {
      const status = (await as(ownerOf(i), "GET", `/projects/${ids[i]}`)).json().status;
      if (status === "error") throw new Error(`project ${i} failed to create`);
      return status === "running" ? true : undefined;
    });
  stateFile = path.join(
    config.host.dataDir,
    "state",
    ".pulumi",
    "stacks",
    TENANT_PROJECT,
    `${tenantNames(ids[corrupt]!).stack}.json`,
  );
  goodState = await fs.readFile(stateFile, "utf8");
}, 1_200_000);

afterAll(async () => {
  if (goodState) await fs.writeFile(stateFile, goodState); // so that its delete can run
  for (let i = 0; i < ids.length; i++) await as(ownerOf(i), "DELETE", `/projects/${ids[i]}`);
  await waitFor("every project deleted", 600_000, async () => {
    const { rows } = await db.query<{ n: number }>(
      "select count(*)::int as n from tenants where state <> 'deleted'",
    );
    return rows[0]!.n === 0 ? true : undefined;
  }).catch(() => undefined);
  await reconciler?.stop();
  await app?.close();
  await db?.close();
  await squid?.stop();
}, 900_000);

describe("the drift sweep", () => {
  it("reports exactly the four changed stacks with resource and property, the corrupt one as failed, and checks the busy one after its operation", async () => {
    const id = (i: number) => ids[i]!;
    await exec("docker", ["rm", "--force", tenantNames(id(removed)).container]);
    const rules = (await exec("iptables", ["-w", "-S", "SANDBOX-FORWARD"])).stdout
      .split("\n")
      .filter((line) => line.includes(`agent-sandbox:tenant=${id(ruleDeleted)}`));
    await exec("sh", ["-c", `iptables -w ${rules[0]!.replace(/^-A /, "-D ")}`]);
    const fragment = path.join(
      config.host.configDir,
      "squid",
      "tenants",
      `tenant-${id(fragmentEdited)}.conf`,
    );
    await fs.appendFile(fragment, "# edited by hand\n");
    await exec("docker", [
      "update",
      "--memory",
      "700m",
      "--memory-swap",
      "700m",
      tenantNames(id(memoryChanged)).container,
    ]);
    await fs.writeFile(stateFile, "{ this is not a checkpoint");
    // A live operation on another stack when the sweep comes: its check waits behind it.
    const live = await requestOperation(db, id(busy), "stop");

    expect(await sweepAndSettle()).toBe(TENANTS);
    expect(await getOperation(db, live.operation.id)).toMatchObject({ state: "succeeded" });
    const { rows: checks } = await db.query<{ started_at: Date }>(
      "select started_at from operations where project_id = $1 and kind = 'check-drift'",
      [id(busy)],
    );
    expect(checks[0]!.started_at.getTime()).toBeGreaterThanOrEqual(
      (await getOperation(db, live.operation.id))!.finished_at!.getTime(),
    );

    const findings = await Promise.all(ids.map((_, i) => driftOf(i)));
    const drifted = findings.flatMap((f, i) => (f.status === "drifted" ? [i] : []));
    expect(drifted).toEqual([removed, ruleDeleted, fragmentEdited, memoryChanged]);
    expect(findings[removed].resources).toEqual([
      expect.objectContaining({ type: "sandbox:docker:Container", change: "deleted", properties: [] }),
    ]);
    expect(findings[ruleDeleted].resources).toEqual([
      expect.objectContaining({
        type: "sandbox:host:TenantFirewall",
        change: "changed",
        properties: ["missing"],
      }),
    ]);
    expect(findings[fragmentEdited].resources).toEqual([
      expect.objectContaining({ type: "sandbox:host:SquidTenant", change: "changed" }),
    ]);
    expect(findings[fragmentEdited].resources[0].properties.length).toBeGreaterThan(0);
    expect(findings[memoryChanged].resources).toEqual([
      expect.objectContaining({
        type: "sandbox:docker:Container",
        change: "changed",
        properties: expect.arrayContaining(["memoryBytes"]),
      }),
    ]);
    expect(findings[corrupt]).toMatchObject({ status: "failed", stalled: false, error: expect.any(String) });
    for (const i of [4, busy, 7, 8, 9])
      expect(findings[i], `project ${i}`).toMatchObject({ status: "clean", resources: [] });
    // The owner's view carries the summary; another user gets 404 for the details.
    expect((await as("alice", "GET", `/projects/${id(removed)}`)).json().drift).toMatchObject({
      status: "drifted",
      resources: 1,
      stalled: false,
    });
    expect((await as("bob", "GET", `/projects/${id(removed)}/drift`)).statusCode).toBe(404);
    const metrics = await new Metrics().render(db);
    expect(metrics).toContain('agent_sandbox_projects_drift{finding="drifted"} 4');
    expect(metrics).toContain('agent_sandbox_projects_drift{finding="failed"} 1');
  });

  it("with repair the four are put back and the next sweep is clean; the corrupt stack stalls and is left alone", async () => {
    await reconciler.stop();
    startReconciler("repair");
    await sweepAndSettle(); // checks find the drift again and queue an update for each of the four
    expect(await driftOf(corrupt)).toMatchObject({ status: "failed", stalled: true });
    expect(await sweepAndSettle()).toBe(TENANTS - 1); // the stalled one is not checked
    const findings = await Promise.all(ids.map((_, i) => driftOf(i)));
    for (const [i, finding] of findings.entries())
      if (i !== corrupt) expect(finding, `project ${i}`).toMatchObject({ status: "clean", resources: [] });
    expect(
      (
        await exec("docker", [
          "inspect",
          "--format",
          "{{.HostConfig.Memory}}",
          tenantNames(ids[memoryChanged]!).container,
        ])
      ).stdout.trim(),
    ).toBe(String(1024 * 1024 * 1024));
    expect(
      (
        await exec("docker", [
          "inspect",
          "--format",
          "{{.State.Running}}",
          tenantNames(ids[removed]!).container,
        ])
      ).stdout.trim(),
    ).toBe("true");
  });
});
