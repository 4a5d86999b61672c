// The fleet seen from the state backend alone: every tenant stack, the spec and program version it was
// last applied with, a preview of another checkout's program against each (the CI rollout preview), and a
// refresh preview of each (the scheduled drift check). No database: CI reads the production state backend.
import { promises as fs } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { Stack, type EngineEvent, type OpType, type PulumiFn } from "@pulumi/pulumi/automation/index.js";
import { tenantNames } from "../../components/tenant/names.js";
import type { TenantSpecInput } from "../../components/tenant/spec.js";
import type { TenantSecret } from "../../components/tenant/secrets.js";
import { tenantProgram } from "../../stacks/tenant/program.js";
import type { ProgramVersion } from "../../stacks/tenant/version.js";
import { driftedResources } from "./drift.js";
import {
  engineErrorSummary,
  fileBackendStacksDir,
  tenantWorkspace,
  type TenantStackOptions,
} from "./stack.js";
import type { DriftedResource } from "../store/drift.js";

const STACK_PREFIX = tenantNames("x0").stack.slice(0, -"x0".length);

/** Runs `work` over `items`, at most `limit` at once, keeping their order in the result. */
async function eachLimited<T, R>(items: readonly T[], limit: number, work: (item: T) => Promise<R>) {
  const results: R[] = new Array(items.length);
  let next = 0;
  const lanes = Array.from({ length: Math.min(limit, items.length) }, async () => {
    while (next < items.length) {
      const index = next++;
      results[index] = await work(items[index]!);
    }
  });
  await Promise.all(lanes);
  return results;
}

/**
 * Runs `work` with workspaces of their own under a fresh directory: a CLI beside the running runtime must
 * not share its per-stack work directories (a shared one corrupts workspace.json, pulumi#8186).
 */
async function inScratch<T>(options: TenantStackOptions, work: (o: TenantStackOptions) => Promise<T>) {
  const workRoot = await fs.mkdtemp(path.join(os.tmpdir(), "agent-sandbox-fleet-"));
  try {
    return await work({ ...options, workRoot });
  } finally {
    await fs.rm(workRoot, { recursive: true, force: true });
  }
}

/** The project ids of every tenant stack in the backend, sorted. */
export async function tenantStackIds(options: TenantStackOptions): Promise<string[]> {
  // A file backend is read directly: the CLI's listing races stacks being written (their *.tmp files).
  const dir = fileBackendStacksDir(options.backendUrl);
  const names = dir
    ? (await fs.readdir(dir).catch(() => []))
        .filter((file) => file.endsWith(".json") || file.endsWith(".json.gz"))
        .map((file) => file.replace(/\.json(\.gz)?$/, ""))
    : (
        await (
          await tenantWorkspace(path.join(options.workRoot, "fleet"), async () => ({}), options)
        ).listStacks()
      ).map((summary) => summary.name.split("/").pop()!);
  return [...new Set(names)]
    .filter((name) => name.startsWith(STACK_PREFIX))
    .map((name) => name.slice(STACK_PREFIX.length))
    .sort();
}

/** What a stack recorded at its last update: the spec (input of the program) and the program version. */
export interface RecordedTenant {
  readonly spec?: Record<string, unknown>;
  readonly programVersion?: string;
  /** The project's secrets the stack was last applied with (a Pulumi secret output). */
  readonly secrets: readonly TenantSecret[];
}

async function selectStack(
  projectId: string,
  options: TenantStackOptions,
  program: PulumiFn = async () => ({}),
) {
  const workDir = path.join(options.workRoot, tenantNames(projectId).stack);
  return Stack.select(tenantNames(projectId).stack, await tenantWorkspace(workDir, program, options));
}

async function recorded(projectId: string, options: TenantStackOptions): Promise<RecordedTenant> {
  const outputs = await (await selectStack(projectId, options)).outputs();
  return {
    spec: outputs.spec?.value as Record<string, unknown> | undefined,
    programVersion: outputs.programVersion?.value as string | undefined,
    // Stacks applied before project secrets existed record none.
    secrets: (outputs.secrets?.value as TenantSecret[] | undefined) ?? [],
  };
}

/** One resource a preview would change, with the properties that differ. */
export interface PlannedChange {
  readonly op: "create" | "update" | "replace" | "delete";
  readonly type: string;
  readonly urn: string;
  readonly properties: readonly string[];
}

