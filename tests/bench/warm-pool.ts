// Benchmark: a warm claim (issue 17). The runtime runs as `npm run local` runs it (PGlite in its process),
// with a warm pool of POOL members; once they are ready, a client sends POST /projects and times (1) the
// answer, which for a claim is `running` with its terminal_url, and (2) the answer plus a working terminal
// (the echo of a command typed through terminal_url). POOL claims on a quiet runtime (each waits until the
// previous claim's refill and reconcile are done), then POOL back to back (those run behind the next
// claims). Beside it, in the same run: GET /projects of the same API (the floor of any request), a bare
// `docker run` of the same image and a cold create through the same API (the pool emptied). Asserts
// nothing. Issue 17: warm claim p99 ≤ 150 ms (moonshot).
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
        projectQuota: POOL * 3 + 10,
        rateLimits: { createProject: { burst: POOL * 3 + 10, perHour: 10_000 } },
      },
    },
  );
  const base = service.base;
  const { api } = await signedInClient(base, "pool");
  /** A gauge from /metrics (this host may read it). */
  const metric = async (name: string) => {
    const text = await (await fetch(`${base}/metrics`)).text();
    return Number(new RegExp(`^${name} (\\d+)`, "m").exec(text)?.[1] ?? Number.NaN);
  };
  const poolReady = async () => {
    const started = performance.now();
    await waitFor(`${POOL} pool members ready`, 900_000, async () =>
      (await metric("agent_sandbox_pool_ready")) === POOL ? true : undefined,
    );
    return performance.now() - started;
  };

  // The baseline: a bare container start of the same image.
  const bare = await bareDockerRuns(tenants.image);

  const created: string[] = [];
  /** One claim: the answer's time and the time to a working terminal; undefined when it was not a claim. */
  const claimOnce = async (name: string) => {
    const started = performance.now();
    const answer = await api("POST", "/projects", { name });
    const answerMs = performance.now() - started;
    created.push(answer.body.project_id);
    if (answer.status !== 201 || answer.body.status !== "running") return undefined;
    const terminal = connectTerminal(answer.body.terminal_url);
    try {
      terminal.type("echo claimed-$((40+2))\r");
      await terminal.waitFor("claimed-42", 60_000);
    } finally {
      terminal.ws.terminate();
    }
    return { answerMs, terminalMs: performance.now() - started };
  };
  /** Nothing running behind: the pool full and no operation queued or in flight. */
  const quiet = () =>
    waitFor("a quiet runtime", 900_000, async () =>
      (await metric("agent_sandbox_pool_ready")) === POOL &&
      (await metric("agent_sandbox_reconciler_queue_depth")) === 0 &&
      (await metric("agent_sandbox_reconciler_in_flight")) === 0
        ? true
        : undefined,
    );

  const calm = { answer: [] as number[], terminal: [] as number[] };
  const busy = { answer: [] as number[], terminal: [] as number[] };
  let notClaims = 0;
  const firstFill = await poolReady();
  await quiet();
  const reads: number[] = [];
  for (let i = 0; i < 20; i++) {
    const started = performance.now();
    await api("GET", "/projects");
    reads.push(performance.now() - started);
  }
  for (let i = 0; i < POOL; i++) {
    await quiet();
    const claim = await claimOnce(`calm-${i}`);
    if (!claim) notClaims += 1;
    else {
      calm.answer.push(claim.answerMs);
      calm.terminal.push(claim.terminalMs);
    }
  }
  await quiet();
  for (let i = 0; i < POOL; i++) {
    const claim = await claimOnce(`busy-${i}`);
    if (!claim) notClaims += 1;
    else {
      busy.answer.push(claim.answerMs);
      busy.terminal.push(claim.terminalMs);
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
  const line = (label: string, values: number[]) =>
    `  ${label.padEnd(48)} p50 ${ms(percentile(values, 50))}  p99 ${ms(percentile(values, 99))}  (${values.length})`;
  console.log(`Warm pool of ${POOL} through the runtime (PGlite in its process), ${cores} cores`);
  console.log(`  ${"bare docker run (baseline)".padEnd(48)} p50 ${ms(percentile(bare, 50))}`);
  console.log(
    `  ${"GET /projects, same API, quiet (the floor)".padEnd(48)} p50 ${ms(percentile(reads, 50))}`,
  );
  console.log(line("claim → 201 running, quiet runtime", calm.answer));
  console.log(line("  ... and a working terminal", calm.terminal));
  console.log(line("claim → 201 running, back to back", busy.answer));
  console.log(line("  ... and a working terminal", busy.terminal));
  console.log(`  not claims: ${notClaims}; a cold create through the same API: ${ms(cold)}`);
  console.log(`  first fill of ${POOL} members: ${ms(firstFill)}`);
  const figure = (label: string, values: number[], baseline: { label: string; p50: number }) => ({
    figure: label,
    unit: "ms" as const,
    p50: percentile(values, 50),
    tail: { label: "p99" as const, value: percentile(values, 99) },
    baseline,
    goal: "≤ 150 ms p99",
    samples: values.length,
  });
  report("warm-pool", [
    figure("warm claim: POST /projects → 201 running (quiet runtime)", calm.answer, {
      label: "GET /projects",
      p50: percentile(reads, 50),
    }),
    figure("warm claim with a working terminal (POST → echo), quiet", calm.terminal, {
      label: "bare docker run",
      p50: percentile(bare, 50),
    }),
    figure("warm claim, back to back (refills behind)", busy.answer, {
      label: "cold create, same API",
      p50: cold,
    }),
  ]);
} finally {
  await service?.stop();
  await platform.stop();
}
