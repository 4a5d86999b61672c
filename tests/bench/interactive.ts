// Benchmark (issue 43): time-to-interactive as the field measures it (the ComputeSDK benchmark, May 2026):
// create a sandbox, run a first command (`node -v`), get its output; one after another, and as a burst at
// once. Through our API (POST /projects answered `running`, then POST /projects/{id}/exec) with the warm
// pool full, with a pool smaller than the burst, and with none (cold); through the E2B-compatible API with
// E2B's own SDK (Sandbox.create, then commands.run); beside a bare `docker run` + `docker exec` of the same
// image in the same run. The runtime runs as `npm run local` runs it (PGlite in its process; Postgres with
// BENCH_TTI_DATABASE=postgres); its resident memory is read with the burst's sandboxes running, and the
// sandboxes' own. Each sandbox is deleted after its round, as the field's benchmark does (outside the time). Sequential rounds from the pool start on a
// quiet runtime (the pool refilled, nothing queued): the claim the field measures, not the refill behind
// it. Prints figures; asserts nothing (npm run bench).
import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import { totalmem } from "node:os";
import * as path from "node:path";
import { promisify } from "node:util";
import { Sandbox } from "e2b";
import { tenantNames } from "../../components/tenant/names.js";
import { TenantSpec } from "../../components/tenant/spec.js";
import { waitFor } from "../../lib/process.js";
import { startRuntime, type RuntimeProcess } from "../helpers/api.js";
import { testPlatform } from "../helpers/host.js";
import { freshPostgresDatabase, testPostgresServerUrl } from "../helpers/postgres.js";
import { ms, percentile, report, type Figure } from "./report.js";
import { signedInClient } from "./runtime-client.js";
import { descendants, otlpReceiver, type ReceivedSpan } from "../helpers/otlp-receiver.js";

const run = promisify(execFile);
const count = (name: string, fallback: number, min: number, max: number) => {
  const value = Number(process.env[name] ?? fallback);
  if (!Number.isInteger(value) || value < min || value > max)
    throw new Error(`${name} must be a whole number from ${min} to ${max}`);
  return value;
};
/** Rounds one after another, and the burst's size (the field's: 100 each). */
const ROUNDS = count("BENCH_TTI_ROUNDS", 100, 2, 200);
const BURST = count("BENCH_TTI_BURST", 100, 2, 200);
/** Cold rounds one after another (each is a whole stack's create), and the cold bursts' sizes. */
const COLD_ROUNDS = count("BENCH_TTI_COLD_ROUNDS", 20, 2, 200);
const COLD_BURSTS = [10, 20].filter((n) => n <= BURST);
const E2B_ROUNDS = count("BENCH_TTI_E2B_ROUNDS", 20, 2, 200);
const SMALL_POOL = 10;
/**
 * Which parts run (`BENCH_TTI_PARTS`, comma-separated; all by default): `pool` (a full pool: one after
 * another and a burst, E2B's SDK too), `small` (a burst beyond a pool of ten), `cold` (no pool).
 */
const PARTS = new Set((process.env.BENCH_TTI_PARTS ?? "pool,small,cold").split(",").map((p) => p.trim()));
for (const part of PARTS)
  if (!["pool", "small", "cold"].includes(part))
    throw new Error(`BENCH_TTI_PARTS names ${JSON.stringify(part)}: the parts are pool, small and cold`);
/**
 * The runtime's database (`BENCH_TTI_DATABASE`): `pglite` in its process (`npm run local`'s, the default) or
 * `postgres` (a fresh database on scripts/test-postgres.sh's server, as a platform with many users runs).
 */
const DATABASE = process.env.BENCH_TTI_DATABASE ?? "pglite";
if (DATABASE !== "pglite" && DATABASE !== "postgres")
  throw new Error(`BENCH_TTI_DATABASE is ${JSON.stringify(DATABASE)}: pglite or postgres`);
