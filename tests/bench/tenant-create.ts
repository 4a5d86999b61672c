// Benchmark: cold create of tenant stacks (a new stack's first `up`: keypair, backup dir, bridge,
// firewall rules, Squid allowlist, volume, container), 10 one after another and 10 at once, against a
// bare container start measured in the same run. Prints figures and where the time goes; asserts nothing.
import { execFile } from "node:child_process";
import { promises as fs } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { promisify } from "node:util";
import { Stack, type EngineEvent } from "@pulumi/pulumi/automation/index.js";
import { livePid, waitFor } from "../../lib/process.js";
import { squidPaths, squidProxy } from "../../lib/host/squid.js";
import {
  createTenant,
  destroyTenant,
  localWorkspace,
  TENANT_PROJECT,
  tenantWorkspace,
  upTenant,
  type TenantStackOptions,
} from "../../runtime/tenants/stack.js";
import { initTenantStackFiles } from "../../runtime/tenants/stack-init.js";
import { tenantNames } from "../../components/tenant/names.js";
import { buildSandboxImage } from "../../sandbox-image/build.js";
import type { TenantSpecInput } from "../../components/tenant/spec.js";
import { isolatedHostConfig } from "../helpers/host.js";
import { sharedProviderFor } from "../../runtime/tenants/shared-provider.js";
import { toolchain } from "../../lib/toolchain.js";
import { report } from "./report.js";

const run = promisify(execFile);
const COUNT = Number(process.env.BENCH_TENANTS ?? 10);

const percentile = (values: number[], p: number) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
};
const seconds = (ms: number) => `${(ms / 1000).toFixed(2)} s`;

const host = await isolatedHostConfig();
await squidProxy({ port: host.squidPort, ...host }).ensure(() => undefined);
const image = (await buildSandboxImage({ base: "local", log: () => undefined })).tag;
await fs.mkdir(path.join(host.dataDir, "state"), { recursive: true });
const base: TenantStackOptions = {
  backendUrl: `file://${path.join(host.dataDir, "state")}`,
  workRoot: path.join(host.dataDir, "work"),
  passphrase: "benchmark",
};

/** Resource type → milliseconds from its pre-event to its outputs event (custom resources only). */
const stepTimes = new Map<string, number[]>();
/** Milliseconds from calling `up` to the engine's first resource step: CLI, engine and program start-up. */
const startupTimes: number[] = [];
/**
 * Per create with the shared provider: its whole time minus the resources' own span (first resource step
 * to the last resource's outputs): what the CLI, the engine and the program add around the work itself.
 */
const overheads: number[] = [];
/** The resources' own span of those creates. */
const spans: number[] = [];
const isComponent = (type: string) => type === "pulumi:pulumi:Stack" || type.startsWith("sandbox:tenant:");
function timedOptions(span?: { first?: number; last?: number }): TenantStackOptions {
  const called = Date.now();
  const started = new Map<string, number>();
  let first = true;
  return {
    ...base,
    onEvent: (event: EngineEvent) => {
      const pre = event.resourcePreEvent?.metadata;
      if (pre && pre.op === "create" && !isComponent(pre.type)) {
        if (first) startupTimes.push(Date.now() - called);
        first = false;
        started.set(pre.urn, Date.now());
        if (span) span.first ??= performance.now();
      }
      const out = event.resOutputsEvent?.metadata;
      if (out && out.op === "create" && started.has(out.urn)) {
        const list = stepTimes.get(out.type) ?? [];
        list.push(Date.now() - started.get(out.urn)!);
        stepTimes.set(out.type, list);
        if (span) span.last = performance.now();
      }
    },
  };
}

/**
 * Pulumi's passphrase secrets provider, as every stack was made before the key service
 * (runtime/tenants/stack-keys.ts): each CLI run derives its key (1,000,000 PBKDF2 iterations). The baseline of
 * the same creates and operations with the key service, the default.
 */
const PASSPHRASE = { secretsProvider: "passphrase" } as const;

/**
 * The operator's own PULUMI_HOME, where the CLI keeps a log of every run and lists them all first, as every
 * tenant operation's CLI run did before the engine home (runtime/tenants/stack.ts `tenantEngineHome`): the
 * baseline of the same creates and operations in that home, the default.
 */
