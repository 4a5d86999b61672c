// Benchmark: the drift check of tenant stacks (a `check-drift` operation, `pulumi refresh --preview-only`
// of the stack, run by the reconciler) with BENCH_DRIFT_TENANTS real tenants up (default 10): the drift
// sweep job once through a reconciler running one operation at a time and once at the platform's
// concurrency (`tenants.maxConcurrent`), against a bare `docker inspect` of the same containers measured in
// the same run; then where one check's time goes, and what the known speedups would save. Prints figures;
// asserts nothing (npm run bench). Targets: <= 0.5 s per stack on 2 cores (issue 43; issue 14's was 1 s), and a
// 100-tenant sweep within the default interval (`runtime.jobs.driftSweepMinutes`, 15 min). A check answers
// in-process when runtime/tenants/drift-precheck.ts proves the stack clean, else through the engine: the
// sweeps count each kind.
import { execFile, spawn } from "node:child_process";
import { pbkdf2Sync, randomBytes } from "node:crypto";
import { promises as fs } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { promisify } from "node:util";
import { PulumiCommand, type Stack } from "@pulumi/pulumi/automation/index.js";
import { specialSecretSig, specialSigKey } from "@pulumi/pulumi/runtime/rpc.js";
import { tenantNames } from "../../components/tenant/names.js";
import { dockerClient } from "../../lib/docker-client.js";
import { waitFor } from "../../lib/process.js";
import { REPO_ROOT, toolchain } from "../../lib/toolchain.js";
import { SANDBOX_HANDLERS } from "../../provider/sandbox-handlers.js";
import { driftSweepJob } from "../../runtime/jobs/drift.js";
import { JobScheduler } from "../../runtime/jobs/scheduler.js";
import { reconcilerOptions } from "../../runtime/reconciler/options.js";
import { requestOperation } from "../../runtime/tenants/service.js";
import { precheckDrift } from "../../runtime/tenants/drift-precheck.js";
import { tenantStack } from "../../runtime/tenants/stack.js";
import { RuntimeConfig, type StackConfig } from "../../stacks/config.js";
import { apiHarness, settledOperation, testReconciler, type ApiHarness } from "../helpers/api.js";
import { tenantLeftovers, testPlatform } from "../helpers/host.js";
import { testDatabase } from "../helpers/postgres.js";
import { report } from "./report.js";
import { containerCpuNs } from "./cgroup.js";
import { getTenant } from "../../runtime/store/tenants.js";

const run = promisify(execFile);
const COUNT = Number(process.env.BENCH_DRIFT_TENANTS ?? 10);
/** Repeats of each step of the breakdown (on one stack). */
const ROUNDS = Number(process.env.BENCH_DRIFT_ROUNDS ?? 5);
const TARGET_PER_STACK_MS = 500;
/** How long the idle host is watched (the image's healthcheck interval, so each container runs one). */
const IDLE_WINDOW_MS = 30_000;
const FLEET = 100;
// The pool holds 256 /24s; the port range one per tenant. Both are the bench's own (no test uses them).
const SUBNET_POOL = "10.224.0.0/15";
const SSH_PORTS: [number, number] = [28000, 28000 + Math.max(COUNT, 1) - 1];
if (!Number.isInteger(COUNT) || COUNT < 1 || COUNT > 256)
  throw new Error(`BENCH_DRIFT_TENANTS must be 1-256 (the subnet pool ${SUBNET_POOL} holds 256 tenants)`);

const sortedOf = (values: readonly number[]) => [...values].sort((a, b) => a - b);
const median = (values: readonly number[]) => {
  const sorted = sortedOf(values);
  const middle = sorted.length >> 1;
  return sorted.length % 2 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2;
};
const seconds = (ms: number) => `${(ms / 1000).toFixed(3)} s`;
const minutes = (ms: number) => `${(ms / 60_000).toFixed(1)} min`;
const row = (label: string, values: readonly number[]) => {
  const sorted = sortedOf(values);
  return (
    `  ${label.padEnd(50)} min ${seconds(sorted[0]!).padStart(7)}  median ${seconds(median(values)).padStart(7)}` +
    `  max ${seconds(sorted.at(-1)!).padStart(7)}`
  );
};
/** One line of the breakdown: a median, with what it is. */
const part = (label: string, ms: number, note = "") =>
  `    ${label.padEnd(66)} ${seconds(ms).padStart(7)}${note ? `  ${note}` : ""}`;