/**
 * The pool's `memoryOvercommit` (`BENCH_TTI_OVERCOMMIT`, default 1: each member counted at its whole limit):
 * more lets a pool as large as the field's burst of 100 fit a host with less than 100 GiB.
 */
const OVERCOMMIT = Number(process.env.BENCH_TTI_OVERCOMMIT ?? 1);
if (!(OVERCOMMIT >= 1 && OVERCOMMIT <= 64))
  throw new Error("BENCH_TTI_OVERCOMMIT must be a number from 1 to 64");
/**
 * The largest pool this host's memory admits (the runtime's own check, runtime/tenants/pool.ts: each member
 * at a create's default memory limit, times the overcommit), up to the burst.
 */
const MEMBER_MIB = TenantSpec.shape.limits.parse(undefined).memoryMiB;
const HOST_POOL = Math.floor(Math.floor((totalmem() / 2 ** 20) * OVERCOMMIT) / MEMBER_MIB);
const POOL = count("BENCH_TTI_POOL", Math.min(BURST, HOST_POOL), 2, HOST_POOL);
/** The field's published figures (ComputeSDK benchmark, May 2026), p50 / p99, ms. */
const FIELD = "Daytona 186/560, E2B 491/740, Vercel 671/1,315, Modal 1,720/2,490 (ComputeSDK, May 2026)";
const FIELD_BURST = "burst of 100 p50: Daytona 367, E2B 822, Modal 2,260 (ComputeSDK, May 2026)";

interface Round {
  readonly ok: boolean;
  readonly ms: number;
  /** Of which: until the project ran (the create's answer, or its poll), and then the command. */
  readonly createMs?: number;
  readonly id?: string;
  /** When it started (Date.now(): the clock the runtime's spans are on). */
  readonly at?: number;
  readonly error?: string;
}

const platform = await testPlatform({});
// Every runtime's spans (lib/telemetry.ts) come here, each runtime under its own service name.
const receiver = await otlpReceiver();
const { host, tenants } = platform.config;
const figures: Figure[] = [];
/** The summary printed at the end; each line is printed as it is measured too (a long run shows its way). */
const lines = {
  all: [] as string[],
  push(...more: string[]) {
    for (const line of more) console.log(line);
    this.all.push(...more);
  },
};
const summary = (label: string, rounds: readonly Round[]) => {
  const ok = rounds.filter((r) => r.ok);
  const good = ok.map((r) => r.ms);
  const errors = [...new Set(rounds.filter((r) => !r.ok).map((r) => r.error))].slice(0, 3);
  lines.push(
    `  ${label}: p50 ${ms(percentile(good, 50))}  p99 ${ms(percentile(good, 99))}  ` +
      `max ${ms(Math.max(...good))}  ${good.length}/${rounds.length} ok` +
      (errors.length ? `  (${errors.join("; ")})` : ""),
  );
  const creates = ok.filter((r) => r.createMs !== undefined);
  if (creates.length > 0)
    lines.push(
      `      of which the create until running p50 ${ms(
        percentile(
          creates.map((r) => r.createMs!),
          50,
        ),
      )}, ` +
        `then \`node -v\` through exec p50 ${ms(
          percentile(
            creates.map((r) => r.ms - r.createMs!),
            50,
          ),
        )}`,
    );
  return good;
};
const figure = (
  label: string,
  rounds: readonly Round[],
  baseline: { label: string; p50: number },
  goal: string,
): void => {
  const good = summary(label, rounds);
  figures.push({
    figure: `${label} (${good.length}/${rounds.length} ok)`,
    unit: "ms",
    p50: percentile(good, 50),
    tail: { label: good.length >= 20 ? "p99" : "max", value: percentile(good, 99) },
    baseline,
    goal,
    samples: good.length,
  });
};
/** Runs `rounds` rounds of `one`, one after another or all at once. */
const rounds = async (n: number, atOnce: boolean, one: (i: number) => Promise<Round>) => {
  if (atOnce) return Promise.all(Array.from({ length: n }, (_, i) => one(i)));
  const out: Round[] = [];
  for (let i = 0; i < n; i++) out.push(await one(i));
  return out;
};
const failed = (started: number, error: string): Round => ({
  ok: false,
  ms: performance.now() - started,
  error,
});