export interface TenantPreview {
  readonly projectId: string;
  /**
   * `unknown`: the stack records no spec (last applied before specs were recorded), so there is nothing to
   * replay; the next operation or a rollout records it.
   */
  readonly status: "unchanged" | "changes" | "failed" | "unknown";
  readonly recordedVersion: string | null;
  readonly changes: readonly PlannedChange[];
  readonly error?: string;
}

export interface FleetPreview {
  readonly program: ProgramVersion;
  readonly tenants: readonly TenantPreview[];
}

const STEP_OPS: Partial<Record<OpType, PlannedChange["op"]>> = {
  create: "create",
  update: "update",
  delete: "delete",
  replace: "replace",
  "create-replacement": "replace",
  "delete-replaced": "replace",
};

/** The resources a preview's engine events say would change (the stack resource itself excluded). */
export function plannedChanges(events: readonly EngineEvent[]): PlannedChange[] {
  const byUrn = new Map<string, PlannedChange>();
  for (const event of events) {
    const step = event.resourcePreEvent?.metadata;
    const op = step && STEP_OPS[step.op];
    if (!step || !op || step.type === "pulumi:pulumi:Stack") continue;
    const earlier = byUrn.get(step.urn);
    // What differs: the provider's or engine's changed keys, the detailed diff's paths (top level), and
    // the keys that force a replacement.
    const detailed = Object.keys(step.detailedDiff ?? {}).map((key) => key.split(/[.[]/)[0]!);
    const properties = [
      ...new Set([...(earlier?.properties ?? []), ...(step.diffs ?? []), ...detailed, ...(step.keys ?? [])]),
    ];
    byUrn.set(step.urn, {
      op: earlier?.op === "replace" ? "replace" : op,
      type: step.type,
      urn: step.urn,
      properties: properties.sort(),
    });
  }
  return [...byUrn.values()].sort((a, b) => a.urn.localeCompare(b.urn));
}

/**
 * Previews `program` (another checkout's tenant program) against every tenant stack, each with the spec
 * it recorded: what a rollout of that program would change, tenant by tenant. Read-only; a stack that
 * cannot be previewed is reported and the others still are.
 */
export async function previewFleet(
  options: TenantStackOptions,
  program: ProgramVersion,
  concurrency = 4,
  log: (message: string) => void = () => undefined,
): Promise<FleetPreview> {
  return inScratch(options, async (scratch) => {
    const ids = await tenantStackIds(scratch);
    const tenants = await eachLimited(ids, concurrency, async (projectId): Promise<TenantPreview> => {
      let recordedVersion: string | null = null;
      try {
        const last = await recorded(projectId, scratch);
        recordedVersion = last.programVersion ?? null;
        if (!last.spec) return { projectId, status: "unknown", recordedVersion, changes: [] };
        const events: EngineEvent[] = [];
        // A kubernetes tenant's provider needs the cluster's kubeconfig, as the reconciler gives it (never recorded).
        const kubeconfig =
          (last.spec as TenantSpecInput).backend === "kubernetes" ? await options.kubeconfig?.() : undefined;
        const stack = await selectStack(
          projectId,
          scratch,
          tenantProgram(last.spec as TenantSpecInput, program, last.secrets, kubeconfig),
        );
        await stack.preview({ diff: true, onEvent: (event) => void events.push(event) });
        const changes = plannedChanges(events);
        log(`${projectId}: ${changes.length === 0 ? "unchanged" : `${changes.length} change(s)`}`);
        return { projectId, status: changes.length ? "changes" : "unchanged", recordedVersion, changes };
      } catch (error) {
        log(`${projectId}: preview failed`);
        return {
          projectId,
          status: "failed",
          recordedVersion,
          changes: [],
          error: engineErrorSummary(error),
        };
      }
    });
    return { program, tenants };
  });
}

export interface TenantDriftCheck {
  readonly projectId: string;
  readonly status: "clean" | "drifted" | "failed";
  readonly resources: readonly DriftedResource[];
  readonly error?: string;
}

/**
 * A refresh preview of every tenant stack: what exists that differs from what each stack recorded. The
 * same check the runtime's drift sweep runs, from the state backend alone (no database, nothing changed).
 */
export async function checkFleetDrift(
  options: TenantStackOptions,
  concurrency = 4,
  log: (message: string) => void = () => undefined,
): Promise<TenantDriftCheck[]> {
  return inScratch(options, async (scratch) =>
    eachLimited(await tenantStackIds(scratch), concurrency, async (projectId): Promise<TenantDriftCheck> => {
      try {
        const events: EngineEvent[] = [];
        await (
          await selectStack(projectId, scratch)
        ).previewRefresh({ onEvent: (event) => void events.push(event) });
        const resources = driftedResources(events);
        log(`${projectId}: ${resources.length ? "drifted" : "clean"}`);
        return { projectId, status: resources.length ? "drifted" : "clean", resources };
      } catch (error) {
        log(`${projectId}: check failed`);
        return { projectId, status: "failed", resources: [], error: engineErrorSummary(error) };
      }
    }),
  );
}

const SIGN: Record<PlannedChange["op"], string> = { create: "+", update: "~", replace: "+-", delete: "-" };

/** The last part of a URN: the resource's name. */
const nameOf = (urn: string) => urn.split("::").pop() ?? urn;
const cell = (text: string) => text.replace(/\|/g, "\\|").replace(/\n/g, " ");

/** The rollout preview as Markdown: a pull request's comment. */
export function previewMarkdown(preview: FleetPreview): string {
  const { tenants, program } = preview;
  const count = (status: TenantPreview["status"]) => tenants.filter((t) => t.status === status).length;
  const version = `\`${program.version}\`${program.commit ? ` (commit \`${program.commit.slice(0, 12)}\`)` : ""}`;
  const lines = [`## Tenant rollout preview`, ""];
  if (tenants.length === 0) {
    lines.push(`Program ${version}: there are no tenant stacks, so a rollout has nothing to change.`);
    return `${lines.join("\n")}\n`;
  }
  lines.push(
    `Program ${version} against ${tenants.length} tenant stack(s): ${count("unchanged")} unchanged, ` +
      `${count("changes")} changing, ${count("failed")} failed, ${count("unknown")} without a recorded spec.`,
    "",
    "| Tenant | Last applied | Result |",
    "|---|---|---|",
    ...tenants.map(
      (t) =>
        `| ${t.projectId} | ${t.recordedVersion ? `\`${t.recordedVersion}\`` : "—"} | ${
          t.status === "changes"
            ? `${t.changes.length} resource(s) change`
            : t.status === "failed"
              ? `preview failed: ${cell(t.error ?? "")}`
              : t.status === "unknown"
                ? "no recorded spec"
                : "unchanged"
        } |`,
    ),
  );
  for (const tenant of tenants.filter((t) => t.status === "changes")) {
    lines.push("", `### ${tenant.projectId}`, "");
    for (const change of tenant.changes)
      lines.push(
        `- \`${SIGN[change.op]}\` ${change.op} \`${change.type}\` \`${nameOf(change.urn)}\`` +
          (change.properties.length ? `: ${change.properties.map((p) => `\`${p}\``).join(", ")}` : ""),
      );
  }
  return `${lines.join("\n")}\n`;
}

/** The fleet's drift as Markdown: what the scheduled check reports. */
export function driftMarkdown(checks: readonly TenantDriftCheck[]): string {
  const lines = ["## Tenant drift check", ""];
  if (checks.length === 0) return `${lines.join("\n")}There are no tenant stacks.\n`;
  const count = (status: TenantDriftCheck["status"]) => checks.filter((c) => c.status === status).length;
  lines.push(
    `${checks.length} tenant stack(s): ${count("clean")} clean, ${count("drifted")} drifted, ${count("failed")} could not be checked.`,
  );
  for (const check of checks.filter((c) => c.status !== "clean")) {
    lines.push("", `### ${check.projectId}: ${check.status}`, "");
    if (check.error) lines.push(`- ${check.error}`);
    for (const resource of check.resources)
      lines.push(
        `- \`${resource.type}\` \`${nameOf(resource.urn)}\`: ${
          resource.change === "deleted"
            ? "deleted out of band"
            : resource.properties.map((p) => `\`${p}\``).join(", ")
        }`,
      );
  }
  return `${lines.join("\n")}\n`;
}
