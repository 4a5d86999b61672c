// Benchmark (issue 48): a fleet of kubernetes tenants, each its own Pulumi stack applied by Pulumi's Kubernetes
// provider, made through the runtime's API and reconciler on the suite's cluster (kwok's node: no real Pods'
// cost), then two drift sweeps of all of them (the first through the engine, whose clean refreshes vouch for
// each stack's objects; the next with nothing changed, answered by the pre-check where the objects are as
// vouched), a rollout preview of all of them (a new tenant program version: every stack's preview runs the
// whole program and diffs every object), and their deletes (BENCH_FLEET_SKIP=preview,delete leaves out the
// preview or the timed deletes; the harness then deletes what it can in 10 minutes as it closes, and the
// cluster and the platform go with whatever is left). For each size in
// BENCH_FLEET_SIZES (default "100,1000"): the wall time of each phase, each stack's own operation time (p50 and
// p99, from the operations' start and end), and the peak resident memory and open file descriptors of the
// runtime (this process: API, reconciler, the inline programs) and of the engines it runs (its descendants:
// `pulumi`, the provider). The baseline, in the same run: the same create with nothing else going on.
// Goals: a drift sweep of 1,000 in ≤ 15 min on 2 cores (moonshot); bounded memory and descriptors. Asserts
// nothing (npm run bench).
import { readdirSync, readFileSync } from "node:fs";
import * as os from "node:os";
import { waitFor } from "../../lib/process.js";
import { driftSweepJob } from "../../runtime/jobs/drift.js";
import { JobScheduler } from "../../runtime/jobs/scheduler.js";
import { kubernetesProjects } from "../../runtime/kubernetes/sandbox.js";
import { previewFleet } from "../../runtime/tenants/fleet.js";
import { tenantStackOptions } from "../../runtime/tenants/config.js";
import { StackConfig } from "../../stacks/config.js";
import { apiHarness, type ApiHarness } from "../helpers/api.js";
import { testPlatform } from "../helpers/host.js";
import { tenantCluster } from "../helpers/kube-tenant-cluster.js";
import { testDatabase } from "../helpers/postgres.js";
import { percentile, report, type Figure } from "./report.js";

const SIZES = (process.env.BENCH_FLEET_SIZES ?? "100,1000").split(",").map((size) => Number(size.trim()));
for (const size of SIZES)
  if (!Number.isInteger(size) || size < 1 || size > 1000)
    throw new Error(`BENCH_FLEET_SIZES: ${size} is not a whole number of tenants from 1 to 1000`);
/** The reconciler's concurrency (`tenants.maxConcurrent`) and the preview's. */
const CONCURRENCY = Number(process.env.BENCH_FLEET_CONCURRENCY ?? 8);
const BASELINE_CREATES = 3;
const SKIP = new Set((process.env.BENCH_FLEET_SKIP ?? "").split(",").filter(Boolean));
for (const phase of SKIP)
  if (phase !== "preview" && phase !== "delete")
    throw new Error(`BENCH_FLEET_SKIP: ${phase} is not a phase to skip (preview, delete)`);