const OPERATOR_HOME = process.env.PULUMI_HOME ?? path.join(os.homedir(), ".pulumi");
const WITH_LOGS = { engineHome: OPERATOR_HOME } as const;
const logsIn = async (home: string) =>
  (await fs.readdir(path.join(home, "logs")).catch(() => [] as string[])).filter((name) =>
    name.endsWith(".log"),
  ).length;

/** A create with the shared provider; the key service's, its engine overhead and steps recorded too. */
async function sharedCreate(index: number, group: Group = "seq-shared"): Promise<number> {
  const span: { first?: number; last?: number } = {};
  const measured = group === "seq-shared";
  const total = await timed(() =>
    createTenant(spec(index, group), {
      // The baselines' creates stay out of the breakdown of where a create's time goes.
      ...(measured
        ? timedOptions(span)
        : { ...base, ...(group === "seq-passphrase" ? PASSPHRASE : WITH_LOGS) }),
      sharedProvider: true,
    }),
  );
  if (span.first !== undefined && span.last !== undefined) {
    spans.push(span.last - span.first);
    overheads.push(total - (span.last - span.first));
  }
  return total;
}

/** Each group's first subnet octet / SSH port offset: own plugin per operation, or the shared provider. */
const GROUPS = {
  seq: 0,
  par: 100,
  "seq-shared": 50,
  "par-shared": 150,
  "seq-passphrase": 200,
  "seq-logs": 25,
} as const;
type Group = keyof typeof GROUPS;

function spec(index: number, group: Group): TenantSpecInput {
  return {
    projectId: `bench-${group}-${index}`,
    ownerId: "bench",
    mode: "local",
    image,
    subnet: `10.234.${GROUPS[group] + index}.0/24`,
    sshHostPort: 27500 + GROUPS[group] + index,
    allowlist: ["example.test"],
    host: {
      squidPort: host.squidPort,
      squidConfigFile: squidPaths(host).config,
      squidFragmentsDir: squidPaths(host).fragmentsDir,
      backupRoot: path.join(host.dataDir, "backups"),
    },
  };
}

async function timed(fn: () => Promise<unknown>): Promise<number> {
  const started = performance.now();
  await fn();
  return performance.now() - started;
}