async function timed(fn: () => Promise<unknown>): Promise<number> {
  const started = performance.now();
  await fn();
  return performance.now() - started;
}

/** Milliseconds from spawning `command` until it first writes to stdout (a plugin prints its port). */
function untilFirstOutput(command: string, args: string[]): Promise<number> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const child = spawn(command, args, { stdio: ["ignore", "pipe", "ignore"] });
    child.once("error", reject);
    child.stdout.once("data", () => {
      resolve(performance.now() - started);
      child.kill();
    });
    child.once("exit", (code) => reject(new Error(`${command} exited (${code}) before writing anything`)));
  });
}

/** Outputs from `pulumi stack export --show-secrets` as the plugin receives them: secrets as their values. */
function plainOutputs(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(plainOutputs);
  if (value === null || typeof value !== "object") return value;
  const record = value as Record<string, unknown>;
  if (record[specialSigKey] === specialSecretSig) return plainOutputs(JSON.parse(String(record.plaintext)));
  return Object.fromEntries(Object.entries(record).map(([key, v]) => [key, plainOutputs(v)]));
}

/**
 * One refresh preview with the CLI's own log (-v 7, JSON lines with wall-clock times), cut into phases
 * by the log lines that start and end them. Only the timestamps are kept: the log is never printed.
 */
async function phasedPreview(stack: Stack): Promise<Record<string, number>> {
  let stderr = "";
  const called = Date.now();
  await stack.previewRefresh({
    logVerbosity: 7,
    logToStdErr: true,
    logFlow: true,
    onError: (chunk) => (stderr += chunk),
    onEvent: () => undefined,
  });
  const returned = Date.now();
  const lines = stderr.split("\n").flatMap((line) => {
    try {
      const entry = JSON.parse(line) as { time?: string; msg?: string };
      return entry.time && entry.msg ? [{ at: Date.parse(entry.time), msg: entry.msg }] : [];
    } catch {
      return [];
    }
  });
  const first = (test: (msg: string) => boolean) => lines.find((line) => test(line.msg))?.at;
  const last = (test: (msg: string) => boolean) => lines.findLast((line) => test(line.msg))?.at;
  const marks = {
    logStart: lines[0]?.at,
    refreshStart: first((m) => m.startsWith("*** Starting Refresh")),
    pluginReady: first((m) => m.includes(".GetPluginInfo() executing")),
    readsDone: last((m) => m.startsWith("Refresh diff for")),
    complete: first((m) => m.includes("Refresh(preview=true) complete")),
  };
  for (const [mark, at] of Object.entries(marks))
    if (at === undefined) throw new Error(`the CLI's log has no '${mark}' line: the log format changed`);
  const at = marks as Record<keyof typeof marks, number>;
  return {
    spawn: at.logStart - called,
    backend: at.refreshStart - at.logStart,
    plugin: at.pluginReady - at.refreshStart,
    reads: at.readsDone - at.pluginReady,
    finish: at.complete - at.readsDone,
    exit: returned - at.complete,
    total: returned - called,
  };
}

/** Each Read of the stack's custom resources in this process: the provider's I/O without engine or gRPC. */
async function readsInProcess(stack: Stack) {
  const state = await stack.exportStack();
  const resources = (
    state.deployment.resources as { type: string; id?: string; outputs?: Record<string, unknown> }[]
  ).filter((resource) => SANDBOX_HANDLERS[resource.type] && resource.id);
  const read = (resource: (typeof resources)[number]) =>
    SANDBOX_HANDLERS[resource.type]!.read(resource.id!, plainOutputs(resource.outputs ?? {}));
  const each = new Map<string, number[]>();
  const parallel: number[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    for (const resource of resources) {
      const ms = await timed(() => read(resource));
      each.set(resource.type, [...(each.get(resource.type) ?? []), ms]);
    }
    // The engine issues them all at once (no dependency orders a refresh).
    parallel.push(await timed(() => Promise.all(resources.map(read))));
  }
  return { each, parallel };
}

