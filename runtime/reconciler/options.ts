// A reconciler's settings from the platform config (the runtime's, a standalone worker's, the tests').
import type { StackConfig } from "../../stacks/config.js";
import { kubernetesProjects } from "../kubernetes/sandbox.js";
import { SecretBox } from "../secrets.js";
import { recordingsDir } from "../terminal/recording.js";
import {
  clusterCredentials,
  gcpTenantCloud,
  kubernetesBackupsOf,
  snapshotOptions,
  tenantStackOptions,
} from "../tenants/config.js";
import type { ReconcilerOptions } from "./reconciler.js";

/**
 * A reconciler's settings from the platform config: the same for the runtime's in-process reconciler, a
 * standalone worker (runtime/reconciler/worker.ts) and the tests, so a worker never runs an operation
 * with less than the runtime would (a snapshot without its registry, a delete that keeps recordings).
 */
export function reconcilerOptions(config: StackConfig): Omit<ReconcilerOptions, "db" | "log"> {
  const { leaseSeconds, maxConcurrent, finalBackupSeconds, driftRemediation, driftStallAfter } =
    config.tenants;
  const gcp = gcpTenantCloud(config);
  const kubernetes = config.tenants.kubernetes
    ? kubernetesProjects(config.tenants.kubernetes.kubeconfigFile, clusterCredentials(config))
    : undefined;
  return {
    stack: tenantStackOptions(config),
    snapshots: snapshotOptions(config),
    recordingsDir: recordingsDir(config.host.dataDir),
    leaseMs: leaseSeconds * 1000,
    maxConcurrent,
    finalBackupSeconds,
    driftRemediation,
    driftStallAfter,
    backgroundSettleMs: config.tenants.warmPool.settleSeconds * 1000,
    secrets: SecretBox.fromDataDir(config.host.dataDir),
    gcp,
    ...(kubernetes ? { kubernetes, kubernetesBackups: kubernetesBackupsOf(config, kubernetes, gcp) } : {}),
  };
}
