// The reduced fault loop of issue 18 in `npm test` (the 20× loops are `npm run chaos`): on a runtime process,
// one unfaulted round measures each operation, then one round kills the runtime, the shared provider or the
// Pulumi engine (in turn) at a seeded random point of create, update, stop, start, snapshot, restore and delete;
// after each the reconciler finishes by itself (or the user repeats a failed request once), and the
// platform's orphan sweep finds nothing, no home file is lost, every promise holds and no process of a
// killed runtime lives on. Then one backup RPO measurement with backups 10 s after a change (an hour's interval).
import * as os from "node:os";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  calibrateWindows,
  chaosSummaryText,
  CHAOS_KINDS,
  FAULTS,
  runChaosLoop,
  seededRandom,
  type ChaosKind,
} from "./loop.js";
import { chaosPlatform, type ChaosPlatform } from "./platform.js";
import { measureRpo } from "./rpo.js";

const BACKUP_INTERVAL = 3600;
const BACKUP_AFTER_CHANGE = 10;
const seed = Number(process.env.CHAOS_SEED ?? Math.floor(Math.random() * 2 ** 31));
let chaos: ChaosPlatform;
let windowsMs: Record<ChaosKind, number>;

beforeAll(async () => {
  console.log(`chaos.test: seed ${seed} (CHAOS_SEED=${seed} replays it)`);
  chaos = await chaosPlatform({
    tenants: {
      subnetPool: "10.253.4.0/22",
      sshPortRange: [28220, 28230],
      backupIntervalSeconds: BACKUP_INTERVAL,
      backupAfterChangeSeconds: BACKUP_AFTER_CHANGE,
      leaseSeconds: 5,
      maxConcurrent: 2,
    },
    logDir: path.join(os.tmpdir(), `chaos-test-${seed}`),
  });
}, 600_000);

afterAll(() => chaos?.stop(), 300_000);

describe("faults injected into every operation", () => {
  it("an unfaulted round keeps every promise and leaves nothing", async () => {
    const calibration = await calibrateWindows(chaos, seed);
    windowsMs = calibration.windowsMs;
    console.log(`operation windows (ms): ${JSON.stringify(windowsMs)}`);
    expect(calibration.round.records.map((r) => r.kind)).toEqual([...CHAOS_KINDS]);
    const problems = calibration.round.records.flatMap((r) => [...r.orphans, ...r.lostFiles, ...r.broken]);
    expect(problems).toEqual([]);
  }, 300_000);

  it("kill -9 of the runtime, the provider or the engine at a random point of each: 0 orphans, 0 lost files", async () => {
    const summary = await runChaosLoop(chaos, {
      seed,
      rounds: 1,
      windowsMs,
      log: (line) => console.log(line),
    });
    console.log(chaosSummaryText(summary));
    expect(summary.records.map((r) => `${r.kind}/${r.fault}`)).toEqual(
      CHAOS_KINDS.map((kind, j) => `${kind}/${FAULTS[j % FAULTS.length]}`),
    );
    // Every runtime kill is one; a provider kill needs a provider process (it starts with the first engine);
    // stop and restore each run an engine (an update), killed at most 0.8 s after it started.
    expect(summary.faultsInjected).toBeGreaterThanOrEqual(5);
    expect(summary.records.filter((r) => r.fault === "engine" && r.killedPid).map((r) => r.kind)).toEqual([
      "stop",
      "restore",
    ]);
    // A killed engine's operation runs again by itself (before, its stale lock failed it and every later one).
    expect(summary.records.filter((r) => r.fault === "engine").map((r) => r.retried)).toEqual([
      undefined,
      undefined,
    ]);
    expect(summary.records.flatMap((r) => r.orphans)).toEqual([]);
    expect(summary.records.flatMap((r) => r.lostFiles)).toEqual([]);
    expect(summary.records.flatMap((r) => r.broken)).toEqual([]);
    expect(summary.records.flatMap((r) => r.strays)).toEqual([]);
    expect(summary.survived).toBe(summary.faultsInjected);
  }, 600_000);
});

describe("backup RPO", () => {
  it(`a sandbox killed with its home lost comes back from the backup, losing at most about one change delay (${BACKUP_AFTER_CHANGE} s)`, async () => {
    const rpo = await measureRpo(chaos, {
      repetitions: 1,
      intervalSeconds: BACKUP_INTERVAL,
      afterChangeSeconds: BACKUP_AFTER_CHANGE,
      random: seededRandom(seed + 1),
      log: (line) => console.log(line),
    });
    expect(rpo.lostSeconds).toHaveLength(1);
    // The writer changes the home every second, so a backup follows every 10 s (the hour's interval never
    // comes) and a sync takes a few seconds here: what is lost is bounded by that.
    expect(rpo.max).toBeGreaterThanOrEqual(0);
    expect(rpo.max).toBeLessThanOrEqual(BACKUP_AFTER_CHANGE * 2 + 10);
  }, 300_000);
});