const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`;

/** Resident memory (MiB) and open descriptors of a process; zeros for one that has gone. */
function usageOf(pid: number | "self"): { rss: number; fds: number } {
  try {
    const status = readFileSync(`/proc/${pid}/status`, "utf8");
    const rss = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0) / 1024;
    return { rss, fds: readdirSync(`/proc/${pid}/fd`).length };
  } catch {
    return { rss: 0, fds: 0 };
  }
}

/** Every process below `pid`. */
function descendantsOf(pid: number): number[] {
  const children: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      if (Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]) === pid) children.push(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  return [...children, ...children.flatMap(descendantsOf)];
}

/** Samples the runtime and its engines every second while `phase` runs; the peaks. */
async function sampled<T>(phase: () => Promise<T>) {
  const peak = { runtimeRss: 0, runtimeFds: 0, enginesRss: 0, enginesFds: 0, engines: 0 };
  const sample = () => {
    const self = usageOf("self");
    const engines = descendantsOf(process.pid).map(usageOf);
    peak.runtimeRss = Math.max(peak.runtimeRss, self.rss);
    peak.runtimeFds = Math.max(peak.runtimeFds, self.fds);
    peak.enginesRss = Math.max(
      peak.enginesRss,
      engines.reduce((sum, u) => sum + u.rss, 0),
    );
    peak.enginesFds = Math.max(
      peak.enginesFds,
      engines.reduce((sum, u) => sum + u.fds, 0),
    );
    peak.engines = Math.max(peak.engines, engines.length);
  };
  const timer = setInterval(sample, 1_000);
  const started = performance.now();
  try {
    const result = await phase();
    sample();
    return { result, wall: performance.now() - started, peak };
  } finally {
    clearInterval(timer);
  }
}

/** Each finished operation's own time (start to end) of `kind`, in ms, since `after`. */
async function operationTimes(h: ApiHarness<"fleet">, kind: string, after: Date) {
  const { rows } = await h.db.query<{ state: string; ms: number }>(
    `select state, extract(epoch from (finished_at - started_at)) * 1000 as ms from operations
      where kind = $1 and created_at >= $2 and finished_at is not null`,
    [kind, after],
  );
  return {
    times: rows.filter((r) => r.state === "succeeded").map((r) => Number(r.ms)),
    failed: rows.filter((r) => r.state !== "succeeded").length,
  };
}

/**
 * Waits until the reconciler has nothing pending or running, saying every minute how far it is (a run cut
 * short still leaves its rate).
 */
async function settled(h: ApiHarness<"fleet">, what: string, since: Date): Promise<void> {
  const started = performance.now();
  const progress = setInterval(() => {
    void h.db
      .query<{ state: string; n: number }>(
        "select state, count(*)::int as n from operations where created_at >= $1 group by state",
        [since],
      )
      .then(({ rows }) =>
        console.log(
          `  ${what}, ${seconds(performance.now() - started)} in: ${rows.map((r) => `${r.n} ${r.state}`).join(", ")}`,
        ),
      )
      .catch(() => undefined);
  }, 60_000);
  try {
    await waitFor(what, 6 * 3_600_000, async () => {
      const { rows } = await h.db.query<{ n: number }>(
        "select count(*)::int as n from operations where state in ('pending', 'running')",
      );
      return rows[0]!.n === 0 ? true : undefined;
    });
  } finally {
    clearInterval(progress);
  }
}

// One fake node with room for the whole fleet: each tenant's sandbox (1 CPU, 1 GiB) and egress proxy.
const k8s = await tenantCluster({
  node: { cpu: "4000", memory: "8Ti", pods: "5000", cidr: "10.244.0.1/19" },
});
const platform = await testPlatform({
  subnetPool: "10.176.0.0/14",
  sshPortRange: [30000, 31100],
  maxConcurrent: CONCURRENCY,
  kubernetes: {
    kubeconfigFile: k8s.kubeconfigFile,
    runtimeClassName: "gvisor",
    homeSize: "10Gi",
    credentials: "kubeconfig",
    clusterDns: { namespace: "kube-system", podLabels: { "k8s-app": "kube-dns" } },
  },
});
const figures: Figure[] = [];
try {
  for (const size of SIZES) {
    const config = StackConfig.parse({
      ...platform.config,
      runtime: {
        ...platform.config.runtime,
        createWaitSeconds: 0,
        projectQuota: size + BASELINE_CREATES + 10,
        rateLimits: { createProject: { burst: size + BASELINE_CREATES + 10, perHour: 100_000 } },
      },
    });
    await k8s.volumes(`fleet${size}`, size + BASELINE_CREATES);
    const projects = kubernetesProjects(k8s.kubeconfigFile);
    const h = await apiHarness({
      database: await testDatabase("pglite", { under: config.host.dataDir }),
      config,
      users: ["fleet"],
      reconciler: true,
      server: { projects: { kubernetes: projects }, limits: config.runtime },
    });
    try {
      const create = async (name: string) => {
        const answer = await h.as("fleet", "POST", "/projects", { name, backend: "kubernetes" });
        if (answer.statusCode !== 202) throw new Error(`POST /projects: ${answer.statusCode} ${answer.body}`);
        return answer.json().project_id as string;
      };
      // The baseline: the same create, one at a time, with nothing else going on.
      const alone: number[] = [];
      for (let i = 0; i < BASELINE_CREATES; i++) {
        const started = performance.now();
        const id = await create(`alone-${i}`);
        await h.waitForStatus("fleet", id, "running", 600_000);
        alone.push(performance.now() - started);
      }
      const since = new Date();
      const made = await sampled(async () => {
        const ids: string[] = [];
        for (let i = 0; i < size; i++) ids.push(await create(`fleet-${i}`));
        await settled(h, `${size} creates`, since);
        return ids;
      });
      const creates = await operationTimes(h, "create", since);
      const { rows: states } = await h.db.query<{ status: string; n: number }>(
        "select state as status, count(*)::int as n from tenants group by state",
      );
      console.log(
        `${size} kubernetes tenants created through the API (reconciler concurrency ${CONCURRENCY}, ${os.cpus().length} cores): ` +
          `${seconds(made.wall)} in all; each stack p50 ${seconds(percentile(creates.times, 50))}, p99 ` +
          `${seconds(percentile(creates.times, 99))} (alone: p50 ${seconds(percentile(alone, 50))}); ${creates.failed} failed; ` +
          `tenants: ${states.map((s) => `${s.n} ${s.status}`).join(", ")}`,
      );

      const sweeper = new JobScheduler(h.db, [driftSweepJob(h.db, 3_600_000)]);
      const sweep = async (which: string) => {
        const sweepSince = new Date();
        const swept = await sampled(async () => {
          await sweeper.runNow("drift-sweep");
          await settled(h, `the ${which} drift sweep`, sweepSince);
        });
        const checks = await operationTimes(h, "check-drift", sweepSince);
        const { rows: drift } = await h.db.query<{ status: string; n: number }>(
          "select status, count(*)::int as n from project_drift group by status",
        );
        const { rows: how } = await h.db.query<{ checked: string | null; n: number }>(
          `select result->>'checked' as checked, count(*)::int as n from operations
            where kind = 'check-drift' and created_at >= $1 group by 1 order by 1`,
          [sweepSince],
        );
        console.log(
          `the ${which} drift sweep of ${checks.times.length + checks.failed} stacks: ${seconds(swept.wall)}; each check p50 ` +
            `${seconds(percentile(checks.times, 50))}, p99 ${seconds(percentile(checks.times, 99))}; ` +
            `findings: ${drift.map((d) => `${d.n} ${d.status}`).join(", ")}; ` +
            `checked: ${how.map((c) => `${c.n} ${c.checked ?? "(none)"}`).join(", ")}`,
        );
        return { swept, checks };
      };
      const first = await sweep("first");
      const next = await sweep("next");

      const previewed = SKIP.has("preview")
        ? undefined
        : await sampled(() =>
            previewFleet(tenantStackOptions(config), { version: "sha256:fleetbenchnext00" }, CONCURRENCY),
          );
      if (previewed) {
        const outcomes = new Map<string, number>();
        for (const tenant of previewed.result.tenants)
          outcomes.set(tenant.status, (outcomes.get(tenant.status) ?? 0) + 1);
        console.log(
          `a rollout preview of ${previewed.result.tenants.length} stacks (a new program version, concurrency ${CONCURRENCY}): ` +
            `${seconds(previewed.wall)}; ${[...outcomes].map(([status, n]) => `${n} ${status}`).join(", ")}`,
        );
      }

      const phases = [made.peak, first.swept.peak, next.swept.peak, ...(previewed ? [previewed.peak] : [])];
      const peak = (key: keyof (typeof made)["peak"]) => Math.max(...phases.map((phase) => phase[key]));
      console.log(
        `peaks over the ${phases.length} phases: runtime ${peak("runtimeRss").toFixed(0)} MiB and ${peak("runtimeFds")} descriptors; ` +
          `its engines (up to ${peak("engines")} processes) ${peak("enginesRss").toFixed(0)} MiB and ${peak("enginesFds")} descriptors`,
      );

      if (!SKIP.has("delete")) {
        const deleted = await sampled(async () => {
          const { projects: left } = (await h.as("fleet", "GET", "/projects")).json() as {
            projects: { project_id: string }[];
          };
          for (const project of left) await h.as("fleet", "DELETE", `/projects/${project.project_id}`);
          await waitFor("every project deleted", 6 * 3_600_000, async () =>
            (await h.as("fleet", "GET", "/projects")).json().projects.length === 0 ? true : undefined,
          );
        });
        console.log(`deleting all ${size + BASELINE_CREATES}: ${seconds(deleted.wall)}`);
      }

      const alone50 = percentile(alone, 50) / 1000;
      figures.push(
        {
          figure: `kubernetes fleet of ${size}: each create (POST /projects → running, Pulumi's provider on kwok)`,
          unit: "s",
          p50: percentile(creates.times, 50) / 1000,
          tail: { label: "p99", value: percentile(creates.times, 99) / 1000 },
          baseline: { label: "the same create alone", p50: alone50 },
          samples: creates.times.length,
        },
        {
          figure: `kubernetes fleet of ${size}: all created (wall, concurrency ${CONCURRENCY})`,
          unit: "s",
          p50: made.wall / 1000,
          baseline: { label: `${size} × one alone`, p50: alone50 * size },
        },
        {
          figure: `kubernetes fleet of ${size}: the first drift sweep (wall; the engine's refresh of each)`,
          unit: "s",
          p50: first.swept.wall / 1000,
          ...(size === 1000 ? { goal: "≤ 15 min on 2 cores (moonshot)" } : {}),
          samples: first.checks.times.length,
        },
        {
          figure: `kubernetes fleet of ${size}: the next drift sweep (wall; objects as the engine vouched for them)`,
          unit: "s",
          p50: next.swept.wall / 1000,
          baseline: { label: "the first sweep", p50: first.swept.wall / 1000 },
          ...(size === 1000 ? { goal: "≤ 15 min on 2 cores (moonshot)" } : {}),
          samples: next.checks.times.length,
        },
        ...(previewed
          ? [
              {
                figure: `kubernetes fleet of ${size}: a rollout preview of every stack (wall)`,
                unit: "s",
                p50: previewed.wall / 1000,
              } satisfies Figure,
            ]
          : []),
        {
          figure: `kubernetes fleet of ${size}: the runtime's peak resident memory`,
          unit: "MiB",
          p50: peak("runtimeRss"),
          goal: "bounded",
        },
        {
          figure: `kubernetes fleet of ${size}: its engines' peak resident memory (all at once)`,
          unit: "MiB",
          p50: peak("enginesRss"),
          goal: "bounded",
        },
      );
    } finally {
      await h.close();
      projects.close();
    }
  }
} finally {
  await platform.stop();
  await k8s.stop();
}
report("fleet-1000", figures);
