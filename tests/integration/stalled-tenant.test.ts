// Issue 22.2: what the platform reads back from a sandbox is untrusted and bounded. A tenant cannot
// replace the backup state the platform reads, a backup it makes hang is killed at its deadline (its own
// stop says so), and while the platform waits on that tenant no reconciler slot is held: another
// tenant's create goes ahead even with one slot in all.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tenantNames } from "../../components/tenant/names.js";
import type { Database } from "../../runtime/store/db.js";
import { waitFor } from "../../lib/process.js";
import type { Reconciler } from "../../runtime/reconciler/reconciler.js";
import { tenantDefaults } from "../../runtime/tenants/config.js";
import { requestCreate, requestOperation } from "../../runtime/tenants/service.js";
import { deleteAllTenants, settledOperation as settled, testReconciler } from "../helpers/api.js";
import { docker, execIn, uniqueName } from "../helpers/containers.js";
import { testPlatform, type TestPlatform } from "../helpers/host.js";
import { testDatabase, type TestDatabase } from "../helpers/postgres.js";
import { getTenant } from "../../runtime/store/tenants.js";

const FINAL_BACKUP_SECONDS = 20;
const suffix = uniqueName("s").slice(2, 8);
const stalled = `stall-${suffix}`;
const bystander = `bystander-${suffix}`;

let platform: TestPlatform;
let database: TestDatabase;
let db: Database;
let reconciler: Reconciler;

beforeAll(async () => {
  platform = await testPlatform({
    subnetPool: "10.233.4.0/23",
    sshPortRange: [27160, 27170],
    backupIntervalSeconds: 300,
    leaseSeconds: 3,
    finalBackupSeconds: FINAL_BACKUP_SECONDS,
    // One slot: without giving it back while waiting on a tenant, the bystander would wait for the stall.
    maxConcurrent: 1,
  });
  database = await testDatabase("pglite", { under: platform.config.host.dataDir });
  db = database.db;
  reconciler = testReconciler(db, platform.config);
  const { operation } = await requestCreate(db, tenantDefaults(platform.config), {
    projectId: stalled,
    ownerId: "u1",
  });
  expect(await settled(db, operation)).toMatchObject({ state: "succeeded" });
  // The daemon's first backup (at boot) is over: from here on only the tests' backups run.
  await waitFor("the first backup", 120_000, async () =>
    (await execIn(tenantNames(stalled).container, "sandbox-backup status")).stdout.includes('"ok"')
      ? true
      : undefined,
  );
}, 900_000);

afterAll(async () => {
  if (db) await deleteAllTenants(db, 480_000);
  await reconciler?.stop();
  await database?.close();
  await platform?.stop();
}, 600_000);

describe("a tenant that tampers with what the platform reads back", () => {
  const container = tenantNames(stalled).container;

  it("cannot replace the backup state: no FIFO, symlink or file of its own where the status is read", async () => {
    const attempts = await execIn(
      container,
      `cd /var/lib/agent-sandbox
       test -f backup-status.json || echo "MISSING: backup-status.json"
       for try in "mkfifo backup-status.json" "ln -sf /dev/zero backup-status.json" "rm backup-status.json" \\
                  "mkfifo backup.lock" "touch planted"; do
         if $try 2>/dev/null; then echo "ALLOWED: $try"; else echo "refused: $try"; fi
       done
       stat -c '%U %a' .`,
    );
    expect(attempts.stdout).not.toMatch(/ALLOWED|MISSING/);
    expect(attempts.stdout).toMatch(/root 755$/);
    // The one-shot backup is root's; the agent running it is told so at once.
    const once = await execIn(container, "sandbox-backup once");
    expect(once).toMatchObject({ code: 2, stderr: expect.stringMatching(/runs as root/) });
  });

  it("a status file that is a FIFO, huge or not JSON is read as none, at once", async () => {
    // Planted as root: what a state directory the agent could write (the old image's) would have allowed.
    for (const plant of [
      "mkfifo backup-status.json",
      "head -c 200000 /dev/zero | tr '\\0' 1 > backup-status.json",
      "echo '[1,2' > backup-status.json",
    ]) {
      const started = Date.now();
      const status = await execIn(
        container,
        `cd /var/lib/agent-sandbox && rm -f backup-status.json && ${plant} && timeout 10 sandbox-backup status`,
        "root",
      );
      expect({ plant, code: status.code, stdout: JSON.parse(status.stdout) }).toEqual({
        plant,
        code: 0,
        stdout: { state: "never-run" },
      });
      expect(Date.now() - started).toBeLessThan(10_000);
    }
    await execIn(container, "rm -f /var/lib/agent-sandbox/backup-status.json", "root");
  });

  it("a final backup it makes hang is killed at the deadline; its stop says so; another tenant's create is not held up", async () => {
    // The agent freezes every rclone it can see (they run as the agent): the stop's final backup hangs.
    // 100 MB of new files give that backup seconds of work, so the loop always catches it mid-sync.
    await execIn(
      container,
      "mkdir -p bulk && for i in $(seq 1 100); do head -c 1048576 /dev/urandom > bulk/$i; done",
    );
    await execIn(
      container,
      "nohup sh -c 'while :; do pkill -STOP -x rclone; sleep 0.01; done' >/dev/null 2>&1 &",
    );
    const stop = await requestOperation(db, stalled, "stop");
    await waitFor("the final backup to start", 60_000, async () =>
      (await execIn(container, "pgrep -x rclone", "root")).code === 0 ? true : undefined,
    );
    const create = await requestCreate(db, tenantDefaults(platform.config), {
      projectId: bystander,
      ownerId: "u2",
    });
    const [stopped, created] = await Promise.all([
      settled(db, stop.operation),
      settled(db, create.operation),
    ]);

    expect(created).toMatchObject({ state: "succeeded" });
    // The bystander did not wait for the stalled backup: it finished while the stop was still waiting.
    expect(created.finished).toBeLessThan(stopped.finished);
    expect(stopped).toMatchObject({
      state: "succeeded",
      result: { backup: `failed: did not finish within ${FINAL_BACKUP_SECONDS} s` },
    });
    expect(stopped.finished - new Date(stopped.created_at).getTime()).toBeLessThan(
      (FINAL_BACKUP_SECONDS + 60) * 1000,
    );
    expect(await docker("inspect", "--format", "{{.State.Running}}", container)).toBe("false");
    expect((await getTenant(db, stalled))?.state).toBe("stopped");
  });
});