interface Sweep {
  readonly concurrency: number;
  readonly enqueued: number;
  /** From the job's start until the last check finished. */
  readonly wallMs: number;
  /** Each check from its claim to its end, as the operation rows record them. */
  readonly perStack: number[];
  readonly failed: number;
  readonly drifted: number;
  /** Checks the pre-check answered without the engine. */
  readonly inProcess: number;
}

/** Runs the drift sweep job once through a reconciler taking `concurrency` operations at a time. */
async function sweep(h: ApiHarness<"bench">, config: StackConfig, concurrency: number): Promise<Sweep> {
  await h.reconciler?.stop();
  h.reconciler = testReconciler(h.db, config, { maxConcurrent: concurrency });
  const jobs = new JobScheduler(h.db, [driftSweepJob(h.db, config.runtime.jobs.driftSweepMinutes * 60_000)]);
  const since = (await h.db.query<{ now: Date }>("select now() as now")).rows[0]!.now;
  const job = await jobs.runNow("drift-sweep");
  await waitFor("the sweep's checks", 60_000 + COUNT * 30_000, async () => {
    const { rows } = await h.db.query<{ n: number }>(
      "select count(*)::int as n from operations where state in ('pending', 'running')",
    );
    return rows[0]!.n === 0 ? true : undefined;
  });
  const { rows } = await h.db.query<{
    started_at: Date;
    finished_at: Date;
    state: string;
    result: { drifted?: boolean; checked?: string } | null;
  }>(
    "select started_at, finished_at, state, result from operations where kind = 'check-drift' and created_at >= $1",
    [since],
  );
  return {
    concurrency,
    enqueued: (job?.last_detail as { enqueued?: number } | undefined)?.enqueued ?? 0,
    wallMs: Math.max(...rows.map((r) => r.finished_at.getTime())) - since.getTime(),
    perStack: rows.map((r) => r.finished_at.getTime() - r.started_at.getTime()),
    failed: rows.filter((r) => r.state !== "succeeded").length,
    drifted: rows.filter((r) => r.result?.drifted).length,
    inProcess: rows.filter((r) => r.result?.checked === "in-process").length,
  };
}

/**
 * Deletes every tenant not yet deleted through a reconciler taking `concurrency` operations at a time, and
 * waits until no operation is left open (a failed delete does not end in `deleted`; it is returned).
 */
async function deleteEverything(h: ApiHarness<"bench">, config: StackConfig, concurrency: number) {
  await h.reconciler?.stop();
  h.reconciler = testReconciler(h.db, config, { maxConcurrent: concurrency });
  const { rows: live } = await h.db.query<{ project_id: string }>(
    "select project_id from tenants where state <> 'deleted'",
  );
  const operations = [];
  for (const { project_id } of live)
    operations.push((await requestOperation(h.db, project_id, "delete")).operation);
  return Promise.all(
    operations.map((operation) => settledOperation(h.db, operation, 120_000 + COUNT * 15_000)),
  );
}

/** The host's busy and total CPU time so far, in clock ticks (/proc/stat). */
async function hostCpuTicks(): Promise<{ busy: number; total: number }> {
  const fields = (await fs.readFile("/proc/stat", "utf8")).split("\n")[0]!.trim().split(/\s+/).slice(1, 9);
  const [user, nice, system, idle, iowait, irq, softirq, steal] = fields.map(Number) as number[];
  const busy = user! + nice! + system! + irq! + softirq! + steal!;
  return { busy, total: busy + idle! + iowait! };
}

/** Summed CPU nanoseconds of the containers, or undefined when any of them cannot be read. */
async function containersCpuNs(ids: readonly string[]): Promise<number | undefined> {
  const each = await Promise.all(ids.map(containerCpuNs));
  return each.some((ns) => ns === undefined) ? undefined : each.reduce<number>((a, b) => a + b!, 0);
}