try {
  const bare: number[] = [];
  await run("docker", ["run", "--rm", "--entrypoint", "true", image]); // warm-up
  for (let i = 0; i < COUNT; i++)
    bare.push(await timed(() => run("docker", ["run", "--rm", "--entrypoint", "true", image])));

  const sequential: number[] = [];
  for (let i = 0; i < COUNT; i++)
    sequential.push(await timed(() => createTenant(spec(i, "seq"), timedOptions())));

  const concurrentStarted = performance.now();
  const concurrent = await Promise.all(
    Array.from({ length: COUNT }, (_, i) => timed(() => createTenant(spec(i, "par"), timedOptions()))),
  );
  const concurrentWall = performance.now() - concurrentStarted;

  // The same with the shared provider (tenants.sharedProvider, the runtime's default): its start-up is
  // paid once, before the timing, as a runtime pays it once.
  const shared = { sharedProvider: true } as const;
  await sharedProviderFor(toolchain().env).debugProviders();
  // One after another, each create with the key service beside one with the passphrase provider, and one
  // whose CLI keeps its automatic logs in the operator's home.
  const sequentialShared: number[] = [];
  const sequentialPassphrase: number[] = [];
  const sequentialWithLogs: number[] = [];
  const operatorLogs = await logsIn(OPERATOR_HOME);
  for (let i = 0; i < COUNT; i++) {
    sequentialShared.push(await sharedCreate(i));
    sequentialPassphrase.push(await sharedCreate(i, "seq-passphrase"));
    sequentialWithLogs.push(await sharedCreate(i, "seq-logs"));
  }
  const concurrentSharedStarted = performance.now();
  const concurrentShared = await Promise.all(
    Array.from({ length: COUNT }, (_, i) =>
      timed(() => createTenant(spec(i, "par-shared"), { ...timedOptions(), ...shared })),
    ),
  );
  const concurrentSharedWall = performance.now() - concurrentSharedStarted;

  // An operation of an existing stack with nothing to change (an `up` of the same spec, shared provider):
  // the engine's overhead per operation alone. Beside it, the CLI run it no longer makes (`stack select`,
  // each operation's before session 50), timed in the same stacks' work directories.
  const unchanged: number[] = [];
  const unchangedPassphrase: number[] = [];
  const unchangedWithLogs: number[] = [];
  const selects: number[] = [];
  const unchangedUp = async (index: number, group: Group) => {
    let changes: Record<string, number> = {};
    const home = group === "seq-logs" ? WITH_LOGS : {};
    const ms = await timed(async () => {
      changes = (await upTenant(spec(index, group), { ...base, ...shared, ...home })).summary.resourceChanges;
    });
    const changed = Object.entries(changes).filter(([op, n]) => op !== "same" && n > 0);
    if (changed.length > 0) throw new Error(`an up of an unchanged stack changed ${JSON.stringify(changes)}`);
    return ms;
  };
  for (let i = 0; i < COUNT; i++) {
    unchanged.push(await unchangedUp(i, "seq-shared"));
    // A stack of the passphrase provider is opened by the passphrase whatever the options make new stacks with.
    unchangedPassphrase.push(await unchangedUp(i, "seq-passphrase"));
    unchangedWithLogs.push(await unchangedUp(i, "seq-logs"));
    const workspace = await localWorkspace(spec(i, "seq-shared").projectId, async () => undefined, base);
    selects.push(
      await timed(() => workspace.selectStack(tenantNames(spec(i, "seq-shared").projectId).stack)),
    );
  }

  // A new stack's making alone: its files written directly (a create's, runtime/tenants/stack-init.ts)
  // against `pulumi stack init` (every create's before), each in a work directory of its own.
  const initDirect: number[] = [];
  const initCli: number[] = [];
  for (let i = 0; i < COUNT; i++) {
    for (const how of ["direct", "cli"] as const) {
      const stack = `tenant-bench-init-${how}-${i}`;
      const workspace = await tenantWorkspace(path.join(base.workRoot, stack), async () => undefined, base);
      const ms = await timed(async () => {
        if (how === "cli") {
          await Stack.create(stack, workspace);
          return;
        }
        const made = await initTenantStackFiles({
          backendUrl: base.backendUrl,
          project: TENANT_PROJECT,
          stack,
          workDir: workspace.workDir,
          passphrase: base.passphrase!,
          cliVersion: workspace.pulumiVersion,
        });
        if (!made) throw new Error("the backend is not laid out by the CLI yet: no stack made directly");
      });
      (how === "cli" ? initCli : initDirect).push(ms);
      await workspace.removeStack(stack);
    }
  }

  const destroyed: number[] = [];
  for (const group of Object.keys(GROUPS) as Group[]) {
    for (let i = 0; i < COUNT; i++)
      destroyed.push(await timed(() => destroyTenant(spec(i, group).projectId, base)));
  }

  const row = (label: string, values: number[]) =>
    `  ${label.padEnd(34)} p50 ${seconds(percentile(values, 50)).padStart(8)}  p95 ${seconds(percentile(values, 95)).padStart(8)}`;
  console.log(
    `Tenant cold create, ${COUNT} tenants each way, on ${(await run("nproc")).stdout.trim()} cores`,
  );
  console.log(row("bare container start (baseline)", bare));
  console.log(row("cold create, sequential", sequential));
  console.log(
    row(`cold create, ${COUNT} concurrent`, concurrent) +
      `  (all ${COUNT} done in ${seconds(concurrentWall)})`,
  );
  console.log(row("cold create, sequential, shared", sequentialShared));
  console.log(
    row(`cold create, ${COUNT} concurrent, shared`, concurrentShared) +
      `  (all ${COUNT} done in ${seconds(concurrentSharedWall)})`,
  );
  console.log(
    row("cold create, sequential, shared, passphrase", sequentialPassphrase) + "  (before the key service)",
  );
  console.log(
    row("cold create, sequential, shared, CLI logs kept", sequentialWithLogs) +
      `  (before the engine home: ${OPERATOR_HOME}/logs held ${operatorLogs} logs at the start)`,
  );
  console.log(row("up of an unchanged stack, shared", unchanged));
  console.log(row("the same, passphrase provider", unchangedPassphrase) + "  (before the key service)");
  console.log(row("the same, CLI logs kept", unchangedWithLogs) + "  (before the engine home)");
  console.log(row("`pulumi stack select` alone", selects) + "  (no longer run before an operation)");
  console.log(row("a new stack's files, written directly", initDirect));
  console.log(row("the same, `pulumi stack init`", initCli) + "  (every create's before)");
  console.log(row("delete (destroy + remove stack)", destroyed));
  console.log(
    row("engine overhead per create, shared", overheads) + "  (whole create minus the resources' span)",
  );
  console.log(
    `  ratio cold create / bare start: p50 ${(percentile(sequential, 50) / percentile(bare, 50)).toFixed(1)}x sequential, ` +
      `${(percentile(concurrent, 50) / percentile(bare, 50)).toFixed(1)}x concurrent; shared provider: ` +
      `${(percentile(sequentialShared, 50) / percentile(bare, 50)).toFixed(1)}x sequential, ` +
      `${(percentile(concurrentShared, 50) / percentile(bare, 50)).toFixed(1)}x concurrent; moonshot p50 ≤ 1.5 s`,
  );
  const create = (figure: string, values: number[], goal?: string) => ({
    figure,
    unit: "s" as const,
    p50: percentile(values, 50) / 1000,
    tail: { label: "p95" as const, value: percentile(values, 95) / 1000 },
    baseline: { label: "bare docker run", p50: percentile(bare, 50) / 1000 },
    samples: values.length,
    ...(goal ? { goal } : {}),
  });
  report("tenant-create", [
    create("cold create, sequential (plugin per operation)", sequential),
    create("cold create, sequential (shared provider)", sequentialShared, "≤ 1.0 s p50"),
    {
      ...create("cold create, sequential (shared provider), the key service's stacks", sequentialShared),
      baseline: {
        label: "the same with Pulumi's passphrase provider",
        p50: percentile(sequentialPassphrase, 50) / 1000,
      },
    },
    {
      ...create("cold create, sequential (shared provider), no automatic CLI logs", sequentialShared),
      baseline: {
        label: `the same, the CLI's logs kept in the operator's home (${operatorLogs} there at the start)`,
        p50: percentile(sequentialWithLogs, 50) / 1000,
      },
    },
    create(`cold create, ${COUNT} at once (plugin per operation)`, concurrent),
    create(`cold create, ${COUNT} at once (shared provider)`, concurrentShared, "≤ 6 s p50 for 10"),
    {
      ...create("a new stack made: its files written directly (each create's)", initDirect),
      baseline: { label: "`pulumi stack init` (each create's before)", p50: percentile(initCli, 50) / 1000 },
    },
    create("delete (destroy + remove stack)", destroyed),
    {
      ...create(
        "up of an unchanged stack (shared provider): the engine's overhead per operation",
        unchanged,
        "≤ 0.3 s",
      ),
      baseline: { label: "`pulumi stack select` alone (saved)", p50: percentile(selects, 50) / 1000 },
    },
    {
      ...create("up of an unchanged stack (shared provider), no automatic CLI logs", unchanged),
      baseline: {
        label: "the same, the CLI's logs kept in the operator's home",
        p50: percentile(unchangedWithLogs, 50) / 1000,
      },
    },
    {
      ...create("up of an unchanged stack (shared provider), the key service's stacks", unchanged),
      baseline: {
        label: "the same with Pulumi's passphrase provider",
        p50: percentile(unchangedPassphrase, 50) / 1000,
      },
    },
    {
      ...create(
        "engine overhead per create (shared provider): whole create minus the resources' span",
        overheads,
        "≤ 0.5 s",
      ),
      baseline: {
        label: "the resources' span",
        p50: percentile(spans, 50) / 1000,
      },
    },
  ]);
  const mean = (values: number[]) => values.reduce((a, b) => a + b, 0) / values.length;
  console.log("  where the time goes (means over all creates):");
  console.log(
    `    until the first resource step (CLI, engine, plugins, program)  ${seconds(mean(startupTimes))}`,
  );
  const steps = [...stepTimes.entries()]
    .map(([type, values]) => ({ type, mean: mean(values) }))
    .sort((a, b) => b.mean - a.mean);
  for (const step of steps) console.log(`    ${step.type.padEnd(62)} ${seconds(step.mean)}`);
  console.log("    (resources without a dependency between them are created in parallel)");
} finally {
  for (const group of Object.keys(GROUPS) as Group[]) {
    for (let i = 0; i < COUNT; i++)
      await destroyTenant(spec(i, group).projectId, base).catch(() => undefined);
  }
  await run("squid", ["-k", "shutdown", "-f", squidPaths(host).config]).catch(() => undefined);
  await waitFor("squid to exit", 15_000, async () =>
    (await livePid(squidPaths(host).pidFile)) ? undefined : true,
  ).catch(() => undefined);
  await fs.rm(path.dirname(host.configDir), { recursive: true, force: true });
}
