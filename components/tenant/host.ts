// What a container and a microVM share on the host: the tenant's identity, its bridge and egress rules, its
// filesystems' places, and its front-door routes. Each backend's declaration (container.ts, microvm.ts's
// declareMicroVmBackend) builds on it; the resources stay children of the Tenant, so their URNs are the
// same whichever file declares them.
import * as pulumi from "@pulumi/pulumi";
import { frontDoorRoutes } from "../../lib/front-door.js";
import { SANDBOX_SSH_PORT } from "../../lib/constants.js";
import { tenantAddresses } from "../../lib/subnets.js";
import { FrontDoorRoute } from "../resources/front-door-route.js";
import { TenantEgress } from "./egress.js";
import { TenantIdentity } from "./identity.js";
import { tenantDiskPaths, tenantNames } from "./names.js";
import { TenantNetwork } from "./network.js";
import type { TenantOutputs } from "./outputs.js";
import type { TenantSpec } from "./spec.js";

/** A host filesystem of the tenant's (an image and its mountpoint), where the spec sizes one. */
export interface TenantDisk {
  readonly imagePath: string;
  readonly mountpoint: string;
  readonly sizeBytes: number;
}

export interface HostBase {
  readonly identity: TenantIdentity;
  readonly network: TenantNetwork;
  readonly egress: TenantEgress;
  /** Local mode: the tenant's own filesystem `kind` under `<disksRoot>/<project>` (absent in older specs). */
  disk(kind: string, sizeBytes: number | undefined): TenantDisk | undefined;
}

/**
 * The identity, network and egress of a tenant on the host, the firewall in place before any sandbox starts
 * (the allowlist beside it: TenantEgress).
 * `backupInGuest`: the backup location is a disk of the guest's own (a microVM's), not a host filesystem.
 */
export function declareHostBase(
  name: string,
  spec: TenantSpec,
  labels: Readonly<Record<string, string>>,
  parent: pulumi.Resource,
  backupInGuest: boolean,
): HostBase {
  const child = { parent };
  const disksRoot = spec.mode === "local" ? spec.host.disksRoot : undefined;
  const disk = (kind: string, sizeBytes: number | undefined) =>
    disksRoot && sizeBytes !== undefined
      ? { ...tenantDiskPaths(disksRoot, spec.projectId, kind), sizeBytes }
      : undefined;
  const identity = new TenantIdentity(
    `${name}-identity`,
    {
      projectId: spec.projectId,
      mode: spec.mode,
      backupRoot: spec.host.backupRoot,
      backupDisk: backupInGuest ? undefined : disk("backup", spec.backupBytes),
      backupInGuest,
      gcp: spec.gcp,
      sshPublicKey: spec.sshPublicKey,
    },
    child,
  );
  const network = new TenantNetwork(
    `${name}-network`,
    { projectId: spec.projectId, subnet: spec.subnet, labels },
    child,
  );
  // The rules name the bridge, subnet and gateway the network is made with, all of them the spec's: they go in
  // while the network is made, not after it (iptables takes an interface that does not exist yet, and nothing
  // is on the bridge before the sandbox, which waits for both).
  const egress = new TenantEgress(
    `${name}-egress`,
    {
      projectId: spec.projectId,
      bridge: tenantNames(spec.projectId).bridge,
      subnet: spec.subnet,
      gateway: tenantAddresses(spec.subnet).gateway,
      proxyPort: spec.host.squidPort,
      sshPort: SANDBOX_SSH_PORT,
      allowlist: spec.allowlist,
      squidConfigFile: spec.host.squidConfigFile,
      squidFragmentsDir: spec.host.squidFragmentsDir,
      instance: spec.host.instance,
      gatewayPort: spec.host.gatewayPort,
    },
    child,
  );
  return { identity, network, egress, disk };
}

/**
 * One front-door route per declared port (lib/front-door.ts): `<label>[-<name>].<domain>` → the sandbox's
 * address and port on its bridge, behind the runtime's forward-auth.
 */
export function declareFrontDoor(
  name: string,
  spec: TenantSpec,
  network: TenantNetwork,
  sandbox: pulumi.Resource,
  parent: pulumi.Resource,
): void {
  const frontDoor = spec.host.frontDoor;
  if (!frontDoor) return;
  for (const entry of frontDoorRoutes(spec.projectId, spec.ports, frontDoor.port, frontDoor.domain)) {
    const suffix = `${entry.name ?? "main"}-${entry.port}`;
    new FrontDoorRoute(
      `${name}-front-door-${suffix}`,
      {
        routeId: `fd-${spec.projectId}-${suffix}`,
        adminPort: frontDoor.adminPort,
        projectId: spec.projectId,
        hosts: entry.hosts,
        upstream: pulumi.interpolate`${network.sandboxAddress}:${entry.port}`,
        authUpstream: frontDoor.authUpstream,
      },
      { parent, dependsOn: [sandbox] },
    );
  }
}

/** What a tenant on the host reads back: its base's, and what its sandbox (`own`) says of itself. */
export function hostOutputs(
  spec: TenantSpec,
  { identity, network }: HostBase,
  own: Pick<TenantOutputs, "containerName" | "volumeName" | "running">,
): TenantOutputs {
  return {
    ...own,
    sandboxAddress: network.sandboxAddress,
    bridge: network.bridge,
    subnet: network.subnet,
    sshHostPort: pulumi.output(spec.sshHostPort),
    sshPublicKey: identity.sshPublicKey,
    sshPrivateKey: identity.sshPrivateKey,
    backupRemote: identity.backupRemote,
  };
}