/**
 * What the idle sandboxes cost the host: its CPU busy share over `windowMs` with no operation running, the
 * share used inside the containers, and the CPU one run of the image's healthcheck takes in its container.
 */
async function idleCost(containerIds: readonly string[], windowMs: number) {
  const [hostBefore, containersBefore] = [await hostCpuTicks(), await containersCpuNs(containerIds)];
  const started = performance.now();
  await new Promise((resolve) => setTimeout(resolve, windowMs));
  const elapsedNs = (performance.now() - started) * 1e6;
  const [hostAfter, containersAfter] = [await hostCpuTicks(), await containersCpuNs(containerIds)];
  const cores = os.cpus().length;
  const hostBusy = (hostAfter.busy - hostBefore.busy) / (hostAfter.total - hostBefore.total);
  const containersCores =
    containersBefore === undefined || containersAfter === undefined
      ? undefined
      : (containersAfter - containersBefore) / elapsedNs;
  // The image's HEALTHCHECK (docker runs it in every container on its interval), run here by hand.
  const first = containerIds[0]!;
  const { Config } = await dockerClient().getContainer(first).inspect();
  const healthcheck = Config.Healthcheck as { Test?: string[]; Interval?: number } | undefined;
  let checkCpuNs: number | undefined;
  let checkWallMs: number | undefined;
  if (healthcheck?.Test?.[0] === "CMD") {
    const runs = 5;
    const before = await containerCpuNs(first);
    const wall = await timed(async () => {
      for (let i = 0; i < runs; i++) await run("docker", ["exec", first, ...healthcheck.Test!.slice(1)]);
    });
    const after = await containerCpuNs(first);
    checkWallMs = wall / runs;
    if (before !== undefined && after !== undefined) checkCpuNs = (after - before) / runs;
  }
  return {
    cores,
    hostBusyCores: hostBusy * cores,
    containersCores,
    healthcheck: healthcheck?.Test?.slice(1).join(" "),
    intervalMs: (healthcheck?.Interval ?? 0) / 1e6,
    checkCpuNs,
    checkWallMs,
  };
}

