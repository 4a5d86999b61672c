// `pulumi preview --diff` of the platform stack with the policy pack, summarised per resource and per
// policy violation: the pull request's platform preview (npm run preview:platform, .github/workflows/ci.yml).
// Read-only: a preview takes no lock and writes no state.
import { promises as fs } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import type { EngineEvent } from "@pulumi/pulumi/automation/index.js";
import { toolchain } from "../../lib/toolchain.js";
import type { StackConfig } from "../../stacks/config.js";
import { statePassphrase } from "../secrets.js";
import { plannedChanges, type PlannedChange } from "../tenants/fleet.js";
import { PlatformStack, type PlatformStackOptions } from "./platform-stack.js";

export interface PlatformPreviewOptions {
  /** The stack's name (AGENT_SANDBOX_STACK, as `npm run local` names it). */
  readonly stack: string;
  /** Its stack file (`Pulumi.<stack>.yaml` or AGENT_SANDBOX_CONFIG) and what it says. */
  readonly configFile: string;
  readonly config: StackConfig;
  /** The policy pack's directory (the checkout's policy/). */
  readonly policyPack: string;
  readonly env?: NodeJS.ProcessEnv;
}

export interface PolicyViolation {
  readonly pack: string;
  readonly policy: string;
  readonly level: string;
  readonly urn?: string;
  readonly message: string;
}

export interface PlatformPreview {
  readonly stack: string;
  readonly target: StackConfig["target"];
  readonly backendUrl: string;
  /** `ok`: the preview ran (warnings allowed); `violations`: a mandatory policy failed it; `failed`: it did not run. */
  readonly status: "ok" | "violations" | "failed";
  readonly changes: readonly PlannedChange[];
  readonly unchanged: number;
  /** Packs that ran, `name@version`. */
  readonly policyPacks: readonly string[];
  readonly violations: readonly PolicyViolation[];
  readonly error?: string;
  /** The CLI's own `--diff` text. */
  readonly diff: string;
}

/**
 * Where the platform stack's state is. Local: beside the tenant stacks, where `npm run local` keeps it
 * (runtime/host/platform-up.ts), a missing stack created (a fresh host previews as all creates). Other
 * targets: the backend in PULUMI_BACKEND_URL (the operator's, e.g. `gs://...`), secrets from the stack
 * file's provider or PULUMI_CONFIG_PASSPHRASE, a throwaway work directory, and a missing stack is an error,
 * never created in production by a preview.
 */
async function platformStackOptions(options: PlatformPreviewOptions) {
  const { config, stack, configFile } = options;
  const env = options.env ?? process.env;
  if (config.target === "local") {
    const platformDir = path.join(config.host.dataDir, "platform");
    const stateDir = path.join(platformDir, "state");
    const stackOptions: PlatformStackOptions = {
      stack,
      configFile,
      stateDir,
      workDir: path.join(platformDir, "work"),
      passphrase: statePassphrase(config.host.dataDir, env),
    };
    return { stackOptions, backendUrl: `file://${stateDir}`, create: true, scratch: undefined };
  }
  const backendUrl = env.PULUMI_BACKEND_URL;
  if (!backendUrl)
    throw new Error(
      `${configFile} has agent-sandbox:target=${config.target}: set PULUMI_BACKEND_URL to the state backend that holds its platform stack ${stack} (e.g. gs://<bucket>)`,
    );
  const scratch = await fs.mkdtemp(path.join(os.tmpdir(), "platform-preview-"));
  // The stack file's own salt or encrypted key decrypts the stack's secrets: seed the work directory with it
  // (PlatformStack keeps an existing one).
  await fs.copyFile(configFile, path.join(scratch, `Pulumi.${stack}.yaml`));
  const stackOptions: PlatformStackOptions = {
    stack,
    configFile,
    stateDir: path.join(scratch, "state"),
    backendUrl,
    workDir: scratch,
    passphrase: env.PULUMI_CONFIG_PASSPHRASE ?? "",
  };
  return { stackOptions, backendUrl, create: false, scratch };
}

/** The engine's JSON-lines event log (`--event-log`); a line cut off by a crash is skipped. */
async function readEventLog(file: string): Promise<EngineEvent[]> {
  const text = await fs.readFile(file, "utf8").catch(() => "");
  return text.split("\n").flatMap((line) => {
    try {
      return line.trim() ? [JSON.parse(line) as EngineEvent] : [];
    } catch {
      return [];
    }
  });
}

/** The CLI's error lines: what a failed preview says, without the progress display around it. */
function previewError(events: readonly EngineEvent[], stdout: string, stderr: string): string {
  const diagnostics = events
    .map((event) => event.diagnosticEvent)
    .filter((d) => d?.severity === "error")
    .map((d) => d!.message.trim());
  const lines = [
    ...diagnostics,
    ...`${stderr}\n${stdout}`.split("\n").filter((line) => line.trim().startsWith("error:")),
  ].filter((line) => line && !/^error: preview failed$/.test(line.trim()));
  return [...new Set(lines)].join("\n") || `${stderr}${stdout}`.trim().split("\n").slice(-20).join("\n");
}

