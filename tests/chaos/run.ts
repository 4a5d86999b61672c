// `npm run chaos`: the fault loops and the backup RPO (issue 18), printed and written to
// test-artifacts/chaos.json. CHAOS_ROUNDS (default 60: every operation kind 20 times under each of the three
// faults), CHAOS_SEED (default: random, printed), CHAOS_RPO_REPETITIONS (default 10), CHAOS_BACKUP_INTERVAL
// (seconds, default 300: the platform's default), CHAOS_BACKUP_AFTER_CHANGE (seconds, default 60: the platform's
// default; 0: the interval alone), CHAOS_CALIBRATE=0 skips the unfaulted round that measures
// each operation's duration (the window kill points are drawn from). TEST_DATABASE_URL: a Postgres server
// (default: the tests' own, started by scripts/test-postgres.sh). Run it as root, like `npm test`.
import { execFileSync } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { REPO_ROOT } from "../../lib/toolchain.js";
import { calibrateWindows, chaosSummaryText, runChaosLoop, seededRandom, type ChaosKind } from "./loop.js";
import { chaosPlatform } from "./platform.js";
import { measureRpo } from "./rpo.js";

function positiveInteger(name: string, fallback: number, min = 0): number {
  const value = Number(process.env[name] ?? fallback);
  if (!Number.isInteger(value) || value < min) throw new Error(`${name} must be an integer ≥ ${min}`);
  return value;
}

const rounds = positiveInteger("CHAOS_ROUNDS", 60);
const rpoRepetitions = positiveInteger("CHAOS_RPO_REPETITIONS", 10);
const interval = positiveInteger("CHAOS_BACKUP_INTERVAL", 300, 1);
const afterChange = positiveInteger("CHAOS_BACKUP_AFTER_CHANGE", 60);
const seed = positiveInteger("CHAOS_SEED", Math.floor(Math.random() * 2 ** 31));
const calibrate = process.env.CHAOS_CALIBRATE !== "0";
// The tests' own Postgres server (what `npm test` starts), unless one is given.
process.env.TEST_DATABASE_URL ??= execFileSync("bash", [path.join(REPO_ROOT, "scripts/test-postgres.sh")], {
  encoding: "utf8",
})
  .trim()
  .split("\n")
  .at(-1);
console.log(`chaos: seed ${seed} (CHAOS_SEED=${seed} replays the kill points), ${rounds} round(s)`);

const started = performance.now();
const logDir = path.join(os.tmpdir(), `chaos-logs-${seed}`);
const chaos = await chaosPlatform({
  tenants: {
    subnetPool: "10.253.0.0/22",
    sshPortRange: [28200, 28215],
    backupIntervalSeconds: interval,
    backupAfterChangeSeconds: afterChange,
    leaseSeconds: 5,
    maxConcurrent: 2,
  },
  logDir,
});
console.log(`runtime logs in ${logDir}`);
try {
  let windowsMs: Partial<Record<ChaosKind, number>> | undefined;
  if (calibrate && rounds > 0) {
    const calibration = await calibrateWindows(chaos, seed);
    windowsMs = calibration.windowsMs;
    console.log(`operation windows (ms, unfaulted): ${JSON.stringify(windowsMs)}`);
    console.log(chaosSummaryText(calibration.round));
  }
  const loop = await runChaosLoop(chaos, { seed, rounds, windowsMs, log: (line) => console.log(line) });
  const perFault = loop.records.length
    ? loop.roundSeconds.reduce((a, b) => a + b, 0) / loop.records.length
    : 0;
  console.log(chaosSummaryText(loop));
  console.log(`  seconds per faulted operation (mean): ${perFault.toFixed(1)}`);
  const rpo =
    rpoRepetitions > 0
      ? await measureRpo(chaos, {
          repetitions: rpoRepetitions,
          intervalSeconds: interval,
          afterChangeSeconds: afterChange,
          random: seededRandom(seed + 1),
          log: (line) => console.log(line),
        })
      : undefined;
  if (rpo)
    console.log(
      `rpo: backup interval ${rpo.intervalSeconds} s, ${rpo.afterChangeSeconds ? `${rpo.afterChangeSeconds} s after a change` : "no backup after a change"},` +
        ` ${rpo.repetitions} kills: p50 ${rpo.p50} s, max ${rpo.max} s lost`,
    );
  const artifacts = path.join(REPO_ROOT, "test-artifacts");
  mkdirSync(artifacts, { recursive: true });
  const { records, ...figures } = loop;
  writeFileSync(
    path.join(artifacts, "chaos.json"),
    `${JSON.stringify(
      {
        ...figures,
        windowsMs,
        secondsPerFaultedOperation: Number(perFault.toFixed(1)),
        rpo,
        wallSeconds: Math.round((performance.now() - started) / 1000),
        records,
      },
      null,
      2,
    )}\n`,
  );
  console.log(`written test-artifacts/chaos.json (${Math.round((performance.now() - started) / 1000)} s)`);
  process.exitCode =
    loop.orphansFound + loop.lostFiles + loop.brokenPromises + loop.strayProcesses > 0 ||
    loop.survived < loop.faultsInjected
      ? 1
      : 0;
} finally {
  await chaos.stop();
}
