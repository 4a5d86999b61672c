// Benchmark: GET /healthz latency of the real runtime service, against the same service's cheapest answer
// (an unknown path, which Fastify answers 404 without touching any prerequisite) measured in the same run.
// Prints figures; asserts nothing (npm run bench).
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { stringify } from "yaml";
import { waitFor } from "../../lib/process.js";
import { loadStackConfig } from "../../runtime/stack-file.js";
import { REPO_ROOT } from "../../lib/toolchain.js";
import { freePort } from "../helpers/host.js";
import { report } from "./report.js";
import { RUNTIME_ARGV } from "../../scripts/bundles.js";

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 300);

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

async function measure(
  url: string,
): Promise<{ p50: number; p99: number; max: number; statuses: Set<number> }> {
  const samples: number[] = [];
  const statuses = new Set<number>();
  for (let i = 0; i < ROUNDS; i++) {
    const started = process.hrtime.bigint();
    const response = await fetch(url);
    await response.arrayBuffer();
    samples.push(Number(process.hrtime.bigint() - started) / 1e6);
    statuses.add(response.status);
  }
  samples.sort((a, b) => a - b);
  return { p50: percentile(samples, 50), p99: percentile(samples, 99), max: samples.at(-1)!, statuses };
}

// The dev stack's host parts (brought up by npm run local / npm test), with a private database and port.
const { config } = loadStackConfig();
const dir = mkdtempSync(path.join(os.tmpdir(), "bench-healthz-"));
const apiPort = await freePort();
const file = path.join(dir, "Pulumi.bench.yaml");
writeFileSync(
  file,
  stringify({
    config: {
      "agent-sandbox:target": "local",
      "agent-sandbox:host": { ...config.host, dataDir: dir },
      "agent-sandbox:runtime": { ...config.runtime, apiPort, terminalPort: await freePort() },
    },
  }),
);
const service = spawn(process.execPath, RUNTIME_ARGV, {
  cwd: REPO_ROOT,
  env: { ...process.env, AGENT_SANDBOX_CONFIG: file },
  stdio: "ignore",
});
try {
  const base = `http://127.0.0.1:${apiPort}`;
  await waitFor("runtime service", 60_000, () => fetch(`${base}/healthz`).then(() => true));
  await measure(`${base}/healthz`); // warm-up
  const floor = await measure(`${base}/no-such-path`);
  const health = await measure(`${base}/healthz`);
  const fmt = (n: number) => `${n.toFixed(2)} ms`;
  console.log(`GET /healthz, ${ROUNDS} sequential requests each, one runtime process on loopback`);
  console.log(
    `  baseline (404, no probes): p50 ${fmt(floor.p50)}  p99 ${fmt(floor.p99)}  max ${fmt(floor.max)}`,
  );
  console.log(
    `  /healthz (5 probes):       p50 ${fmt(health.p50)}  p99 ${fmt(health.p99)}  max ${fmt(health.max)}  status ${[...health.statuses].join(",")}`,
  );
  console.log(
    `  ratio p50 ${(health.p50 / floor.p50).toFixed(1)}x, p99 ${(health.p99 / floor.p99).toFixed(1)}x; target: answer < 100 ms`,
  );
  report("healthz", [
    {
      figure: "GET /healthz (5 probes)",
      unit: "ms",
      p50: health.p50,
      tail: { label: "p99", value: health.p99 },
      baseline: { label: "404, no probes", p50: floor.p50 },
      goal: "< 100 ms",
      samples: ROUNDS,
    },
  ]);
} finally {
  service.kill("SIGTERM");
  await new Promise((resolve) => service.once("exit", resolve));
  rmSync(dir, { recursive: true, force: true });
}
