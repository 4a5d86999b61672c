import * as pulumi from "@pulumi/pulumi";
import type { PulumiFn } from "@pulumi/pulumi/automation/index.js";
import { Tenant } from "../../components/tenant/tenant.js";
import { TenantSpec, type TenantSpecInput } from "../../components/tenant/spec.js";

/**
 * The inline program of stack `tenant-<projectId>`. The spec is validated before any resource is
 * declared, so bad input fails the operation without touching the host.
 */
export function tenantProgram(input: TenantSpecInput): PulumiFn {
  const spec = TenantSpec.parse(input);
  return async () => {
    const tenant = new Tenant("tenant", spec);
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
    };
  };
}
