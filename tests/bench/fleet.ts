// Benchmark: many creates at once through the product's own path, and what a fleet costs the runtime. The
// runtime runs as `npm run local` runs it (its own process, the reconciler at its configured concurrency,
// the shared provider); a client registers and sends POST /projects 10 at once, then 20 at once, each
// timed until GET shows it running; then enough more to hold FLEET tenants, and the resident memory of the
// runtime and of its shared provider is read from /proc with none and with FLEET tenants. All of it once
// on a Postgres server (scripts/test-postgres.sh's) and once on PGlite in the runtime's process (the
// embedded default), each in `BENCH_FLEET_DATABASES` (default both; the bursts on the first only).
// A bare `docker run` of the same image is the baseline, measured in the same run. Asserts nothing.
// Issue 17: 10 at once p50 ≤ 6 s (moonshot), 20 at once all succeed, runtime memory with 50 tenants;
// issue 43: the runtime's memory with 100 tenants ≤ 400 MiB on Postgres, the PGlite figure beside it.
import { execFile } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import * as path from "node:path";
import { promisify } from "node:util";
import { waitFor } from "../../lib/process.js";
import { RUNTIME_APP_BUNDLE } from "../../scripts/bundles.js";
import { startRuntime, type RuntimeProcess } from "../helpers/api.js";
import { testPlatform } from "../helpers/host.js";
import { freshPostgresDatabase, testPostgresServerUrl } from "../helpers/postgres.js";
import { percentile, report, type Figure } from "./report.js";
import { bareDockerRuns, signedInClient } from "./runtime-client.js";

const run = promisify(execFile);
const FLEET = Number(process.env.BENCH_FLEET ?? 50);
const BURSTS = [10, 20] as const;
if (!Number.isInteger(FLEET) || FLEET < 20 || FLEET > 200) throw new Error("BENCH_FLEET must be 20-200");
const MAX_CONCURRENT = 4;
const DATABASES = (process.env.BENCH_FLEET_DATABASES ?? "postgres,pglite").split(",").map((d) => d.trim());
for (const d of DATABASES)
  if (d !== "postgres" && d !== "pglite")
    throw new Error(`BENCH_FLEET_DATABASES: ${d} is not postgres or pglite`);
const seconds = (ms: number) => `${(ms / 1000).toFixed(2)} s`;

/** Resident memory of a process, in MiB (VmRSS of /proc/<pid>/status). */
function rssMiB(pid: number): number {
  const line = readFileSync(`/proc/${pid}/status`, "utf8")
    .split("\n")
    .find((l) => l.startsWith("VmRSS:"));
  return Number(/(\d+)/.exec(line ?? "")?.[1] ?? Number.NaN) / 1024;
}

/** The runtime's long-lived children (the shared provider): pids whose parent is `pid`, with their name. */
function childrenOf(pid: number): { pid: number; name: string }[] {
  const found: { pid: number; name: string }[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      const name = stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"));
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      if (ppid === pid) found.push({ pid: Number(entry), name });
    } catch {
      // gone meanwhile
    }
  }
  return found;
}

/** All processes below `pid` (children, their children, ...). */
function descendantsOf(pid: number): number[] {
  const direct = childrenOf(pid).map((c) => c.pid);
  return [...direct, ...direct.flatMap(descendantsOf)];
}

const platform = await testPlatform({});

/** The median of ten readings of `pid`'s resident memory a second apart, after `settleMs` (start-up and creates leave garbage). */
async function steadyRss(pid: number, settleMs: number): Promise<number> {
  await new Promise((resolve) => setTimeout(resolve, settleMs));
  const readings: number[] = [];
  for (let i = 0; i < 10; i++) {
    readings.push(rssMiB(pid));
    await new Promise((resolve) => setTimeout(resolve, 1_000));
  }
  return percentile(readings, 50);
}

