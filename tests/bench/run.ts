// `npm run bench [-- name ...]`: runs the benchmarks one after another (each prints its own detail), then
// prints one table of every figure (p50, tail, the baseline measured in the same run, the ratio, the
// issue's goal) and writes it to test-artifacts/bench.json. Nothing here asserts a time.
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { buildBundles } from "../../scripts/bundles.js";
import { BENCH_DIR, readReports, table } from "./report.js";

/** Every benchmark, in the order they run (the cheap ones first). */
const BENCHES = [
  "healthz",
  "projects-list",
  "terminal-latency",
  "tenant-create",
  "fleet",
  "warm-pool",
  "drift-check",
  "allowlist-change",
  "bandwidth",
  "exec",
  "e2b",
  "wake",
  "fork",
  "interactive",
  "kept-git",
  "idle",
  "sbx",
  "sync-watch",
  "sbx-agent",
  "front-door",
  "microvm",
  // A fleet of kubernetes tenants through Pulumi's Kubernetes provider on kwok: 100, then 1,000 (hours here).
  "fleet-1000",
] as const;

/**
 * How long one benchmark may run (`BENCH_TIMEOUT_MINUTES`, default 30; `interactive`, hundreds of creates
 * in each of three runtimes, 120; `fleet-1000`, a thousand kubernetes tenants, 360).
 */
const benchTimeoutMs = (name: string) =>
  Number(
    process.env.BENCH_TIMEOUT_MINUTES ?? (name === "interactive" ? 120 : name === "fleet-1000" ? 360 : 30),
  ) * 60_000;

const asked = process.argv.slice(2);
const unknown = asked.filter((name) => !(BENCHES as readonly string[]).includes(name));
if (unknown.length > 0) {
  console.error(`unknown benchmark(s): ${unknown.join(", ")}; known: ${BENCHES.join(", ")}`);
  process.exit(2);
}
const selected = asked.length > 0 ? asked : [...BENCHES];
// The runtimes and plugins the benchmarks start are the checkout's as it is now.
await buildBundles();
const failed: string[] = [];
for (const name of selected) {
  rmSync(path.join(BENCH_DIR, `${name}.json`), { force: true }); // no stale figures from an earlier run
  console.log(`\n=== bench ${name}`);
  const started = Date.now();
  // A benchmark whose process outlives its figures (an open handle) is ended, and counted as failed, rather
  // than holding up every benchmark after it.
  const result = spawnSync(process.execPath, ["--import", "tsx", path.join("tests", "bench", `${name}.ts`)], {
    stdio: "inherit",
    timeout: benchTimeoutMs(name),
    killSignal: "SIGKILL",
  });
  // One that ended well without its figures did not finish (a process whose loop ran dry mid-way exits 0).
  const written = existsSync(path.join(BENCH_DIR, `${name}.json`));
  const outcome =
    result.status === 0
      ? written
        ? "done"
        : "FAILED (it exited 0 without writing its figures)"
      : result.error
        ? `FAILED (${result.error.message})`
        : "FAILED";
  console.log(`=== bench ${name}: ${outcome} in ${((Date.now() - started) / 1000).toFixed(0)} s`);
  if (result.status !== 0 || !written) failed.push(name);
}

const reports = readReports().filter((report) => selected.includes(report.bench));
const machine = `${os.cpus().length} cores, ${(os.totalmem() / 2 ** 30).toFixed(0)} GiB, ${os.cpus()[0]?.model ?? "cpu"}`;
console.log(`\nnpm run bench: every figure (${machine})\n`);
console.log(table(reports));
// A fresh clone has no test-artifacts/ until something writes there.
mkdirSync(path.resolve("test-artifacts"), { recursive: true });
writeFileSync(
  path.resolve("test-artifacts", "bench.json"),
  `${JSON.stringify({ at: new Date().toISOString(), machine, failed, reports }, null, 2)}\n`,
);
console.log(`\nwritten to test-artifacts/bench.json${failed.length ? `; FAILED: ${failed.join(", ")}` : ""}`);
process.exit(failed.length > 0 ? 1 : 0);
