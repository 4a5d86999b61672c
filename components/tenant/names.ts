import { createHash } from "node:crypto";
import { BRIDGE_PREFIX } from "../../lib/constants.js";

/**
 * Names of a tenant's engine and host objects, all derived from the immutable project id so two tenants
 * never collide and a sweep can find every object of one tenant.
 */
export function tenantNames(projectId: string) {
  const digest = createHash("sha256").update(projectId).digest("hex");
  return {
    stack: `tenant-${projectId}`,
    network: `sbx-net-${projectId}`,
    // Linux caps interface names at 15 bytes: the prefix and 10 hex digits of the id's digest.
    bridge: `${BRIDGE_PREFIX}${digest.slice(0, 15 - BRIDGE_PREFIX.length)}`,
    volume: `sbx-home-${projectId}`,
    container: `sbx-${projectId}`,
    // GCP service-account ids: 6-30 characters, a letter first.
    serviceAccountId: `sbx-${digest.slice(0, 20)}`,
  };
}

/**
 * A tenant's own filesystem `kind` (`home`, `backup`) under the platform's disks root: its image file and
 * where it is mounted (sandbox:host:Filesystem). The one place the layout is written, for the tenant program
 * and for the runtime that copies a home (a fork).
 */
export function tenantDiskPaths(
  disksRoot: string,
  projectId: string,
  kind: string,
): { readonly imagePath: string; readonly mountpoint: string } {
  return {
    imagePath: `${disksRoot}/${projectId}/${kind}.img`,
    mountpoint: `${disksRoot}/${projectId}/${kind}`,
  };
}