/** The fleet's run on one database: its figures, named by `database`; the bursts only `withBursts`. */
async function fleetOn(database: "postgres" | "pglite", withBursts: boolean): Promise<Figure[]> {
  let service: RuntimeProcess | undefined;
  const created: string[] = [];
  const server = database === "postgres" ? await freshPostgresDatabase(testPostgresServerUrl()) : undefined;
  try {
    const { host, tenants } = platform.config;
    const start = (argv?: readonly string[]) =>
      startRuntime(
        "bench-fleet",
        {
          host: { ...host, dataDir: path.join(host.dataDir, `fleet-${database}`) },
          tenants: {
            image: tenants.image,
            subnetPool: "10.160.0.0/16",
            sshPortRange: [28300, 28300 + FLEET + 20],
            maxConcurrent: MAX_CONCURRENT,
            leaseSeconds: 30,
          },
        },
        {
          databaseUrl: server?.url,
          runtime: {
            createWaitSeconds: 0,
            projectQuota: FLEET + 10,
            rateLimits: { createProject: { burst: FLEET + 10, perHour: 10_000 } },
          },
          ...(argv ? { argv } : {}),
        },
      );
    // The baseline of the idle figure: the same runtime started from the service's own bundle, which loads
    // the Pulumi SDK whole (its closure serializer's compiler and Arborist: lib/deferred-requires.ts).
    const whole = await start(["--enable-source-maps", RUNTIME_APP_BUNDLE]);
    const idleWhole = await steadyRss(whole.child.pid!, 20_000).finally(() => whole.stop());
    service = await start();
    const base = service.base;
    const { api } = await signedInClient(base, "fleet");

    // The baseline: a bare container start of the same image.
    const bare = await bareDockerRuns(tenants.image);

    const runtimePid = service.child.pid!;
    const idleRuntime = await steadyRss(runtimePid, 20_000);

    /** POST /projects, then GET until running: milliseconds, or the failure. */
    const createOne = async (name: string): Promise<number> => {
      const started = performance.now();
      const answer = await api("POST", "/projects", { name });
      if (answer.status >= 300)
        throw new Error(`POST /projects: ${answer.status} ${JSON.stringify(answer.body)}`);
      const id: string = answer.body.project_id;
      created.push(id);
      // An error ends the wait at once (waitFor retries a probe that throws, until its deadline).
      const view = await waitFor(`${name} running`, 600_000, async () => {
        const answer = await api("GET", `/projects/${id}`);
        return ["running", "error"].includes(answer.body?.status) ? answer.body : undefined;
      });
      if (view.status === "error") throw new Error(`${name} failed: ${JSON.stringify(view)}`);
      return performance.now() - started;
    };

    const bursts: { count: number; times: number[]; failed: string[]; wall: number }[] = [];
    for (const count of withBursts ? BURSTS : []) {
      const started = performance.now();
      const results = await Promise.allSettled(
        Array.from({ length: count }, (_, i) => createOne(`burst${count}-${i}`)),
      );
      bursts.push({
        count,
        times: results.flatMap((r) => (r.status === "fulfilled" ? [r.value] : [])),
        failed: results.flatMap((r) => (r.status === "rejected" ? [String(r.reason)] : [])),
        wall: performance.now() - started,
      });
    }
    // Up to the fleet, MAX_CONCURRENT * 2 at a time (the reconciler queues the rest anyway).
    while (created.length < FLEET) {
      const batch = Math.min(MAX_CONCURRENT * 2, FLEET - created.length);
      await Promise.all(Array.from({ length: batch }, (_, i) => createOne(`fleet-${created.length + i}`)));
    }
    const running = (await api("GET", "/projects")).body.projects.filter(
      (p: { status: string }) => p.status === "running",
    ).length;
    // After the post-create work has settled (first backups, health checks).
    const fleetRuntime = await steadyRss(runtimePid, 20_000);
    const helpers = childrenOf(runtimePid);
    const helperRss = descendantsOf(runtimePid).reduce((sum, pid) => {
      try {
        return sum + rssMiB(pid);
      } catch {
        return sum;
      }
    }, 0);

    // Printed before the deletes, which can outlast their wait: what was measured is not lost with them.
    const cores = (await run("nproc")).stdout.trim();
    const on = database === "postgres" ? "Postgres" : "PGlite in-process";
    console.log(
      `Fleet through the runtime on ${on} (POST /projects → running), reconciler concurrency ${MAX_CONCURRENT}, ${cores} cores`,
    );
    console.log(`  bare docker run (baseline)           p50 ${seconds(percentile(bare, 50))}`);
    for (const b of bursts)
      console.log(
        `  ${`${b.count} at once`.padEnd(36)} p50 ${seconds(percentile(b.times, 50))}  max ${seconds(Math.max(...b.times))}  ` +
          `all done in ${seconds(b.wall)}; ${b.times.length} succeeded, ${b.failed.length} failed${b.failed.length ? `: ${b.failed.join("; ")}` : ""}`,
      );
    console.log(`  running after the fleet was made: ${running} of ${FLEET}`);
    console.log(
      `  runtime resident memory: ${idleRuntime.toFixed(0)} MiB with none (${idleWhole.toFixed(0)} MiB loading the SDK whole), ` +
        `${fleetRuntime.toFixed(0)} MiB with ${FLEET} tenants; ` +
        `its children (${helpers.map((h) => h.name).join(", ") || "none"}, with theirs): ${helperRss.toFixed(0)} MiB`,
    );
    const deleteStarted = performance.now();
    await Promise.all(created.map((id) => api("DELETE", `/projects/${id}`)));
    await waitFor("every project deleted", 900_000, async () =>
      (await api("GET", "/projects")).body.projects.length === 0 ? true : undefined,
    );
    const deleteWall = performance.now() - deleteStarted;
    created.length = 0;

    console.log(`  deleting all ${FLEET}: ${seconds(deleteWall)}`);
    return [
      ...bursts.map((b) => ({
        figure: `POST /projects → running, ${b.count} at once (${b.times.length}/${b.count} succeeded)`,
        unit: "s" as const,
        p50: percentile(b.times, 50) / 1000,
        tail: { label: "max" as const, value: Math.max(...b.times) / 1000 },
        baseline: { label: "bare docker run", p50: percentile(bare, 50) / 1000 },
        samples: b.times.length,
        ...(b.count === 10 ? { goal: "≤ 6 s p50, all succeed" } : { goal: "all succeed" }),
      })),
      {
        ...(database === "postgres" ? { goal: "≤ 400 MiB with 100 tenants" } : {}),
        figure: `runtime resident memory with ${FLEET} tenants (${on})`,
        unit: "MiB" as const,
        p50: fleetRuntime,
        baseline: { label: "with none", p50: idleRuntime },
        samples: 1,
      },
      {
        figure: `runtime resident memory with none, the SDK's closure serializer deferred (${on})`,
        unit: "MiB" as const,
        p50: idleRuntime,
        baseline: { label: "the SDK loaded whole", p50: idleWhole },
        samples: 1,
      },
      {
        figure: `runtime's children (shared provider) with ${FLEET} tenants (${on})`,
        unit: "MiB" as const,
        p50: helperRss,
        samples: 1,
      },
    ];
  } finally {
    // On a failed run, the runtime's stop destroys whatever tenant stacks are left.
    await service?.stop();
    await server?.drop();
  }
}

try {
  const figures: Figure[] = [];
  for (const [i, database] of DATABASES.entries())
    figures.push(...(await fleetOn(database as "postgres" | "pglite", i === 0)));
  report("fleet", figures);
} finally {
  await platform.stop();
}