/** The bare baseline: a container of the image started, then `node -v` run in it; removed afterwards. */
async function bare(name: string): Promise<Round> {
  const started = performance.now();
  try {
    await run("docker", ["run", "-d", "--name", name, "--entrypoint", "sleep", tenants.image, "infinity"]);
    const createMs = performance.now() - started;
    const { stdout } = await run("docker", ["exec", name, "node", "-v"]);
    const elapsed = performance.now() - started;
    return /^v\d+/.test(stdout) ? { ok: true, ms: elapsed, createMs } : failed(started, `output ${stdout}`);
  } catch (error) {
    return failed(started, (error as Error).message.split("\n")[0]!);
  } finally {
    await run("docker", ["rm", "-f", name]).catch(() => undefined);
  }
}

/**
 * A runtime process with a warm pool of `pool` (0: none), for `use`; stopped (and its tenants gone) after.
 * `settleSeconds`: the pool's `settleSeconds` (its default when absent).
 */
async function withRuntime<T>(
  label: string,
  pool: number,
  use: (runtime: RuntimeProcess) => Promise<T>,
  settleSeconds?: number,
) {
  const live = ROUNDS + BURST + pool + 20;
  const server = DATABASE === "postgres" ? await freshPostgresDatabase(testPostgresServerUrl()) : undefined;
  const runtime = await startRuntime(
    `bench-tti-${label}`,
    {
      host: { ...host, dataDir: path.join(host.dataDir, `tti-${label}`) },
      tenants: {
        image: tenants.image,
        subnetPool: "10.162.0.0/16",
        sshPortRange: [29500, 29500 + live],
        leaseSeconds: 30,
        warmPool: {
          size: pool,
          idleSize: 0,
          idleMinutes: 60,
          memoryOvercommit: OVERCOMMIT,
          ...(settleSeconds === undefined ? {} : { settleSeconds }),
        },
      },
    },
    {
      databaseUrl: server?.url,
      runtime: {
        // The answer waits for the sandbox (a claim is running at once; a cold create waits for its stack).
        createWaitSeconds: 300,
        projectQuota: live,
        rateLimits: { createProject: { burst: 100_000, perHour: 3_600_000 } },
        e2b: { defaultTimeoutSeconds: 3600, maxTimeoutSeconds: 3600, createWaitSeconds: 300 },
        telemetry: { otlpEndpoint: receiver.url, serviceName: `bench-tti-${label}`, exportDelayMillis: 500 },
      },
    },
  );
  try {
    return await use(runtime);
  } finally {
    await runtime.stop();
    await server?.drop();
  }
}

