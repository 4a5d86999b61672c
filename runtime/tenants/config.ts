import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import * as path from "node:path";
import { squidPaths } from "../host/squid.js";
import type { StackConfig } from "../../stacks/config.js";
import type { TenantDefaults } from "./service.js";
import type { TenantStackOptions } from "./stack.js";

/**
 * The passphrase that encrypts the tenant stacks' secrets (SSH private keys, SA keys) in the local file
 * backend: AGENT_SANDBOX_STATE_PASSPHRASE, else one generated on first start and kept root-only in the
 * data directory. (On GCP the secrets provider is gcpkms:// instead.)
 */
export function statePassphrase(dataDir: string, env: NodeJS.ProcessEnv = process.env): string {
  if (env.AGENT_SANDBOX_STATE_PASSPHRASE) return env.AGENT_SANDBOX_STATE_PASSPHRASE;
  const file = path.join(dataDir, "state.passphrase");
  if (!existsSync(file)) {
    mkdirSync(dataDir, { recursive: true });
    writeFileSync(file, randomBytes(32).toString("base64url"), { mode: 0o600, flag: "wx" });
  }
  return readFileSync(file, "utf8").trim();
}

/**
 * Where the tenant stacks keep their state and how their secrets are encrypted: a file backend with a
 * passphrase locally; on GCP the bucket's state/ prefix and the platform's KMS key.
 */
export function tenantStackOptions(
  config: StackConfig,
  env: NodeJS.ProcessEnv = process.env,
): TenantStackOptions {
  const workRoot = path.join(config.host.dataDir, "work");
  const dockerHost = `unix://${config.host.dockerSocket}`;
  if (config.target === "gcp") {
    const gcp = config.gcp!;
    return {
      backendUrl: `gs://${gcp.bucket}/state`,
      secretsProvider: `gcpkms://${gcp.kmsKey}`,
      workRoot,
      dockerHost,
    };
  }
  const state = path.join(config.host.dataDir, "state");
  mkdirSync(state, { recursive: true });
  return {
    backendUrl: `file://${state}`,
    workRoot,
    passphrase: statePassphrase(config.host.dataDir, env),
    dockerHost,
  };
}

export function tenantDefaults(config: StackConfig): TenantDefaults {
  const squid = squidPaths(config.host);
  return {
    mode: config.target,
    image: config.tenants.image,
    subnetPool: config.tenants.subnetPool,
    sshPortRange: config.tenants.sshPortRange,
    backupIntervalSeconds: config.tenants.backupIntervalSeconds,
    host: {
      squidPort: config.host.squidPort,
      squidConfigFile: squid.config,
      squidFragmentsDir: squid.fragmentsDir,
      backupRoot: path.join(config.host.dataDir, "backups"),
    },
    gcp: config.gcp ? { project: config.gcp.project, bucket: config.gcp.bucket } : undefined,
  };
}
