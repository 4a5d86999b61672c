// A rollout: this checkout's tenant program applied to every tenant stack in waves (one canary, then a
// share of the rest, then the rest), stopping at the first wave that fails. Each apply is an ordinary
// `update` operation in the queue, so it waits for whatever runs on that stack and everything queued
// after it waits for it; it is marked with this program's version, so only this process's reconciler
// (running this program) takes it, never the runtime's.
import * as os from "node:os";
import type { Database } from "../store/db.js";
import { waitFor } from "../../lib/process.js";
import type { ProgramVersion } from "../../stacks/tenant/version.js";
import { Reconciler, type ReconcilerOptions } from "./reconciler.js";
import { enqueueOperation, getOperation, type Operation } from "../store/operations.js";
import { liveTenantVersions } from "../store/tenants.js";

export interface RolloutPlanOptions {
  /** The project that goes first and alone (default: the oldest tenant not on this version). */
  readonly canary?: string;
  /** The share of the tenants after the canary that make the second wave, in (0, 1] (default 0.25). */
  readonly share?: number;
  /** Also re-apply tenants already on this version. */
  readonly all?: boolean;
}

/** The waves a rollout would go in, each a list of project ids, from the tenants' recorded versions. */
export async function planRollout(
  db: Database,
  program: ProgramVersion,
  options: RolloutPlanOptions = {},
): Promise<string[][]> {
  const share = options.share ?? 0.25;
  if (!(share > 0 && share <= 1)) throw new Error(`share must be a fraction in (0, 1], got ${share}`);
  const rows = await liveTenantVersions(db);
  const due = rows.filter((row) => options.all || row.program_version !== program.version);
  if (options.canary !== undefined) {
    const canary = due.find((row) => row.project_id === options.canary);
    if (!canary) {
      const known = rows.some((row) => row.project_id === options.canary);
      throw new Error(
        known
          ? `canary ${options.canary} is already on program ${program.version} (use --all to re-apply it)`
          : `canary ${options.canary} is not a tenant of this platform`,
      );
    }
    due.splice(due.indexOf(canary), 1);
    due.unshift(canary);
  }
  const ids = due.map((row) => row.project_id);
  if (ids.length === 0) return [];
  const rest = ids.slice(1);
  const second = Math.min(rest.length, Math.ceil(rest.length * share));
  return [ids.slice(0, 1), rest.slice(0, second), rest.slice(second)].filter((wave) => wave.length > 0);
}

export interface TenantRolloutResult {
  readonly projectId: string;
  /** 1-based; the canary is wave 1. */
  readonly wave: number;
  readonly outcome: "applied" | "failed" | "not attempted";
  readonly error?: string;
  /** The program version the tenant's stack is on after the rollout (null: never recorded). */
  readonly programVersion: string | null;
}

export interface RolloutReport {
  readonly program: ProgramVersion;
  readonly waves: readonly (readonly string[])[];
  /** True when every wave was applied; false when one failed and the rest were not attempted. */
  readonly completed: boolean;
  /** The wave that failed (1-based), if one did. */
  readonly failedWave?: number;
  readonly tenants: readonly TenantRolloutResult[];
}

export interface RolloutOptions extends RolloutPlanOptions {
  /** The reconciler settings from the platform config (runtime/tenants/config.ts reconcilerOptions). */
  readonly reconciler: Omit<ReconcilerOptions, "db" | "log">;
  readonly program: ProgramVersion;
  /** How long one wave may take (default 30 min). */
  readonly waveTimeoutMs?: number;
  readonly log?: (message: string) => void;
}

/** Applies `options.program` to the fleet in waves; see the file's header. */
export async function rollout(db: Database, options: RolloutOptions): Promise<RolloutReport> {
  const log = options.log ?? (() => undefined);
  const { program } = options;
  const waves = await planRollout(db, program, options);
  const outcomes = new Map<string, Omit<TenantRolloutResult, "programVersion">>();
  waves.forEach((wave, index) =>
    wave.forEach((projectId) =>
      outcomes.set(projectId, { projectId, wave: index + 1, outcome: "not attempted" }),
    ),
  );
  let failedWave: number | undefined;
  if (waves.length > 0) {
    const reconciler = new Reconciler({
      ...options.reconciler,
      db,
      stack: { ...options.reconciler.stack, programVersion: program },
      worker: `rollout:${os.hostname()}:${process.pid}`,
      onlyOwnProgram: true,
      pollMs: 250,
      log: (message, fields) => {
        if (message === "operation failed") log(`  ${String(fields?.error ?? "")}`);
      },
    });
    reconciler.start();
    try {
      for (const [index, wave] of waves.entries()) {
        const name = index === 0 ? "canary" : `wave ${index + 1}`;
        log(`${name}: ${wave.join(", ")}`);
        const operations = await Promise.all(
          wave.map(
            async (projectId) =>
              (await enqueueOperation(db, projectId, "update", undefined, program.version)).operation,
          ),
        );
        const settled = await Promise.all(
          operations.map((operation) => settle(db, operation, options.waveTimeoutMs ?? 1_800_000)),
        );
        for (const operation of settled)
          outcomes.set(operation.project_id, {
            projectId: operation.project_id,
            wave: index + 1,
            outcome: operation.state === "succeeded" ? "applied" : "failed",
            ...(operation.state === "succeeded" ? {} : { error: operation.error ?? operation.state }),
          });
        const failed = settled.filter((operation) => operation.state !== "succeeded");
        log(`${name}: ${wave.length - failed.length} applied, ${failed.length} failed`);
        if (failed.length > 0) {
          failedWave = index + 1;
          break;
        }
      }
    } finally {
      await reconciler.stop();
    }
  }
  const rows = await liveTenantVersions(db);
  const versions = new Map(rows.map((row) => [row.project_id, row.program_version]));
  return {
    program,
    waves,
    completed: failedWave === undefined,
    ...(failedWave === undefined ? {} : { failedWave }),
    tenants: [...outcomes.values()].map((result) => ({
      ...result,
      programVersion: versions.get(result.projectId) ?? null,
    })),
  };
}

function settle(db: Database, operation: Operation, timeoutMs: number): Promise<Operation> {
  return waitFor(`the rollout's update of ${operation.project_id}`, timeoutMs, async () => {
    const current = await getOperation(db, operation.id);
    return current && ["succeeded", "failed", "cancelled"].includes(current.state) ? current : undefined;
  });
}

/** The report as Markdown: which tenants are on which version now. */
export function rolloutMarkdown(report: RolloutReport): string {
  const lines = ["## Tenant rollout", ""];
  const version = `\`${report.program.version}\``;
  if (report.waves.length === 0) {
    lines.push(`Nothing to roll out: no tenant is on another program than ${version}.`);
    return `${lines.join("\n")}\n`;
  }
  lines.push(
    report.completed
      ? `Program ${version} applied to all ${report.tenants.length} tenant(s) in ${report.waves.length} wave(s).`
      : `Program ${version}: wave ${report.failedWave}${report.failedWave === 1 ? " (the canary)" : ""} failed; ` +
          "the rollout stopped there and later waves were not attempted.",
    "",
    "| Tenant | Wave | Outcome | Program version now |",
    "|---|---|---|---|",
    ...report.tenants.map(
      (t) =>
        `| ${t.projectId} | ${t.wave === 1 ? "1 (canary)" : t.wave} | ${t.outcome}${
          t.error ? `: ${t.error.replace(/\|/g, "\\|").replace(/\n/g, " ")}` : ""
        } | ${t.programVersion ? `\`${t.programVersion}\`` : "—"} |`,
    ),
  );
  return `${lines.join("\n")}\n`;
}
