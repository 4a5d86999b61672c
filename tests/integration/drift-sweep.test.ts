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
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tenantNames } from "../../components/tenant/names.js";
import { waitFor } from "../../lib/process.js";
import { driftSweepJob } from "../../runtime/jobs/drift.js";
import { JobScheduler } from "../../runtime/jobs/scheduler.js";
import { Metrics } from "../../runtime/metrics.js";
import { getOperation } from "../../runtime/store/operations.js";
import { TENANT_PROJECT } from "../../runtime/tenants/stack.js";
import { requestOperation } from "../../runtime/tenants/service.js";
import { apiHarness, testReconciler, type ApiHarness } from "../helpers/api.js";
import { docker } from "../helpers/containers.js";
import { testPlatform, type TestPlatform } from "../helpers/host.js";
import { testDatabase } from "../helpers/postgres.js";

const exec = promisify(execFile);
const TENANTS = 10;
let platform: TestPlatform;
let h: ApiHarness<"alice" | "bob">;
/** Project ids, alice's first five, bob's last five. */
const ids: string[] = [];
const [removed, ruleDeleted, fragmentEdited, memoryChanged, corrupt, busy] = [0, 1, 2, 3, 5, 6];
let stateFile: string;
let goodState: string;

const ownerOf = (index: number) => (index < 5 ? "alice" : "bob");
const driftOf = async (index: number) =>
  (await h.as(ownerOf(index), "GET", `/projects/${ids[index]}/drift`)).json();
let sweeper: JobScheduler;
/** Runs a sweep and waits until every check it enqueued (and any repair they asked for) has finished. */
async function sweepAndSettle(): Promise<number> {
  const run = await sweeper.runNow("drift-sweep");
  await waitFor("the sweep's checks and repairs", 600_000, async () => {
    const { rows } = await h.db.query<{ n: number }>(
      "select count(*)::int as n from operations where state in ('pending', 'running')",
    );
    return rows[0]!.n === 0 ? true : undefined;
  });
  return (run?.last_detail as { enqueued: number }).enqueued;
}

beforeAll(async () => {
  platform = await testPlatform({
    subnetPool: "10.233.32.0/20",
    sshPortRange: [28850, 28869],
    leaseSeconds: 10,
    maxConcurrent: 3,
    driftRemediation: "report",
    driftStallAfter: 2,
  });
  const { config } = platform;
  h = await apiHarness({
    database: await testDatabase("pglite", { under: config.host.dataDir }),
    config,
    users: ["alice", "bob"],
    reconciler: true,
  });
  sweeper = new JobScheduler(h.db, [driftSweepJob(h.db, 3_600_000)]);
  for (let i = 0; i < TENANTS; i++) {
    const created = await h.as(ownerOf(i), "POST", "/projects", { name: `drift-${i}` });
    expect(created.statusCode, created.body).toBe(202);
    ids.push(created.json().project_id);
  }
  for (let i = 0; i < TENANTS; i++) await h.waitForStatus(ownerOf(i), ids[i]!, "running", 600_000);
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
  await h?.close();
  await platform?.stop();
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
      platform.config.host.configDir,
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
    const live = await requestOperation(h.db, id(busy), "stop");

    expect(await sweepAndSettle()).toBe(TENANTS);
    expect(await getOperation(h.db, live.operation.id)).toMatchObject({ state: "succeeded" });
    const { rows: checks } = await h.db.query<{ started_at: Date }>(
      "select started_at from operations where project_id = $1 and kind = 'check-drift'",
      [id(busy)],
    );
    expect(checks[0]!.started_at.getTime()).toBeGreaterThanOrEqual(
      (await getOperation(h.db, live.operation.id))!.finished_at!.getTime(),
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
    expect((await h.as("alice", "GET", `/projects/${id(removed)}`)).json().drift).toMatchObject({
      status: "drifted",
      resources: 1,
      stalled: false,
    });
    expect((await h.as("bob", "GET", `/projects/${id(removed)}/drift`)).statusCode).toBe(404);
    const metrics = await new Metrics().render(h.db);
    expect(metrics).toContain('agent_sandbox_projects_drift{finding="drifted"} 4');
    expect(metrics).toContain('agent_sandbox_projects_drift{finding="failed"} 1');
  });

  it("with repair the four are put back and the next sweep is clean; the corrupt stack stalls and is left alone", async () => {
    await h.reconciler!.stop();
    h.reconciler = testReconciler(h.db, platform.config, { driftRemediation: "repair" });
    await sweepAndSettle(); // checks find the drift again and queue an update for each of the four
    expect(await driftOf(corrupt)).toMatchObject({ status: "failed", stalled: true });
    expect(await sweepAndSettle()).toBe(TENANTS - 1); // the stalled one is not checked
    const findings = await Promise.all(ids.map((_, i) => driftOf(i)));
    for (const [i, finding] of findings.entries())
      if (i !== corrupt) expect(finding, `project ${i}`).toMatchObject({ status: "clean", resources: [] });
    expect(
      await docker(
        "inspect",
        "--format",
        "{{.HostConfig.Memory}}",
        tenantNames(ids[memoryChanged]!).container,
      ),
    ).toBe(String(1024 * 1024 * 1024));
    expect(
      await docker("inspect", "--format", "{{.State.Running}}", tenantNames(ids[removed]!).container),
    ).toBe("true");
  });
});