/** What one runtime is driven with: a signed-in client, its gauges, and one round of time-to-interactive. */
async function driver(runtime: RuntimeProcess, pool: number) {
  const { api } = await signedInClient(runtime.base, "tti");
  const metric = async (name: string) => {
    const text = await (await fetch(`${runtime.base}/metrics`)).text();
    return Number(new RegExp(`^${name} (\\d+)`, "m").exec(text)?.[1] ?? Number.NaN);
  };
  /** The pool full and nothing queued or in flight. */
  const quiet = () =>
    waitFor("a quiet runtime", 1_800_000, async () =>
      (pool === 0 || (await metric("agent_sandbox_pool_ready")) === pool) &&
      (await metric("agent_sandbox_reconciler_queue_depth")) === 0 &&
      (await metric("agent_sandbox_reconciler_in_flight")) === 0
        ? true
        : undefined,
    );
  /** Create → running → `node -v`'s output, through our API. */
  const interactive = async (name: string): Promise<Round> => {
    const at = Date.now();
    const started = performance.now();
    const created = await api("POST", "/projects", { name });
    if (created.status !== 201 && created.status !== 202)
      return failed(started, `create ${created.status}: ${JSON.stringify(created.body)}`);
    const id = created.body.project_id as string;
    let status = created.body.status as string;
    while (status !== "running") {
      if (status === "error" || performance.now() - started > 600_000)
        return { ...failed(started, `create ended ${status}`), id };
      await new Promise((resolve) => setTimeout(resolve, 50));
      status = (await api("GET", `/projects/${id}`)).body?.status;
    }
    const createMs = performance.now() - started;
    const exec = await api("POST", `/projects/${id}/exec`, { command: ["node", "-v"] });
    const elapsed = performance.now() - started;
    if (exec.status !== 200 || exec.body.exit_code !== 0 || !/^v\d+/.test(exec.body.stdout))
      return { ...failed(started, `exec ${exec.status}: ${JSON.stringify(exec.body)}`), id };
    return { ok: true, ms: elapsed, createMs, id, at };
  };
  /** Every project of the round deleted, and (with a pool) the pool full again. */
  const clear = async (made: readonly Round[]) => {
    await Promise.all(made.filter((r) => r.id).map((r) => api("DELETE", `/projects/${r.id}`)));
    await waitFor("every project deleted", 1_800_000, async () =>
      (await api("GET", "/projects")).body.projects.length === 0 ? true : undefined,
    );
    await quiet();
  };
  /** Rounds one after another from a quiet runtime, each deleted before the next. */
  const sequential = async (label: string, n: number) => {
    const out: Round[] = [];
    for (let i = 0; i < n; i++) {
      await quiet();
      const round = await interactive(`${label}-${i}`);
      out.push(round);
      if (round.id) await api("DELETE", `/projects/${round.id}`);
    }
    await clear(out);
    return out;
  };
  /** `n` at once from a quiet runtime; the runtime's resident memory read while they all run. */
  const burst = async (label: string, n: number) => {
    await quiet();
    const claimsBefore = await metric("agent_sandbox_pool_claims_total");
    const out = await rounds(n, true, (i) => interactive(`${label}-${i}`));
    const claimed = (await metric("agent_sandbox_pool_claims_total")) - claimsBefore;
    const rssMiB = residentMiB(runtime.child.pid!);
    const sandboxes = await sandboxMemoryMiB(out);
    await clear(out);
    return { out, claimed: Number.isNaN(claimed) ? 0 : claimed, rssMiB, sandboxes };
  };
  // E2B's SDK, unchanged, against the same runtime: Sandbox.create, then commands.run("node -v").
  const key = (await api("POST", "/auth/api-keys", { name: "bench" })).body.key as string;
  const opts = {
    apiKey: key,
    apiUrl: `${runtime.base}/e2b`,
    sandboxUrl: `${runtime.base}/e2b`,
    requestTimeoutMs: 300_000,
  };
  /**
   * A call that has not settled in 10 minutes fails its round naming it (a hung call, seen once in a burst
   * of 50, must not hold the benchmark until its own timeout).
   */
  const deadline = <T>(call: Promise<T>, what: string): Promise<T> => {
    let timer: NodeJS.Timeout | undefined;
    return Promise.race([
      call,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`${what}: no answer in 600 s`)), 600_000);
      }),
    ]).finally(() => clearTimeout(timer));
  };
  /** Sandbox.create → commands.run("node -v")'s output; the sandbox killed afterwards (outside the time). */
  const e2bRound = async (): Promise<Round & { sandbox?: Sandbox }> => {
    const started = performance.now();
    let sandbox: Sandbox | undefined;
    try {
      sandbox = await deadline(Sandbox.create(opts), "Sandbox.create");
      const createMs = performance.now() - started;
      const result = await deadline(sandbox.commands.run("node -v"), "commands.run");
      const elapsed = performance.now() - started;
      return /^v\d+/.test(result.stdout)
        ? { ok: true, ms: elapsed, createMs, sandbox }
        : { ...failed(started, `output ${JSON.stringify(result)}`), sandbox };
    } catch (error) {
      return { ...failed(started, (error as Error).message.split("\n")[0]!), sandbox };
    }
  };
  const e2bSequential = async (n: number) => {
    const out: Round[] = [];
    for (let i = 0; i < n; i++) {
      await quiet();
      const round = await e2bRound();
      await round.sandbox?.kill().catch(() => undefined);
      out.push(round);
    }
    await quiet();
    return out;
  };
  const e2bBurst = async (n: number) => {
    await quiet();
    const out = await Promise.all(Array.from({ length: n }, () => e2bRound()));
    await Promise.all(out.map((round) => round.sandbox?.kill().catch(() => undefined)));
    // Any the SDK never learnt of (a create it gave up on) too: every project of the bench's user.
    const left = (await api("GET", "/projects")).body.projects as { project_id: string }[];
    await Promise.all(left.map((project) => api("DELETE", `/projects/${project.project_id}`)));
    await waitFor("every project deleted", 1_800_000, async () =>
      (await api("GET", "/projects")).body.projects.length === 0 ? true : undefined,
    );
    await quiet();
    return out;
  };
  return { api, quiet, interactive, sequential, burst, e2bSequential, e2bBurst };
}

