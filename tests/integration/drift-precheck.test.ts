// The drift check's in-process pre-check (runtime/tenants/drift-precheck.ts) on a real container tenant: an
// untouched stack is answered without the engine, and each out-of-band change the engine's refresh finds is
// still found: the pre-check refuses to call it clean and the engine reports the drift, naming the resource.
// Changes: a secret's host file edited, a firewall rule deleted, the tenant's Squid fragment edited, the
// container removed; after each, an update puts it back and the next check is in-process and clean again.
// Real reconciler, engine, provider, iptables and Squid.
import { execFile } from "node:child_process";
import { promises as fs } from "node:fs";
import * as path from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tenantNames } from "../../components/tenant/names.js";
import { waitFor } from "../../lib/process.js";
import { tenantDefaults } from "../../runtime/tenants/config.js";
import { requestOperation } from "../../runtime/tenants/service.js";
import { apiHarness, settledOperation, type ApiHarness } from "../helpers/api.js";
import { tenantLeftovers, testPlatform, type TestPlatform } from "../helpers/host.js";
import { testDatabase } from "../helpers/postgres.js";

const exec = promisify(execFile);
const SECRET = "DRIFT_PRECHECK_TOKEN";
let platform: TestPlatform;
let h: ApiHarness<"alice">;
let projectId = "";

/** One check-drift operation through the reconciler: its recorded result. */
async function checkDrift(): Promise<Record<string, unknown>> {
  const { operation } = await requestOperation(h.db, projectId, "check-drift");
  const done = await settledOperation(h.db, operation);
  expect(done.state, done.error ?? "").toBe("succeeded");
  return done.result as Record<string, unknown>;
}

/** The update that puts the stack back (up --refresh), then a check that is in-process and clean again. */
async function repairedAndClean(): Promise<void> {
  const { operation } = await requestOperation(h.db, projectId, "update");
  const done = await settledOperation(h.db, operation);
  expect(done.state, done.error ?? "").toBe("succeeded");
  expect(await checkDrift()).toEqual({ drifted: false, changes: {}, resources: [], checked: "in-process" });
}

/** The engine's finding for one changed resource of `type`, after the pre-check named it. */
function engineFound(type: string, change: "changed" | "deleted") {
  return {
    drifted: true,
    changes: { [change === "deleted" ? "delete" : "update"]: 1 },
    resources: [expect.objectContaining({ type, change })],
    checked: "engine",
    precheck: expect.stringContaining(type),
  };
}

beforeAll(async () => {
  platform = await testPlatform({
    subnetPool: "10.222.0.0/24",
    sshPortRange: [29400, 29405],
    driftRemediation: "report",
  });
  h = await apiHarness({
    database: await testDatabase("pglite", { under: platform.config.host.dataDir }),
    config: platform.config,
    users: ["alice"],
    reconciler: true,
  });
  const created = await h.as("alice", "POST", "/projects", { name: "drift-precheck" });
  expect(created.statusCode, created.body).toBe(202);
  projectId = created.json().project_id;
  await h.waitForStatus("alice", projectId, "running", 600_000);
  // A project secret: a host file whose content the stack holds as a Pulumi secret.
  const answer = await h.as("alice", "PUT", `/projects/${projectId}/secrets/${SECRET}`, { value: "s3cret" });
  expect(answer.statusCode, answer.body).toBe(202);
  const queued = answer.json().operation;
  await waitFor("the secret's update", 300_000, async () => {
    const { rows } = await h.db.query<{ state: string }>("select state from operations where id = $1", [
      queued.id,
    ]);
    return rows[0]?.state === "succeeded" ? true : undefined;
  });
}, 900_000);

afterAll(async () => {
  if (h && projectId) {
    const { operation } = await requestOperation(h.db, projectId, "delete");
    await settledOperation(h.db, operation, 300_000);
    expect(await tenantLeftovers(platform.config.host, projectId)).toEqual([]);
  }
  await h?.close();
  await platform?.stop();
}, 600_000);

describe("the drift check's in-process pre-check", () => {
  it("answers an untouched stack without the engine, and records it clean", async () => {
    expect(await checkDrift()).toEqual({ drifted: false, changes: {}, resources: [], checked: "in-process" });
    expect((await h.as("alice", "GET", `/projects/${projectId}/drift`)).json()).toMatchObject({
      status: "clean",
      resources: [],
    });
  });

  it("leaves a secret's host file edited by hand to the engine, which reports it", async () => {
    const file = path.join(tenantDefaults(platform.config).host.secretsRoot!, projectId, SECRET);
    expect(await fs.readFile(file, "utf8")).toBe("s3cret");
    await fs.writeFile(file, "tampered");
    expect(await checkDrift()).toEqual(engineFound("sandbox:host:File", "changed"));
    await repairedAndClean();
    expect(await fs.readFile(file, "utf8")).toBe("s3cret");
  });

  it("leaves a deleted firewall rule to the engine, which reports it", async () => {
    const rules = (await exec("iptables", ["-w", "-S", "SANDBOX-FORWARD"])).stdout
      .split("\n")
      .filter((line) => line.includes(`agent-sandbox:tenant=${projectId}`));
    expect(rules.length).toBeGreaterThan(0);
    await exec("sh", ["-c", `iptables -w ${rules[0]!.replace(/^-A /, "-D ")}`]);
    expect(await checkDrift()).toEqual(engineFound("sandbox:host:TenantFirewall", "changed"));
    await repairedAndClean();
  });

  it("leaves the tenant's Squid fragment edited by hand to the engine, which reports it", async () => {
    const fragment = path.join(
      platform.config.host.configDir,
      "squid",
      "tenants",
      `tenant-${projectId}.conf`,
    );
    await fs.appendFile(fragment, "# edited by hand\n");
    expect(await checkDrift()).toEqual(engineFound("sandbox:host:SquidTenant", "changed"));
    await repairedAndClean();
  });

  it("leaves a removed container to the engine, which reports it deleted", async () => {
    await exec("docker", ["rm", "--force", tenantNames(projectId).container]);
    expect(await checkDrift()).toEqual(engineFound("sandbox:docker:Container", "deleted"));
    await repairedAndClean();
  });
});