/** `pulumi preview --diff --policy-pack <pack>` of the platform stack, summarised. */
export async function previewPlatform(options: PlatformPreviewOptions): Promise<PlatformPreview> {
  const { stackOptions, backendUrl, create, scratch } = await platformStackOptions(options);
  const base = { stack: options.stack, target: options.config.target, backendUrl };
  const events = await fs.mkdtemp(path.join(os.tmpdir(), "platform-preview-events-"));
  try {
    const chain = toolchain();
    // `--event-log` exists only with debug commands on (as the Automation API runs the CLI).
    const stack = new PlatformStack(stackOptions, {
      ...chain,
      env: { ...chain.env, PULUMI_DEBUG_COMMANDS: "true" },
    });
    try {
      await stack.prepare({ create });
    } catch (error) {
      return {
        ...base,
        status: "failed",
        changes: [],
        unchanged: 0,
        policyPacks: [],
        violations: [],
        diff: "",
        error: `could not select stack ${options.stack} in ${backendUrl}: ${(error as Error).message}`,
      };
    }
    const eventLog = path.join(events, "events.jsonl");
    const result = await stack.pulumi([
      "preview",
      "--diff",
      "--color",
      "never",
      "--policy-pack",
      options.policyPack,
      "--event-log",
      eventLog,
      "--stack",
      options.stack,
    ]);
    const log = await readEventLog(eventLog);
    const violations = log
      .flatMap(({ policyEvent: p }) =>
        p
          ? [
              {
                pack: p.policyPackName,
                policy: p.policyName,
                level: p.enforcementLevel,
                urn: p.resourceUrn || undefined,
                message: p.message.trim(),
              },
            ]
          : [],
      )
      .sort((a, b) => `${a.urn}${a.policy}`.localeCompare(`${b.urn}${b.policy}`));
    const summary = log.find((event) => event.summaryEvent)?.summaryEvent as
      { PolicyPacks?: Record<string, string>; policyPacks?: Record<string, string> } | undefined;
    const packs = summary?.PolicyPacks ?? summary?.policyPacks ?? {};
    const status =
      result.code === 0
        ? "ok"
        : violations.some((violation) => violation.level === "mandatory")
          ? "violations"
          : "failed";
    return {
      ...base,
      status,
      changes: plannedChanges(log),
      unchanged: log.filter(
        ({ resourcePreEvent: pre }) =>
          pre?.metadata.op === "same" && pre.metadata.type !== "pulumi:pulumi:Stack",
      ).length,
      // Keys are `name|kind|path` in this CLI; the name is what a reader knows the pack by.
      policyPacks: Object.entries(packs).map(([key, version]) => `${key.split("|")[0]}@${version}`),
      violations,
      diff: result.stdout,
      ...(status === "failed" ? { error: previewError(log, result.stdout, result.stderr) } : {}),
    };
  } finally {
    await fs.rm(events, { recursive: true, force: true });
    if (scratch) await fs.rm(scratch, { recursive: true, force: true });
  }
}

const SIGN: Record<PlannedChange["op"], string> = { create: "+", update: "~", replace: "+-", delete: "-" };
const cell = (text: string) => text.replace(/\|/g, "\\|").replace(/\s*\n\s*/g, " ");
/** A comment is at most 65,536 characters; the diff gives way first. */
const DIFF_LIMIT = 20_000;

/** The preview as Markdown: the platform half of the pull request's comment. */
export function platformPreviewMarkdown(preview: PlatformPreview): string {
  const lines = ["## Platform stack preview", ""];
  const where = `Stack \`${preview.stack}\` (target \`${preview.target}\`, state \`${preview.backendUrl}\`)`;
  if (preview.status === "failed") {
    lines.push(`${where}: **the preview failed.**`, "", "```", preview.error ?? "", "```");
    return `${lines.join("\n")}\n`;
  }
  const count = (op: PlannedChange["op"]) => preview.changes.filter((c) => c.op === op).length;
  const packs = preview.policyPacks.map((p) => `\`${p}\``).join(", ") || "none reported";
  lines.push(
    `${where}, policy packs ${packs}: ${count("create")} to create, ${count("update")} to update, ` +
      `${count("replace")} to replace, ${count("delete")} to delete, ${preview.unchanged} unchanged.`,
  );
  if (preview.status === "violations")
    lines.push("", "**A mandatory policy failed: this change cannot be applied as it is.**");
  if (preview.changes.length > 0)
    lines.push(
      "",
      "| Change | Type | Resource | Properties |",
      "|---|---|---|---|",
      ...preview.changes.map(
        (c) =>
          `| \`${SIGN[c.op]}\` ${c.op} | \`${c.type}\` | \`${c.urn.split("::").pop()}\` | ${c.properties.map((p) => `\`${p}\``).join(", ")} |`,
      ),
    );
  lines.push("");
  if (preview.violations.length === 0) lines.push("No policy violations.");
  else
    lines.push(
      "### Policy violations",
      "",
      "| Level | Policy | Resource | Message |",
      "|---|---|---|---|",
      ...preview.violations.map(
        (v) =>
          `| ${v.level} | \`${v.pack}/${v.policy}\` | ${v.urn ? `\`${v.urn.split("::").pop()}\`` : "(stack)"} | ${cell(v.message)} |`,
      ),
    );
  const diff =
    preview.diff.length > DIFF_LIMIT
      ? `${preview.diff.slice(0, DIFF_LIMIT)}\n... (${preview.diff.length - DIFF_LIMIT} more characters in the job's log)`
      : preview.diff;
  lines.push(
    "",
    "<details><summary>pulumi preview --diff</summary>",
    "",
    "```diff",
    diff.trim(),
    "```",
    "</details>",
  );
  return `${lines.join("\n")}\n`;
}