/**
 * The CPU process `pid` has used so far (user + system), ms: its own threads only, not its children's (the
 * runtime's engines and shared provider are processes of their own). Clock ticks are 100 a second on Linux.
 */
function cpuMs(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  // After the name: state is field 3, utime 14 and stime 15 (1-based, proc(5)).
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

/** A process's resident memory (VmRSS), MiB. */
function residentMiB(pid: number): number {
  const kib = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1];
  return Number(kib) / 1024;
}

/** The memory each running sandbox's container uses now (the engine's own count), MiB: p50 and the sum. */
async function sandboxMemoryMiB(made: readonly Round[]): Promise<{ p50: number; sum: number }> {
  const names = made.filter((r) => r.ok && r.id).map((r) => tenantNames(r.id!).container);
  if (names.length === 0) return { p50: Number.NaN, sum: 0 };
  const { stdout } = await run("docker", ["stats", "--no-stream", "--format", "{{.MemUsage}}", ...names]);
  const unit: Record<string, number> = { B: 2 ** -20, KiB: 2 ** -10, MiB: 1, GiB: 1024 };
  const values = stdout
    .trim()
    .split("\n")
    .map((line) => /^([\d.]+)\s*([KMG]?i?B)/.exec(line.trim()))
    .filter((m): m is RegExpExecArray => m !== null)
    .map((m) => Number(m[1]) * (unit[m[2]!] ?? Number.NaN));
  return { p50: percentile(values, 50), sum: values.reduce((a, b) => a + b, 0) };
}

/**
 * Runs `run`, then waits for the spans it made to be exported (the runtimes send every 500 ms): its result,
 * and when it ran (the window {@link rootSpans} picks its spans by).
 */
async function withSpans<T>(run: () => Promise<T>): Promise<{ result: T; window: [number, number] }> {
  const started = Date.now();
  const result = await run();
  const window: [number, number] = [started, Date.now()];
  await new Promise((resolve) => setTimeout(resolve, 2_000));
  return { result, window };
}

/** The spans of runtime `label` named `name` that started inside `window`. */
const rootSpans = (label: string, name: string, window: readonly [number, number]) =>
  receiver.spans.filter(
    (span) =>
      span.service === `bench-tti-${label}` &&
      span.name === name &&
      span.startMs >= window[0] &&
      span.startMs <= window[1],
  );

/**
 * Where the time of `roots` went, from their spans: each span name under them, with the p50 over the roots
 * of its total in one root and of when it started (after the root's start), in that order.
 */
