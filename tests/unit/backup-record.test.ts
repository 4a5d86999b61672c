// What backup-status answers while a sandbox is stopped is the record the runtime keeps (tenants.last_backup).
// Session 23's CI run found it an older backup's: a microVM on a loaded host ran its final backup (ok) and
// then did not answer its status in time, and the record kept what it said minutes before the stop.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ExecTimeoutError, type ExecResult } from "../../runtime/sandbox/exec.js";
import type { SandboxRunner } from "../../runtime/sandbox/runner.js";
import { readBackupStatus, recordAfterFinalBackup, type BackupStatus } from "../../runtime/sandbox/backup.js";
import { recordBackup } from "../../runtime/store/tenants.js";
import { testDatabase, type TestDatabase } from "../helpers/postgres.js";

const PROJECT = "0c4f2a8e-6d1b-4e57-9a3c-2b7e5f8d1a60";
/** What the daemon writes (sandbox-backup's write_status), as of a backup four minutes before the stop. */
const DAEMON_STATUS: BackupStatus = {
  state: "idle",
  last_result: "ok",
  last_success_at: "2026-11-28T03:45:00+00:00",
  last_attempt_at: "2026-11-28T03:44:58+00:00",
  last_error: null,
  last_duration_ms: 1840,
  remote: "/mnt/backup/workspace",
  interval_seconds: 300,
  after_change_seconds: 10,
  last_trigger: "interval",
  usage: { bytes: 4096, objects: 3 },
};

/**
 * A sandbox's runner as the status read sees it: the daemon's answer (or, with none, a status that does not
 * answer in time), and a remote that does not list in time.
 */
function runner(status: string | undefined): SandboxRunner {
  return {
    start: () => Promise.reject(new Error("not used")),
    signal: () => Promise.reject(new Error("not used")),
    run: (argv, options) => {
      const late = () =>
        Promise.reject(new ExecTimeoutError(argv, "the sandbox", options?.timeoutMs ?? 60_000));
      if (argv[1] === "status")
        return status === undefined
          ? late()
          : Promise.resolve<ExecResult>({ exitCode: 0, stdout: status, stderr: "" });
      if (argv[0] === "rclone") return late();
      return Promise.reject(new Error(`unexpected command ${argv.join(" ")}`));
    },
  };
}

describe("the record of a sandbox's backups", () => {
  let database: TestDatabase;
  const recorded = async () =>
    (
      await database.db.query<{ last_backup: BackupStatus | null }>(
        "select last_backup from tenants where project_id = $1",
        [PROJECT],
      )
    ).rows[0]!.last_backup;

  beforeAll(async () => {
    database = await testDatabase("pglite");
    await database.db.query(
      "insert into tenants (project_id, owner_id, spec, state) values ($1, 'owner', '{}', 'running')",
      [PROJECT],
    );
  });
  afterAll(() => database?.close());

  it("a final backup whose status went unread is recorded over the older one, the daemon's settings kept", async () => {
    const backup = {
      ok: true,
      askedAt: new Date("2026-11-28T03:48:51.020Z"),
      endedAt: new Date("2026-11-28T03:49:07.412Z"),
    };
    // With no record yet.
    expect(await recordAfterFinalBackup(database.db, runner(undefined), PROJECT, backup)).toEqual({
      unread: expect.stringContaining("did not finish within 15 s"),
    });
    expect(await recorded()).toMatchObject({
      last_result: "ok",
      last_success_at: "2026-11-28T03:49:07+00:00",
    });
    // What the daemon said earlier, then a stop's backup whose status the sandbox did not answer in time.
    await recordBackup(database.db, PROJECT, DAEMON_STATUS);
    await recordAfterFinalBackup(database.db, runner(undefined), PROJECT, backup);
    const after = (await recorded())!;
    expect(after).toEqual({
      ...DAEMON_STATUS,
      last_attempt_at: "2026-11-28T03:48:51+00:00",
      last_success_at: "2026-11-28T03:49:07+00:00",
      last_trigger: "once",
      last_error: null,
    });
    // Written as the daemon writes its own, and read back as the same second.
    expect(Date.parse(after.last_success_at!)).toBe(Math.floor(backup.endedAt.getTime() / 1000) * 1000);
    // A failed backup whose status went unread changes nothing: the record says what is known.
    await recordAfterFinalBackup(database.db, runner(undefined), PROJECT, { ...backup, ok: false });
    expect(await recorded()).toEqual(after);
    // A status read is recorded as the sandbox said it (its size left out when the remote did not list).
    const said: BackupStatus = {
      ...DAEMON_STATUS,
      last_success_at: "2026-11-28T03:49:06+00:00",
      usage: undefined,
    };
    expect(await recordAfterFinalBackup(database.db, runner(JSON.stringify(said)), PROJECT, backup)).toEqual({
      status: { ...said, usage: null },
    });
    expect(await recorded()).toEqual({ ...said, usage: null });
  });

  it("a remote that does not list in time leaves the usage out, not the status", async () => {
    const said: BackupStatus = { ...DAEMON_STATUS, usage: undefined };
    const status = await readBackupStatus(runner(JSON.stringify(said)), PROJECT);
    expect(status).toEqual({ ...said, usage: null });
  });

  it("a status that is not a JSON object is refused, naming the project", async () => {
    await expect(readBackupStatus(runner("[1, 2]"), PROJECT)).rejects.toThrow(
      `sandbox-backup status in ${PROJECT}'s sandbox did not answer a JSON object`,
    );
  });
});
