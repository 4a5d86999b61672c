import { readFileSync } from "node:fs";
import { parse as parseYaml } from "yaml";
import { z } from "zod";
import { PORTS } from "../components/constants.js";

/** The Pulumi project name, and so the namespace of every config key (`agent-sandbox:<key>`). */
export const PROJECT = "agent-sandbox";

const port = z.number().int().min(1).max(65535);
const absolutePath = z.string().startsWith("/", { message: "must be an absolute path" });

/** `agent-sandbox:target`: which platform the stack builds. */
export const TargetConfig = z.enum(["local", "gcp"]);
export type TargetConfig = z.infer<typeof TargetConfig>;

/** `agent-sandbox:host`: the sandbox host's baseline (this machine for `local`, the VM for `gcp`). */
export const HostConfig = z
  .object({
    dockerSocket: absolutePath.default("/var/run/docker.sock"),
    squidPort: port.default(PORTS.squid),
    registryPort: port.default(PORTS.registry),
    configDir: absolutePath.default("/etc/agent-sandbox"),
    dataDir: absolutePath.default("/var/lib/agent-sandbox"),
    logDir: absolutePath.default("/var/log/agent-sandbox"),
    runDir: absolutePath.default("/run/agent-sandbox"),
  })
  .strict();
export type HostConfig = z.infer<typeof HostConfig>;

/** `agent-sandbox:runtime`: the runtime service (API, reconciler, terminal proxy). */
export const RuntimeConfig = z
  .object({
    apiPort: port.default(PORTS.api),
    terminalPort: port.default(PORTS.terminal),
    listenHost: z.string().min(1).default("127.0.0.1"),
    /** The host name or address clients reach sandboxes' SSH ports on. */
    publicHost: z.string().min(1).default("127.0.0.1"),
  })
  .strict();
export type RuntimeConfig = z.infer<typeof RuntimeConfig>;

const cidr = z
  .string()
  .regex(/^\d{1,3}(\.\d{1,3}){3}\/\d{1,2}$/, { message: "must be an IPv4 CIDR such as 10.100.0.0/16" });

/** `agent-sandbox:tenants`: what new sandboxes get, and how the reconciler runs their stacks. */
export const TenantsConfig = z
  .object({
    image: z.string().min(1).default("agent-sandbox/sandbox:latest"),
    /** Each tenant gets a /24 of this pool for its bridge. */
    subnetPool: cidr.default("10.100.0.0/16"),
    /** Host ports mapped to the sandboxes' sshd (the seed's 10000-11000). */
    sshPortRange: z.tuple([port, port]).default([10000, 11000]),
    backupIntervalSeconds: z.number().int().min(1).default(300),
    /** A reconciler that has not renewed its lease for this long is presumed dead. */
    leaseSeconds: z.number().int().min(2).default(30),
    maxConcurrent: z.number().int().min(1).max(64).default(4),
  })
  .strict()
  .refine((t) => t.sshPortRange[0] <= t.sshPortRange[1], {
    message: "sshPortRange must be [low, high]",
    path: ["sshPortRange"],
  });
export type TenantsConfig = z.infer<typeof TenantsConfig>;

/** `agent-sandbox:gcp`: the cloud parts the tenant stacks use on the gcp target. */
export const GcpConfig = z
  .object({
    project: z.string().min(1),
    region: z.string().min(1).default("europe-west1"),
    /** The platform bucket: tenant data under projects/<id>/, tenant stack state under state/. */
    bucket: z.string().regex(/^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$/, { message: "must be a bucket name" }),
    /** `projects/<p>/locations/<l>/keyRings/<r>/cryptoKeys/<k>`: encrypts the tenant stacks' secrets. */
    kmsKey: z.string().regex(/^projects\/[^/]+\/locations\/[^/]+\/keyRings\/[^/]+\/cryptoKeys\/[^/]+$/, {
      message: "must be projects/<p>/locations/<l>/keyRings/<r>/cryptoKeys/<k>",
    }),
  })
  .strict();
export type GcpConfig = z.infer<typeof GcpConfig>;

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