function breakdown(title: string, roots: readonly ReceivedSpan[]): void {
  if (roots.length === 0) {
    lines.push(`  where the time of ${title} goes: no spans received`);
    return;
  }
  const byName = new Map<string, { totals: number[]; offsets: number[] }>();
  for (const root of roots) {
    const inRoot = new Map<string, { total: number; offset: number }>();
    for (const span of descendants(receiver.spans, root)) {
      const entry = inRoot.get(span.name) ?? { total: 0, offset: span.startMs - root.startMs };
      entry.total += span.durationMs;
      inRoot.set(span.name, entry);
    }
    for (const [name, { total, offset }] of inRoot) {
      const entry = byName.get(name) ?? { totals: [], offsets: [] };
      entry.totals.push(total);
      entry.offsets.push(offset);
      byName.set(name, entry);
    }
  }
  lines.push(
    `  where the time of ${title} goes (p50 over ${roots.length}, from its spans): ` +
      `${ms(
        percentile(
          roots.map((root) => root.durationMs),
          50,
        ),
      )} in all`,
  );
  const ordered = [...byName].sort(([, a], [, b]) => percentile(a.offsets, 50) - percentile(b.offsets, 50));
  for (const [name, { totals, offsets }] of ordered)
    lines.push(
      `      at +${ms(percentile(offsets, 50)).padStart(9)}  ${name}: ${ms(percentile(totals, 50))}` +
        (totals.length < roots.length ? ` (in ${totals.length} of ${roots.length})` : ""),
    );
}

/**
 * The `n` slowest rounds of `made` and where their time went: every span of runtime `label` that started
 * inside the round with no parent (the requests, and whatever else ran then: a pool check, an operation),
 * and under each the spans of 10 ms or more, each at its offset from the round's start.
 */
function slowest(label: string, made: readonly Round[], n = 3): void {
  const slow = made.filter((r) => r.ok && r.at !== undefined).sort((a, b) => b.ms - a.ms);
  for (const round of slow.slice(0, n)) {
    const at = round.at!;
    lines.push(
      `  a slow round: ${ms(round.ms)} (until running ${ms(round.createMs ?? Number.NaN)}, ` +
        `then the command ${ms(round.ms - (round.createMs ?? Number.NaN))})`,
    );
    const roots = receiver.spans.filter(
      (span) =>
        span.service === `bench-tti-${label}` &&
        span.parentSpanId === undefined &&
        span.startMs >= at &&
        span.startMs <= at + round.ms + 5,
    );
    for (const root of roots.sort((a, b) => a.startMs - b.startMs)) {
      lines.push(`      at +${ms(root.startMs - at)}  ${root.name}: ${ms(root.durationMs)}`);
      for (const span of descendants(receiver.spans, root).filter((s) => s.durationMs >= 10))
        lines.push(`          at +${ms(span.startMs - at)}  ${span.name}: ${ms(span.durationMs)}`);
    }
  }
}

/** The time in `outer` no span of `inner` covers (the union of their intervals taken out), ms. */
function uncovered(outer: ReceivedSpan, inner: readonly ReceivedSpan[]): number {
  let covered = 0;
  let until = outer.startMs;
  for (const span of [...inner].sort((a, b) => a.startMs - b.startMs)) {
    const start = Math.max(span.startMs, until);
    const end = Math.min(span.endMs, outer.endMs);
    if (end > start) covered += end - start;
    until = Math.max(until, end);
  }
  return outer.durationMs - covered;
}

