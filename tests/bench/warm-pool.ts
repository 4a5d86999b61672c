// Benchmark: a warm claim (issue 17). The runtime runs as `npm run local` runs it, with a warm pool of
// POOL members; once they are ready, a client sends POST /projects one after another and times (1) the
// answer, which for a claim is `running` with its terminal_url, and (2) the answer plus a working terminal
// (the echo of a command typed through terminal_url). Two rounds of POOL claims, the pool refilling between
// them. Beside it, in the same run: a bare `docker run` of the same image and a cold create through the
// same API (the pool emptied). Asserts nothing. Issue 17: warm claim p99 ≤ 150 ms (moonshot).
import { execFile } from "node:child_process";
import * as path from "node:path";
import { promisify } from "node:util";
import { waitFor } from "../../lib/process.js";
import { startRuntime, type RuntimeProcess } from "../helpers/api.js";
import { testPlatform } from "../helpers/host.js";
import { connectTerminal } from "../helpers/terminal-client.js";
import { percentile, report } from "./report.js";
import { bareDockerRuns, signedInClient } from "./runtime-client.js";

const run = promisify(execFile);
const POOL = Number(process.env.BENCH_POOL ?? 10);
const ROUNDS = 2;
if (!Number.isInteger(POOL) || POOL < 2 || POOL > 50) throw new Error("BENCH_POOL must be 2-50");
const ms = (value: number) => `${value.toFixed(0)} ms`;

const platform = await testPlatform({});
let service: RuntimeProcess | undefined;
try {
  const { host, tenants } = platform.config;
  service = await startRuntime(
    "bench-warm-pool",
    {
      host: { ...host, dataDir: path.join(host.dataDir, "warm-pool") },
      tenants: {
        image: tenants.image,
        subnetPool: "10.161.0.0/16",
        sshPortRange: [28500, 28600],
        leaseSeconds: 30,
        warmPool: { size: POOL, idleSize: 0, idleMinutes: 60 },
      },
    },
    {
      runtime: {
        createWaitSeconds: 0,
        projectQuota: POOL * ROUNDS + 10,
        rateLimits: { createProject: { burst: POOL * ROUNDS + 10, perHour: 10_000 } },
      },
    },
  );
  const base = service.base;
  const { api } = await signedInClient(base, "pool");
  /** The pool's gauge from /metrics (this host may read it). */
  const gauge = async (name: string) => {
    const text = await (await fetch(`${base}/metrics`)).text();
    return Number(new RegExp(`^agent_sandbox_pool_${name} (\\d+)`, "m").exec(text)?.[1] ?? Number.NaN);
  };
  const poolReady = async () => {
    const started = performance.now();
    await waitFor(`${POOL} pool members ready`, 900_000, async () =>
      (await gauge("ready")) === POOL ? true : undefined,
    );
    return performance.now() - started;
  };

  // The baseline: a bare container start of the same image.
  const bare = await bareDockerRuns(tenants.image);

  const answered: number[] = [];
  const withTerminal: number[] = [];
  const refills: number[] = [];
  const created: string[] = [];
  let notClaims = 0;
  refills.push(await poolReady());
  for (let round = 0; round < ROUNDS; round++) {
    if (round > 0) refills.push(await poolReady());
    for (let i = 0; i < POOL; i++) {
      const started = performance.now();
      const answer = await api("POST", "/projects", { name: `claim-${round}-${i}` });
      const answerMs = performance.now() - started;
      if (answer.status !== 201 || answer.body.status !== "running") {
        notClaims += 1;
        continue;
      }
      created.push(answer.body.project_id);
      const terminal = connectTerminal(answer.body.terminal_url);
      try {
        terminal.type("echo claimed-$((40+2))\r");
        await terminal.waitFor("claimed-42", 60_000);
      } finally {
        terminal.ws.terminate();
      }
      answered.push(answerMs);
      withTerminal.push(performance.now() - started);
    }
  }

  // A cold create through the same API, for comparison: the pool is empty right after its round.
  const coldStarted = performance.now();
  for (let i = 0; i < POOL; i++) {
    const answer = await api("POST", "/projects", { name: `drain-${i}` });
    created.push(answer.body.project_id);
    if (answer.status === 202) {
      await waitFor("the cold create", 600_000, async () => {
        const view = await api("GET", `/projects/${answer.body.project_id}`);
        if (view.body?.status === "error")
          throw new Error(`cold create failed: ${JSON.stringify(view.body)}`);
        return view.body?.status === "running" ? true : undefined;
      });
      break;
    }
  }
  const cold = performance.now() - coldStarted;

  await Promise.all(created.map((id) => api("DELETE", `/projects/${id}`)));
  await waitFor("every project deleted", 900_000, async () =>
    (await api("GET", "/projects")).body.projects.length === 0 ? true : undefined,
  );

  const cores = (await run("nproc")).stdout.trim();
  console.log(`Warm pool of ${POOL} through the runtime, ${ROUNDS} rounds of ${POOL} claims, ${cores} cores`);
  console.log(`  bare docker run (baseline)                 p50 ${ms(percentile(bare, 50))}`);
  console.log(
    `  POST /projects → 201 running (claim)       p50 ${ms(percentile(answered, 50))}  p99 ${ms(percentile(answered, 99))}  (${answered.length} claims, ${notClaims} not)`,
  );
  console.log(
    `  ... and a working terminal (echo back)     p50 ${ms(percentile(withTerminal, 50))}  p99 ${ms(percentile(withTerminal, 99))}`,
  );
  console.log(`  a cold create through the same API          ${ms(cold)}`);
  console.log(`  refill of ${POOL} members                       ${refills.map((r) => ms(r)).join(", ")}`);
  report("warm-pool", [
    {
      figure: `warm claim: POST /projects → 201 running (${answered.length} claims)`,
      unit: "ms",
      p50: percentile(answered, 50),
      tail: { label: "p99", value: percentile(answered, 99) },
      baseline: { label: "bare docker run", p50: percentile(bare, 50) },
      goal: "≤ 150 ms p99",
      samples: answered.length,
    },
    {
      figure: "warm claim with a working terminal (POST → terminal echo)",
      unit: "ms",
      p50: percentile(withTerminal, 50),
      tail: { label: "p99", value: percentile(withTerminal, 99) },
      baseline: { label: "cold create, same API", p50: cold },
      goal: "≤ 150 ms p99",
      samples: withTerminal.length,
    },
  ]);
} finally {
  await service?.stop();
  await platform.stop();
}
