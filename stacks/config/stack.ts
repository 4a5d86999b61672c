import { readFileSync } from "node:fs";
import { parse as parseYaml } from "yaml";
import { z } from "zod";
import { gcpFirewallProblems, gcpMicroVm, GcpConfig, NESTED_VIRTUALIZATION_SERIES } from "./gcp.js";
import { HostConfig } from "./host.js";
import { RuntimeConfig } from "./runtime.js";
import { PROJECT } from "./shared.js";
import { TargetConfig } from "./target.js";
import { TenantsConfig } from "./tenants.js";

/** The whole `config:` map of a stack file: every namespace, and the rules that span more than one. */
export const StackConfig = z
  .object({
    target: TargetConfig,
    host: HostConfig.default(HostConfig.parse({})),
    runtime: RuntimeConfig.default(RuntimeConfig.parse({})),
    tenants: TenantsConfig.default(TenantsConfig.parse({})),
    gcp: GcpConfig.optional(),
  })
  .refine((c) => c.target !== "gcp" || c.gcp !== undefined, {
    message: "is required when target is gcp",
    path: ["gcp"],
  })
  .superRefine((c, ctx) => {
    if (c.tenants.backend === "kubernetes" && !c.tenants.kubernetes)
      ctx.addIssue({
        code: "custom",
        path: ["tenants", "kubernetes"],
        message:
          "is required when tenants.backend is kubernetes (the cluster's kubeconfigFile and runtimeClassName)",
      });
    // On the local target a cluster of the operator's own runs the Pods: no Google identity, backups on the host.
    if (c.tenants.kubernetes?.credentials === "gke" && c.target !== "gcp")
      ctx.addIssue({
        code: "custom",
        path: ["tenants", "kubernetes", "credentials"],
        message: "gke needs target gcp (the runtime mints the Project Service account's token on GCP)",
      });
    if (c.target === "gcp")
      for (const issue of gcpFirewallProblems(c)) ctx.addIssue({ code: "custom", ...issue });
    if (c.target !== "gcp" || !c.gcp) return;
    if (c.gcp.microvm === false && c.tenants.backend === "microvm")
      ctx.addIssue({
        code: "custom",
        path: ["gcp", "microvm"],
        message: "must not be false while tenants.backend is microvm (the host would have no QEMU)",
      });
    const series = c.gcp.machineType.split("-")[0]!;
    if (gcpMicroVm(c) && !(NESTED_VIRTUALIZATION_SERIES as readonly string[]).includes(series))
      ctx.addIssue({
        code: "custom",
        path: ["gcp", "machineType"],
        message: `${c.gcp.machineType} cannot enable nested virtualization, which microVM sandboxes need: use a machine type of series ${NESTED_VIRTUALIZATION_SERIES.join(", ")} (e.g. n2-standard-8)`,
      });
  });
export type StackConfig = z.infer<typeof StackConfig>;

/** Thrown with every offending key spelled as it is in the stack file (`agent-sandbox:host.squidPort`). */
export class StackConfigError extends Error {
  constructor(
    readonly file: string,
    readonly problems: readonly string[],
  ) {
    super(`${file}: invalid configuration\n${problems.map((p) => `  - ${p}`).join("\n")}`);
    this.name = "StackConfigError";
  }
}

const CONFIG_KEYS = ["target", "host", "runtime", "tenants", "gcp"];

/** Validates the `config:` map of a stack file (keys namespaced `agent-sandbox:`). */
export function parseStackConfig(config: Record<string, unknown>, file: string): StackConfig {
  const problems: string[] = [];
  const values: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(config)) {
    const [namespace, name, ...rest] = key.split(":");
    if (namespace !== PROJECT) continue; // other namespaces belong to providers (gcp:project, ...)
    if (!name || rest.length > 0 || !CONFIG_KEYS.includes(name)) {
      problems.push(`${key}: unknown key (known: ${CONFIG_KEYS.map((k) => `${PROJECT}:${k}`).join(", ")})`);
      continue;
    }
    values[name] = value;
  }
  const parsed = StackConfig.safeParse(values);
  if (!parsed.success) {
    for (const issue of parsed.error.issues) {
      const [head, ...tail] = issue.path.map(String);
      const key = `${PROJECT}:${head ?? "(config)"}${tail.length ? `.${tail.join(".")}` : ""}`;
      problems.push(`${key}: ${issue.message}`);
    }
  }
  if (problems.length > 0) throw new StackConfigError(file, problems);
  return parsed.data!;
}

/** Reads and validates `Pulumi.<stack>.yaml` without the Pulumi engine (for the runtime and scripts). */
export function readStackConfigFile(file: string): StackConfig {
  let document: unknown;
  try {
    document = parseYaml(readFileSync(file, "utf8"));
  } catch (error) {
    throw new StackConfigError(file, [(error as Error).message]);
  }
  const config = (document as { config?: unknown } | null)?.config;
  if (config === null || typeof config !== "object") {
    throw new StackConfigError(file, ["missing 'config:' section"]);
  }
  return parseStackConfig(config as Record<string, unknown>, file);
}