try {
  console.log(
    `time-to-interactive: ${ROUNDS} one after another, bursts of ${BURST}; pool of ${POOL} ` +
      `(this host's ${(totalmem() / 2 ** 30).toFixed(1)} GiB admits ${HOST_POOL} members of ${MEMBER_MIB} MiB` +
      `${OVERCOMMIT === 1 ? "" : ` with memoryOvercommit ${OVERCOMMIT}`}), ` +
      `pool of ${SMALL_POOL}, none`,
  );
  await run("docker", ["run", "--rm", "--entrypoint", "true", tenants.image]); // the image's layers warm
  const bareSeq = await rounds(ROUNDS, false, (i) => bare(`bench-tti-bare-${process.pid}-${i}`));
  const bareBurst = await rounds(BURST, true, (i) => bare(`bench-tti-burst-${process.pid}-${i}`));
  const bareP50 = {
    label: "docker run + exec",
    p50: percentile(summary("bare: docker run + docker exec, one after another", bareSeq), 50),
  };
  const bareBurstP50 = {
    label: `${BURST} docker run + exec at once`,
    p50: percentile(summary(`bare: ${BURST} docker run + docker exec at once`, bareBurst), 50),
  };

  /** The full pool's burst, with the pool's operations settling (the default) and without (below). */
  let settledBurst: { label: string; p50: number } | undefined;
  if (PARTS.has("pool"))
    await withRuntime("pool", POOL, async (runtime) => {
      const started = performance.now();
      const d = await driver(runtime, POOL);
      await d.quiet();
      lines.push(`  first fill of a pool of ${POOL}: ${ms(performance.now() - started)}`);
      const idleRss = residentMiB(runtime.child.pid!);
      const claims = await withSpans(() => d.sequential("seq", ROUNDS));
      figure(
        `TTI from the pool (${POOL}), one after another`,
        claims.result,
        bareP50,
        "p50 ≤ 100 ms, p99 ≤ 250 ms",
      );
      breakdown(
        "a claim (POST /projects → 201 from the pool, one after another)",
        rootSpans("pool", "POST /projects", claims.window).filter((root) =>
          descendants(receiver.spans, root).some((span) => span.attributes["sandbox.pool.claimed"] === true),
        ),
      );
      slowest("pool", claims.result);
      const fullSpans = await withSpans(() => d.burst("burst", BURST));
      const full = fullSpans.result;
      breakdown(
        `a claim in the burst of ${BURST} (POST /projects → 201)`,
        rootSpans("pool", "POST /projects", fullSpans.window),
      );
      breakdown(
        `a first command in the burst of ${BURST} (POST /projects/{id}/exec → its output)`,
        rootSpans("pool", "POST /projects/{id}/exec", fullSpans.window),
      );
      figure(
        `TTI, burst of ${BURST} at once, pool of ${POOL} (${full.claimed} claimed)`,
        full.out,
        bareBurstP50,
        "p50 ≤ 400 ms, p99 ≤ 1.5 s, all succeed",
      );
      settledBurst = {
        label: "the pool's operations settling 2 s (the default)",
        p50: percentile(
          full.out.filter((r) => r.ok).map((r) => r.ms),
          50,
        ),
      };
      lines.push(
        `  runtime resident memory (${DATABASE === "pglite" ? "PGlite in its process" : "on Postgres"}): ${idleRss.toFixed(0)} MiB with the pool alone, ` +
          `${full.rssMiB.toFixed(0)} MiB with ${full.out.length} projects and the pool`,
        `  one running sandbox's memory (docker stats, p50 of ${full.out.length}): ${full.sandboxes.p50.toFixed(1)} MiB; all: ${full.sandboxes.sum.toFixed(0)} MiB`,
      );
      figure(
        `TTI through E2B's SDK from the pool (${POOL}), one after another`,
        await d.e2bSequential(ROUNDS),
        bareP50,
        "field: E2B 491 ms p50, Daytona 186 ms",
      );
      figure(
        `TTI through E2B's SDK, burst of ${BURST} at once, pool of ${POOL}`,
        await d.e2bBurst(BURST),
        bareBurstP50,
        "field: E2B 822 ms p50 (burst of 100)",
      );
      figures.push({
        figure: `runtime resident memory with ${full.out.length} projects + a pool of ${POOL} (${DATABASE === "pglite" ? "PGlite" : "Postgres"})`,
        unit: "MiB",
        p50: full.rssMiB,
        baseline: { label: "pool alone", p50: idleRss },
        goal: "≤ 400 MiB on Postgres",
      });
    });

  // The same burst with the refills and claims' updates it queues starting at once (settleSeconds 0, as
  // before session 56): their engines take the CPU from the burst's first commands.
  if (settledBurst)
    await withRuntime(
      "unsettled",
      POOL,
      async (runtime) => {
        const d = await driver(runtime, POOL);
        const full = await d.burst("unsettled", BURST);
        figure(
          `TTI, burst of ${BURST} at once, pool of ${POOL}, the pool's operations not settling (settleSeconds 0)`,
          full.out,
          settledBurst!,
          "",
        );
      },
      0,
    );

  if (PARTS.has("small"))
    await withRuntime("small", SMALL_POOL, async (runtime) => {
      const d = await driver(runtime, SMALL_POOL);
      const small = await d.burst("small", BURST);
      figure(
        `TTI, burst of ${BURST} at once, pool of ${SMALL_POOL} (${small.claimed} claimed)`,
        small.out,
        bareBurstP50,
        "all succeed; p50 reported",
      );
    });

  if (PARTS.has("cold"))
    await withRuntime("cold", 0, async (runtime) => {
      const d = await driver(runtime, 0);
      const cpuBefore = cpuMs(runtime.child.pid!);
      const colds = await withSpans(() => d.sequential("cold", COLD_ROUNDS));
      const runtimeCpuMs = (cpuMs(runtime.child.pid!) - cpuBefore) / COLD_ROUNDS;
      figure("TTI cold (no pool), one after another", colds.result, bareP50, "p50 ≤ 1.0 s");
      // The runtime's own CPU per round (its API, reconciler, database and the tenant program run inline; the
      // engines and the provider are other processes): what a burst of cold creates shares two cores with.
      lines.push(
        `  the runtime's own CPU per cold round (create, first command, delete): ${ms(runtimeCpuMs)} ` +
          `(${COLD_ROUNDS} rounds, the runtime's process alone)`,
      );
      const operations = rootSpans("cold", "operation create", colds.window);
      breakdown("a cold create's operation (queued → done, one after another)", operations);
      breakdown(
        "its request (POST /projects → 201, the wait included)",
        rootSpans("cold", "POST /projects", colds.window),
      );
      // The engine's own time: the stack's run less the resource steps' (their union: steps overlap).
      const engine = operations.flatMap((operation) => {
        const under = descendants(receiver.spans, operation);
        const stack = under.find((span) => span.name === "stack create");
        if (!stack) return [];
        const overhead = uncovered(
          stack,
          under.filter((span) => span.name.startsWith("step ")),
        );
        return [{ overhead, steps: stack.durationMs - overhead }];
      });
      const overheads = engine.map((run) => run.overhead);
      const stepTimes = engine.map((run) => run.steps);
      if (overheads.length > 0)
        figures.push({
          figure: "engine overhead per cold create (the stack's run less its resource steps, traced)",
          unit: "ms",
          p50: percentile(overheads, 50),
          tail: { label: "max", value: Math.max(...overheads) },
          baseline: { label: "the resource steps", p50: percentile(stepTimes, 50) },
          goal: "≤ 300 ms",
          samples: overheads.length,
        });
      for (const n of COLD_BURSTS) {
        const cold = await d.burst(`cold${n}`, n);
        figure(`TTI cold, ${n} at once`, cold.out, bareBurstP50, n === 10 ? "p50 ≤ 4 s" : "p50 ≤ 8 s");
      }
      const e2b = await d.e2bSequential(E2B_ROUNDS);
      figure(
        "TTI through E2B's SDK, cold (no pool), one after another",
        e2b,
        bareP50,
        "field: E2B 491 ms p50",
      );
    });

  console.log(
    `\nTime-to-interactive (create → \`node -v\` output), ${(await run("nproc")).stdout.trim()} cores:`,
  );
  for (const line of lines.all) console.log(line);
  console.log(`  the field, one after another p50/p99: ${FIELD}`);
  console.log(`  the field, ${FIELD_BURST}`);
  report("interactive", figures);
} finally {
  await receiver.close();
  await platform.stop();
}
