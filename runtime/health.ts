import { existsSync } from "node:fs";
import { pingDatabase, type Database } from "./store/db.js";
import { probeWithin, type Check } from "../lib/host/check.js";
import type { Toolchain } from "../lib/toolchain.js";
import { checkKubernetesProvider } from "../lib/kubernetes-provider.js";
import { describeSpace, STATE_BACKEND_MIN_FREE, stateBackendSpace } from "./stack-state.js";
import { bucketRegionProblem, type GcsClient } from "./gcp/storage.js";

export interface Prerequisite {
  readonly name: string;
  probe(): Promise<Check>;
}

export interface HealthReport {
  readonly status: "ready" | "not ready";
  readonly checks: readonly Check[];
}

/**
 * What anyone may be told: ready or not. The checks name versions, paths and addresses, which are for
 * this host, operators and the metrics token (runtime/server.ts).
 */
export function publicHealth(report: HealthReport): Pick<HealthReport, "status"> {
  return { status: report.status };
}

/** The Pulumi CLI: its version is read once at start-up; each probe only confirms the binary is still there. */
export function pulumiPrerequisite(chain: Toolchain, version: string | Error): Prerequisite {
  const name = "pulumi";
  return {
    name,
    async probe() {
      if (version instanceof Error) return { name, ready: false, detail: version.message };
      if (!existsSync(chain.pulumiBin)) return { name, ready: false, detail: `${chain.pulumiBin} is gone` };
      return { name, ready: true, detail: `${version} at ${chain.pulumiBin}` };
    },
  };
}

/**
 * Pulumi's Kubernetes provider, on a runtime configured with a cluster (`tenants.kubernetes`): without it, or
 * with another version than the one pinned, every kubernetes project's stack would fail (or run a provider its
 * program was not written for), so the runtime is not ready, naming what it found and the fix. The version is
 * asked of the binary once per file as it is on disk, from the first probe on (the runtime's start).
 */
export function kubernetesProviderPrerequisite(env: NodeJS.ProcessEnv = process.env): Prerequisite {
  const name = "kubernetes-provider";
  const probe = async (): Promise<Check> => {
    const provider = await checkKubernetesProvider(env);
    return "problem" in provider
      ? { name, ready: false, detail: provider.problem }
      : { name, ready: true, detail: `v${provider.version} at ${provider.found}` };
  };
  void probe(); // the first answer takes a second: asked now, not by the first /healthz
  return { name, probe };
}

export function databasePrerequisite(db: Database): Prerequisite {
  const name = "database";
  return {
    name,
    async probe() {
      await pingDatabase(db);
      return { name, ready: true, detail: `${db.kind} (${db.location})` };
    },
  };
}

/**
 * How long `/healthz` waits for each prerequisite (they are probed at once): one that hangs cannot stall the
 * answer past it. A second, as a load balancer's own probe timeout is (Kubernetes' 1 s, GCP's 5 s): a host
 * busy with its sandboxes answers an engine ping or a database query in tens of milliseconds, sometimes more
 * (it was 80 ms, and a runtime on a busy test machine was reported not ready for 30 s with every part up).
 */
export const HEALTH_PROBE_DEADLINE_MS = 1_000;

/** Probes every prerequisite at once, each under its own deadline so one hang cannot stall the answer. */
export async function healthReport(
  prerequisites: readonly Prerequisite[],
  deadlineMs = HEALTH_PROBE_DEADLINE_MS,
): Promise<HealthReport> {
  const checks = await Promise.all(prerequisites.map((p) => probeWithin(p, deadlineMs)));
  return { status: checks.every((check) => check.ready) ? "ready" : "not ready", checks };
}

/**
 * The filesystem of a `file://` state backend: not ready with less than {@link STATE_BACKEND_MIN_FREE}
 * free: once its disk is full, no operation can save its stack.
 */
export function stateBackendPrerequisite(dir: string): Prerequisite {
  const name = "state-backend";
  return {
    name,
    async probe() {
      const space = await stateBackendSpace(dir);
      return space.free < STATE_BACKEND_MIN_FREE
        ? {
            name,
            ready: false,
            detail: `no space left on the state backend ${dir} (${describeSpace(space)})`,
          }
        : { name, ready: true, detail: `${dir}: ${describeSpace(space)}` };
    },
  };
}

/**
 * GCP target: the platform bucket is there, readable by the VM's account, and in the configured region
 * (runtime/gcp/storage.ts bucketRegionProblem). Tenant backups, snapshots and stack state all go to it.
 */
export function bucketPrerequisite(
  client: Pick<GcsClient, "bucketLocation">,
  bucket: string,
  region: string,
): Prerequisite {
  const name = "bucket";
  return {
    name,
    async probe() {
      try {
        const { location, locationType } = await client.bucketLocation(bucket);
        const problem = bucketRegionProblem(bucket, location, region);
        return problem
          ? { name, ready: false, detail: problem }
          : { name, ready: true, detail: `gs://${bucket} (${location}, ${locationType || "location"})` };
      } catch (error) {
        return { name, ready: false, detail: (error as Error).message };
      }
    },
  };
}