const platform = await testPlatform({ subnetPool: SUBNET_POOL, sshPortRange: SSH_PORTS });
const { config } = platform;
const chain = toolchain();
const ids: string[] = [];
let h: ApiHarness<"bench"> | undefined;
let plugin: ReturnType<typeof spawn> | undefined;
try {
  h = await apiHarness({
    database: await testDatabase("pglite", { under: config.host.dataDir }),
    config,
    users: ["bench"],
    reconciler: true,
    // One user holds every tenant: the quota and the create rate are not what is measured.
    server: {
      limits: RuntimeConfig.parse({
        projectQuota: COUNT,
        rateLimits: { createProject: { burst: COUNT, perHour: COUNT } },
      }),
    },
  });
  const loadBefore = os.loadavg()[0]!;
  const createStarted = performance.now();
  for (let i = 0; i < COUNT; i++) {
    const created = await h.as("bench", "POST", "/projects", { name: `drift-bench-${i}` });
    if (created.statusCode !== 202) throw new Error(`create ${i}: ${created.statusCode} ${created.body}`);
    ids.push(created.json().project_id);
  }
  for (const id of ids) await h.waitForStatus("bench", id, "running", 120_000 + COUNT * 15_000);
  const createdMs = performance.now() - createStarted;

  // Baseline: what the engine says about the same containers, read the cheapest ways there are.
  const containers = ids.map((id) => tenantNames(id).container);
  const engine = dockerClient();
  await run("docker", ["inspect", containers[0]!]); // warm-up
  const inspectCli: number[] = [];
  for (const name of containers) inspectCli.push(await timed(() => run("docker", ["inspect", name])));
  const inspectAll = await timed(() => run("docker", ["inspect", ...containers], { maxBuffer: 256 << 20 }));
  const inspectApi: number[] = [];
  for (const name of containers) inspectApi.push(await timed(() => engine.getContainer(name).inspect()));

  // The host's load from the idle sandboxes themselves, over one healthcheck interval, before any check.
  const idle = await idleCost(
    await Promise.all(containers.map(async (name) => (await engine.getContainer(name).inspect()).Id)),
    IDLE_WINDOW_MS,
  );
  const sequential = await sweep(h, config, 1);
  const concurrent = await sweep(h, config, config.tenants.maxConcurrent);

  // Where one check's time goes, on the first tenant, with all of them up (the same ruleset, engine, Squid).
  // Each round measures every step once, so that a burst of load on the machine hits all of them alike.
  const spec = (await getTenant(h.db, ids[0]!))!.spec;
  const stackOptions = reconcilerOptions(config).stack;
  const steps = {
    operation: [] as number[],
    version: [] as number[],
    command: [] as number[],
    select: [] as number[],
    preview: [] as number[],
    reused: [] as number[],
    attached: [] as number[],
    plugin: [] as number[],
    pluginNoSourceMaps: [] as number[],
    node: [] as number[],
    kdf: [] as number[],
    precheck: [] as number[],
  };
  const phases: Record<string, number>[] = [];
  let stack: Stack | undefined;
  const salt = randomBytes(8);
  const bin = path.join(REPO_ROOT, "bin", "pulumi-resource-sandbox");
  const bundle = path.join(REPO_ROOT, "dist", "plugins", "sandbox.mjs");
  // One long-lived plugin process, for the engine to attach to instead of starting one per check.
  plugin = spawn(bin, ["127.0.0.1:1"], { stdio: ["ignore", "pipe", "ignore"] });
  const port = await new Promise<string>((resolve) =>
    plugin!.stdout!.once("data", (data) => resolve(String(data).trim())),
  );
  let attachedChanges = "";
  let precheckAnswer = "";
  for (let round = 0; round < ROUNDS; round++) {
    // The real path: one check-drift operation through the reconciler, claim to end.
    const { operation } = await requestOperation(h.db, ids[0]!, "check-drift");
    const done = await settledOperation(h.db, operation);
    steps.operation.push(done.finished_at!.getTime() - done.started_at!.getTime());
    // What the reconciler's check-drift calls: tenantStack (PulumiCommand.get, LocalWorkspace.create,
    // stack select), then previewRefresh with an event listener (its events become the progress).
    steps.select.push(await timed(async () => (stack = await tenantStack(spec, stackOptions))));
    steps.preview.push(await timed(() => stack!.previewRefresh({ onEvent: () => undefined })));
    steps.reused.push(await timed(() => stack!.previewRefresh({ onEvent: () => undefined })));
    process.env.PULUMI_DEBUG_PROVIDERS = `sandbox:${port}`;
    try {
      steps.attached.push(
        await timed(async () => {
          const result = await stack!.previewRefresh({ onEvent: () => undefined });
          attachedChanges = JSON.stringify(result.changeSummary);
        }),
      );
    } finally {
      delete process.env.PULUMI_DEBUG_PROVIDERS;
    }
    phases.push(await phasedPreview(stack!));
    steps.version.push(await timed(() => run(chain.pulumiBin, ["version"])));
    steps.command.push(await timed(() => PulumiCommand.get({ root: chain.pulumiRoot })));
    steps.plugin.push(await untilFirstOutput(bin, ["127.0.0.1:1"]));
    steps.pluginNoSourceMaps.push(await untilFirstOutput(process.execPath, [bundle, "127.0.0.1:1"]));
    steps.node.push(await untilFirstOutput(process.execPath, ["-e", "console.log(0)"]));
    // pulumi's passphrase secrets manager derives its key with PBKDF2-SHA256, 1,000,000 iterations, in
    // every CLI process that opens the stack (sdk/go/common/resource/config/crypt.go).
    steps.kdf.push(await timed(async () => pbkdf2Sync("benchmark", salt, 1_000_000, 32, "sha256")));
    // The pre-check alone (its key derived once per process, in the first round's operation above).
    steps.precheck.push(
      await timed(async () => {
        const result = await precheckDrift(ids[0]!, stackOptions);
        precheckAnswer = result.clean
          ? `clean, ${result.resources} resources`
          : `not clean: ${result.reason}`;
      }),
    );
  }
  const reads = await readsInProcess(stack!);

  const cores = os.cpus().length;
  const interval = config.runtime.jobs.driftSweepMinutes * 60_000;
  console.log(
    `Drift check of ${COUNT} tenant stacks (pulumi refresh --preview-only through the reconciler), ${cores} cores, ` +
      `load ${loadBefore.toFixed(2)} before, ${os.loadavg()[0]!.toFixed(2)} after; ${COUNT} tenants created in ${seconds(createdMs)} (not measured here)`,
  );
  console.log(row("docker inspect <container> (CLI, baseline)", inspectCli));
  console.log(row("engine API inspect (what the provider calls)", inspectApi));
  console.log(`  ${`docker inspect of all ${COUNT} at once`.padEnd(50)} ${seconds(inspectAll)}`);
  const share = (cores: number) => `${cores.toFixed(2)} of ${idle.cores} cores`;
  console.log(
    `  idle host (${COUNT} sandboxes, no operation, ${seconds(IDLE_WINDOW_MS)}): ${share(idle.hostBusyCores)} busy, ` +
      `${idle.containersCores === undefined ? "containers' share unknown" : `${share(idle.containersCores)} inside the containers`}`,
  );
  if (idle.healthcheck && idle.checkCpuNs !== undefined)
    console.log(
      `      one run of the image's healthcheck (${idle.healthcheck}): ${seconds(idle.checkCpuNs / 1e6)} CPU in the ` +
        `container, ${seconds(idle.checkWallMs!)} wall by docker exec; every ${seconds(idle.intervalMs)} in each sandbox: ` +
        `${share((COUNT * idle.checkCpuNs) / 1e6 / idle.intervalMs)} for ${COUNT}, ${share((FLEET * idle.checkCpuNs) / 1e6 / idle.intervalMs)} for ${FLEET}`,
    );
  for (const result of [sequential, concurrent]) {
    const label = `drift check, ${result.concurrency === 1 ? "sequential" : `${result.concurrency} at once`}`;
    console.log(row(`${label} (claim to end)`, result.perStack));
    console.log(
      `      sweep of ${result.enqueued}: ${seconds(result.wallMs)} wall, ${seconds(result.wallMs / COUNT)} per stack;` +
        ` ${result.failed} failed, ${result.drifted} drifted, ${result.inProcess} answered in-process`,
    );
  }
  const baseline = median(inspectCli);
  console.log(
    `  ratio to docker inspect: ${(median(sequential.perStack) / baseline).toFixed(1)}x sequential (median), ` +
      `${(concurrent.wallMs / COUNT / baseline).toFixed(1)}x per stack of the ${concurrent.concurrency}-at-once sweep`,
  );
  const perStack = concurrent.wallMs / COUNT;
  report("drift-check", [
    {
      figure: `drift check per stack, sweep of ${COUNT} at ${concurrent.concurrency} at once`,
      unit: "s",
      p50: perStack / 1000,
      baseline: { label: "docker inspect CLI", p50: baseline / 1000 },
      goal: "≤ 0.5 s per stack",
    },
    {
      figure: "drift check of one stack, sequential (claim to end)",
      unit: "s",
      p50: median(sequential.perStack) / 1000,
      tail: { label: "max", value: Math.max(...sequential.perStack) / 1000 },
      baseline: { label: "docker inspect CLI", p50: baseline / 1000 },
      samples: sequential.perStack.length,
    },
  ]);
  console.log(
    `  target <= ${seconds(TARGET_PER_STACK_MS)} per stack: sequential median ${seconds(median(sequential.perStack))}, ` +
      `swept ${seconds(perStack)} per stack`,
  );
  console.log(
    COUNT >= FLEET
      ? `  ${FLEET}-tenant sweep: measured ${minutes(concurrent.wallMs)} (${COUNT} stacks) against the ${minutes(interval)} interval`
      : `  ${FLEET}-tenant sweep: PROJECTED ${minutes(perStack * FLEET)} (${seconds(perStack)} per stack measured with ${COUNT}, ` +
          `linear) against the ${minutes(interval)} interval`,
  );

  const phase = (name: string) => median(phases.map((p) => p[name]!));
  const readTypes = [...reads.each.entries()].sort(([, a], [, b]) => median(b) - median(a));
  console.log(
    `  where one check's time goes (tenant 1 of ${COUNT}; medians of ${ROUNDS} rounds, each measuring every step once):`,
  );
  console.log(part("check-drift operation through the reconciler, claim to end", median(steps.operation)));
  console.log(
    part(
      "  the in-process pre-check alone (checkpoint, secrets, Read + Diff of each)",
      median(steps.precheck),
      `(${precheckAnswer})`,
    ),
  );
  console.log(
    part(
      "  reconciler: claim, lease, drift record (operation - pre-check, ±noise; when answered in-process)",
      median(steps.operation.map((ms, i) => ms - steps.precheck[i]!)),
    ),
  );
  console.log("    the engine's path, taken when the pre-check cannot prove the stack clean:");
  console.log(
    part(
      "  tenantStack: Automation API workspace + `pulumi stack select`",
      median(steps.select),
      `(of which PulumiCommand.get, a \`pulumi version\` run: ${seconds(median(steps.command))})`,
    ),
  );
  console.log(part("  previewRefresh (pulumi refresh --preview-only)", median(steps.preview)));
  console.log(`      cut by the CLI's own log (-v 7; that run took ${seconds(phase("total"))}):`);
  console.log(
    part(
      "    call to the CLI's first log line (Automation API, process start)",
      phase("spawn"),
      `(bare \`pulumi version\`: ${seconds(median(steps.version))})`,
    ),
  );
  console.log(
    part(
      "    backend, state and secrets manager (the key service's data key)",
      phase("backend"),
      `(a stack of the passphrase provider pays its KDF here: PBKDF2 10^6 in Node ${seconds(median(steps.kdf))})`,
    ),
  );
  console.log(
    part(
      "    start of pulumi-resource-sandbox until it answers",
      phase("plugin"),
      `(alone: ${seconds(median(steps.plugin))}; bare node ${seconds(median(steps.node))}; ` +
        `without --enable-source-maps ${seconds(median(steps.pluginNoSourceMaps))})`,
    ),
  );
  console.log(part("    Read + Diff of every resource (in parallel)", phase("reads")));
  console.log(part("    engine wrap-up, CLI exit, Automation API clean-up", phase("finish") + phase("exit")));
  console.log(
    `      the provider's Reads in this process (no engine, no gRPC), all at once ${seconds(median(reads.parallel))}:`,
  );
  for (const [type, values] of readTypes) console.log(part(`  ${type}`, median(values)));
  console.log("  what the known speedups would save, measured here (not in the runtime today):");
  console.log(
    part(
      "previewRefresh on a Stack kept from the last check (no version, no select)",
      median(steps.reused),
      `(-${seconds(median(steps.select) + median(steps.preview) - median(steps.reused))} per check)`,
    ),
  );
  console.log(
    part(
      "  ... and the engine attached to one long-lived plugin process",
      median(steps.attached),
      `(-${seconds(median(steps.reused) - median(steps.attached))} more; changes ${attachedChanges})`,
    ),
  );
} finally {
  plugin?.kill();
  if (h) {
    const deletes = await deleteEverything(h, config, config.tenants.maxConcurrent);
    const failed = deletes.filter((d) => d.state !== "succeeded");
    if (failed.length > 0) {
      // Reported, then retried one at a time so that the bench leaves nothing behind.
      console.log(
        `  clean-up: ${failed.length} of ${deletes.length} deletes at ${config.tenants.maxConcurrent} at once FAILED:`,
      );
      for (const d of failed) console.log(`    ${d.project_id}: ${d.error}`);
      const retried = await deleteEverything(h, config, 1);
      console.log(
        `    retried one at a time: ${retried.filter((d) => d.state === "succeeded").length} of ${retried.length} succeeded`,
      );
    }
    const left = (await Promise.all(ids.map((id) => tenantLeftovers(config.host, id)))).flat();
    console.log(
      left.length === 0
        ? `  clean-up: ${ids.length} tenants deleted, nothing left behind`
        : `  clean-up LEFT: ${left.join("; ")}`,
    );
    await h.close();
  }
  await platform.stop();
}
