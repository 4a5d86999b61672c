import * as pulumi from "@pulumi/pulumi";
import type { PulumiFn } from "@pulumi/pulumi/automation/index.js";
import { Tenant } from "../../components/tenant/tenant.js";
import type { TenantSecret } from "../../components/tenant/secrets.js";
import { PLATFORM_BACKENDS, TenantSpec, type TenantSpecInput } from "../../components/tenant/spec.js";
import { currentProgramVersion, type ProgramVersion } from "./version.js";

/**
 * The inline program of stack `tenant-<projectId>`. The spec is validated before any resource is
 * declared, so bad input fails the operation without touching the host.
 *
 * Besides what the runtime reads back, the stack records the spec it was applied with and the program
 * version that applied it: a rollout preview replays that spec against another checkout's program from
 * the state backend alone, and a rollout knows which tenants are on which version. The project's secrets
 * are not part of the spec (which is recorded in the clear): they come separately from the runtime's
 * sealed store and are recorded as a Pulumi secret output, for previews to replay.
 */
export function tenantProgram(
  input: TenantSpecInput,
  version: ProgramVersion = currentProgramVersion(),
  secrets: readonly TenantSecret[] = [],
  kubeconfig?: string,
): PulumiFn {
  const spec = TenantSpec.parse(input);
  if (spec.backend !== undefined && !(PLATFORM_BACKENDS as readonly string[]).includes(spec.backend))
    throw new Error(
      `backend ${spec.backend} has no sandbox in the platform's tenant program (${PLATFORM_BACKENDS.join(", ")}): its stack program is its backend's own`,
    );
  return async () => {
    // A kubernetes tenant's provider gets the cluster's kubeconfig as a secret (else the stack's secret config).
    const tenant = new Tenant("tenant", {
      ...spec,
      secrets,
      ...(kubeconfig === undefined ? {} : { kubeconfig: pulumi.secret(kubeconfig) }),
    });
    return {
      projectId: spec.projectId,
      containerName: tenant.containerName,
      sandboxAddress: tenant.sandboxAddress,
      bridge: tenant.bridge,
      subnet: tenant.subnet,
      volumeName: tenant.volumeName,
      sshHostPort: tenant.sshHostPort,
      sshPublicKey: tenant.sshPublicKey,
      sshPrivateKey: pulumi.secret(tenant.sshPrivateKey),
      backupRemote: tenant.backupRemote,
      running: tenant.running,
      spec,
      secrets: pulumi.secret(secrets),
      // The content hash only: a commit that leaves the program as it was changes nothing here.
      programVersion: version.version,
    };
  };
}
