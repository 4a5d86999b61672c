// Subnets and SSH ports already in use on the host, outside the platform's records (another Docker
// network, a bridge a killed run left behind, a listener on a port), are skipped at allocation: a create
// never fails on the engine's "Pool overlaps" or "port is already allocated". A pool whose every subnet
// is held says which of them the host holds.
import { createServer, type Server } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tenantNames } from "../../components/tenant/names.js";
import type { Database } from "../../runtime/store/db.js";
import type { Reconciler } from "../../runtime/reconciler/reconciler.js";
import { tenantDefaults } from "../../runtime/tenants/config.js";
import { requestCreate, TenantRequestError } from "../../runtime/tenants/service.js";
import { deleteAllTenants, settledOperation as settled, testReconciler } from "../helpers/api.js";
import { docker, uniqueName } from "../helpers/containers.js";
import { testPlatform, type TestPlatform } from "../helpers/host.js";
import { testDatabase, type TestDatabase } from "../helpers/postgres.js";
import { getTenant } from "../../runtime/store/tenants.js";

const POOL = "10.252.0.0/23";
const PORTS: [number, number] = [28140, 28142];
const foreignNetwork = uniqueName("foreign-net");
const suffix = uniqueName("h").slice(2, 8);

let platform: TestPlatform;
let database: TestDatabase;
let db: Database;
let reconciler: Reconciler;
let listener: Server;

beforeAll(async () => {
  platform = await testPlatform({ subnetPool: POOL, sshPortRange: PORTS, leaseSeconds: 10 });
  database = await testDatabase("pglite", { under: platform.config.host.dataDir });
  db = database.db;
  reconciler = testReconciler(db, platform.config);
  // Not the platform's: a plain network in the pool's first /24, and a listener on the range's first port.
  await docker("network", "create", "--subnet", "10.252.0.0/24", foreignNetwork);
  listener = createServer();
  await new Promise<void>((resolve) => listener.listen(PORTS[0], "0.0.0.0", resolve));
}, 900_000);

afterAll(async () => {
  if (db) await deleteAllTenants(db, 300_000);
  await reconciler?.stop();
  await database?.close();
  await platform?.stop();
  await docker("network", "rm", foreignNetwork).catch(() => undefined);
  await new Promise((resolve) => (listener ? listener.close(resolve) : resolve(undefined)));
}, 600_000);

describe("allocation around what the host already uses", () => {
  const projectId = `host-${suffix}`;

  it("skips the subnet a foreign network holds and the port a listener holds; the sandbox runs", async () => {
    const { operation } = await requestCreate(db, tenantDefaults(platform.config), {
      projectId,
      ownerId: "u1",
    });
    expect(await getTenant(db, projectId)).toMatchObject({ subnet: "10.252.1.0/24", ssh_port: PORTS[0] + 1 });
    expect(await settled(db, operation)).toMatchObject({ state: "succeeded" });
    expect(await docker("inspect", "-f", "{{.State.Running}}", tenantNames(projectId).container)).toBe(
      "true",
    );
    const subnet = await docker(
      "network",
      "inspect",
      "-f",
      "{{range .IPAM.Config}}{{.Subnet}}{{end}}",
      tenantNames(projectId).network,
    );
    expect(subnet).toBe("10.252.1.0/24");
  });

  it("a pool with nothing left names what the host holds, and records nothing", async () => {
    const other = `host2-${suffix}`;
    const refused = await requestCreate(db, tenantDefaults(platform.config), {
      projectId: other,
      ownerId: "u1",
    }).then(
      () => undefined,
      (error: unknown) => error as TenantRequestError,
    );
    expect(refused).toBeInstanceOf(TenantRequestError);
    expect(refused).toMatchObject({
      status: 503,
      capacity: "agent-sandbox:tenants.subnetPool",
      message: `subnet pool ${POOL} is exhausted: all 2 /24 subnets are allocated or in use on the host (10.252.0.0/24) (agent-sandbox:tenants.subnetPool); one frees when a project is deleted`,
    });
    expect(await getTenant(db, other)).toBeUndefined();
  });
});
