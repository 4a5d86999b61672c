// A claim from the warm pool (runtime/tenants/pool.ts) on both databases, its members recorded as a refill
// and a readiness check leave them (no sandbox runs: a claim writes the owner's key file and queues the
// stack's update, which the reconcilers then take). What it queues, and in which order against a create
// someone waits on. The whole pool, with real sandboxes, is tests/integration/warm-pool.test.ts.
import { promises as fs } from "node:fs";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TenantSpec } from "../../components/tenant/spec.js";
import type { Database, Queryable } from "../../runtime/store/db.js";
import { claimOperation, enqueueOperation } from "../../runtime/store/operations.js";
import { addPoolMember, markMemberReady } from "../../runtime/store/pool.js";
import { recordCreatingTenant } from "../../runtime/store/tenants.js";
import { POOL_OWNER, WarmPool } from "../../runtime/tenants/pool.js";
import type { TenantDefaults } from "../../runtime/tenants/service.js";
import { DATABASE_KINDS, testDatabase, type TestDatabase } from "../helpers/postgres.js";

describe.each(DATABASE_KINDS)("a warm pool claim on %s", (kind) => {
  let database: TestDatabase;
  let db: Database;
  let pool: WarmPool;
  let keysRoot: string;

  beforeAll(async () => {
    database = await testDatabase(kind);
    db = database.db;
    keysRoot = path.join(database.dir, "keys");
    pool = new WarmPool({
      db,
      defaults: { image: "agent-sandbox/sandbox:abc" } as TenantDefaults,
      runners: () => Promise.reject(new Error("no member runs a command here")),
      settings: { size: 2, idleSize: 0, idleMinutes: 60 },
    });
    // Two ready members, as a refill and their readiness checks leave them (their stacks up).
    for (const [n, projectId] of ["member-1", "member-2"].entries()) await addReadyMember(n, projectId);
  });

  async function addReadyMember(n: number, projectId: string): Promise<void> {
    {
      const spec = TenantSpec.parse({
        projectId,
        ownerId: POOL_OWNER,
        mode: "local",
        image: "agent-sandbox/sandbox:abc",
        subnet: `10.9.${n}.0/24`,
        sshHostPort: 2200 + n,
        host: {
          squidConfigFile: path.join(database.dir, "squid.conf"),
          squidFragmentsDir: path.join(database.dir, "squid.d"),
          backupRoot: path.join(database.dir, "backups"),
          sshKeysRoot: keysRoot,
        },
      });
      await recordCreatingTenant(db, {
        projectId,
        ownerId: POOL_OWNER,
        spec,
        subnet: spec.subnet,
        sshPort: 2200 + n,
      });
      await db.query("update tenants set state = 'running' where project_id = $1", [projectId]);
      await addPoolMember(db, projectId, pool.class);
      expect(await markMemberReady(db, projectId)).toBe(true);
    }
  }

  afterAll(() => database?.close());

  it("queues the stack's update behind every create someone waits on, unless it makes the owner's front-door routes", async () => {
    const plain = await db.transaction((tx) =>
      pool.claim(tx, { ownerId: "user-1", sshPublicKey: "ssh-ed25519 AAAAone user-1" }),
    );
    const routed = await db.transaction((tx) =>
      pool.claim(tx, {
        ownerId: "user-2",
        sshPublicKey: "ssh-ed25519 AAAAtwo user-2",
        ports: [{ port: 3000 }],
      }),
    );
    expect([plain, routed]).toEqual(["member-1", "member-2"]);
    // The owners' keys are where sshd reads them before the answer; the pool is empty now.
    expect(await fs.readFile(path.join(keysRoot, "member-1", "agent"), "utf8")).toBe(
      "ssh-ed25519 AAAAone user-1\n",
    );
    expect(
      await db.transaction((tx) => pool.claim(tx, { ownerId: "user-3", sshPublicKey: "k" })),
    ).toBeUndefined();
    expect(await pool.status()).toMatchObject({ claims: 2, misses: 1 });

    // A cold create queued after both claims: the routed claim's update first (someone waits on its routes),
    // then the create, then the plain claim's update (it only records what the claim applied).
    await db.query("insert into tenants (project_id, owner_id, spec) values ('cold', 'user-3', '{}')");
    const cold = (await enqueueOperation(db, "cold", "create")).operation;
    const order: string[] = [];
    for (
      let op = await claimOperation(db, "w", 60_000, "v");
      op;
      op = await claimOperation(db, "w", 60_000, "v")
    )
      order.push(`${op.project_id} ${op.kind}${op.background ? " (background)" : ""}`);
    expect(order).toEqual(["member-2 update", `${cold.project_id} create`, "member-1 update (background)"]);
  });

  // PGlite runs one transaction at a time, so a claim cannot overlap a refill's pass there.
  it.runIf(kind === "postgres")(
    "a refill's pass under way hides no ready member from a claim meanwhile",
    async () => {
      for (const [n, projectId] of ["member-3", "member-4"].entries()) await addReadyMember(n + 2, projectId);
      // A refill whose transaction is held open right after it read the unclaimed members, as on a busy host.
      let reached!: () => void;
      const inside = new Promise<void>((resolve) => (reached = resolve));
      let release!: () => void;
      const held = new Promise<void>((resolve) => (release = resolve));
      const pausing: Database = Object.assign(Object.create(db) as Database, {
        transaction: <T>(fn: (tx: Queryable) => Promise<T>) =>
          db.transaction((tx) =>
            fn({
              query: async <Row>(sql: string, params?: unknown[]) => {
                const result = await tx.query<Row>(sql, params);
                if (/where m\.claimed_at is null order by m\.created_at desc/.test(sql)) {
                  reached();
                  await held;
                }
                return result;
              },
            }),
          ),
      });
      const refiller = new WarmPool({
        db: pausing,
        defaults: { image: "agent-sandbox/sandbox:abc" } as TenantDefaults,
        runners: () => Promise.reject(new Error("no member runs a command here")),
        settings: { size: 2, idleSize: 0, idleMinutes: 60 },
      });
      const refill = refiller.refill();
      try {
        await inside;
        const claimed = await db.transaction((tx) =>
          pool.claim(tx, { ownerId: "user-4", sshPublicKey: "ssh-ed25519 AAAAfour user-4" }),
        );
        expect(claimed).toBe("member-3");
      } finally {
        release();
        await refill;
      }
      // The refill drained nothing: both members are of the class, and two are what it aims at.
      expect((await db.query("select project_id from pool_members where claimed_at is null")).rows).toEqual([
        { project_id: "member-4" },
      ]);
    },
  );
});
