// The `container` backend of the tenant program: on the host's identity, bridge and egress (host.ts), the
// tenant's secrets directory, its home (a volume, or its own filesystem), and the container itself.
import * as pulumi from "@pulumi/pulumi";
import { declareFrontDoor, declareHostBase, hostOutputs } from "./host.js";
import type { TenantArgs, TenantOutputs } from "./outputs.js";
import { TenantSandbox } from "./sandbox.js";
import { TenantSecrets } from "./secrets.js";
import { TenantStorage, type TenantDisk } from "./storage.js";
import { TrafficShaper } from "../resources/traffic-shaper.js";

/** The home's filesystem, made from a fork's staged copy where the spec names one. */
function homeDisk(disk: TenantDisk | undefined, copyFrom: string | undefined): TenantDisk | undefined {
  return disk && copyFrom !== undefined ? { ...disk, copyFrom } : disk;
}

export function declareContainerBackend(
  name: string,
  spec: TenantArgs,
  labels: Readonly<Record<string, string>>,
  parent: pulumi.Resource,
): TenantOutputs {
  const child = { parent };
  const base = declareHostBase(name, spec, labels, parent, false);
  const { identity, network, egress, disk } = base;
  // Bandwidth caps (tc on the bridge): shaped in place, the sandbox untouched; none declared, none there.
  if (spec.bandwidth)
    new TrafficShaper(
      `${name}-bandwidth`,
      { tenantId: spec.projectId, bridge: network.bridge, ...spec.bandwidth },
      { parent },
    );
  const secretsDir = spec.host.secretsRoot ? `${spec.host.secretsRoot}/${spec.projectId}` : undefined;
  const gatewayPort = spec.host.gatewayPort;
  const secrets = secretsDir
    ? new TenantSecrets(
        `${name}-secrets`,
        {
          dir: secretsDir,
          secrets: spec.secrets ?? [],
          gatewayUrl:
            gatewayPort === undefined
              ? undefined
              : pulumi.interpolate`http://${network.gateway}:${gatewayPort}`,
        },
        child,
      )
    : undefined;
  const storage = new TenantStorage(
    `${name}-storage`,
    { projectId: spec.projectId, labels, disk: homeDisk(disk("home", spec.homeBytes), spec.homeCopyFrom) },
    child,
  );
  const sandbox = new TenantSandbox(
    `${name}-sandbox`,
    {
      projectId: spec.projectId,
      image: spec.image,
      ...(spec.isolation ? { isolation: spec.isolation } : {}),
      network: network.networkName,
      address: network.sandboxAddress,
      gateway: network.gateway,
      proxyPort: spec.host.squidPort,
      volumeName: storage.volumeName,
      volumeMountpoint: storage.mountpoint,
      protectedPaths: spec.protectedPaths,
      sshPublicKey: identity.sshPublicKey,
      sshHostPort: spec.sshHostPort,
      backupRemote: identity.backupRemote,
      backupHostDir: spec.mode === "local" ? identity.backupHostDir : undefined,
      backupIntervalSeconds: spec.backupIntervalSeconds,
      backupAfterChangeSeconds: spec.backupAfterChangeSeconds,
      gcsTokenFile: spec.mode === "gcp",
      secretsDir,
      secretFiles: secrets?.files,
      sshKeysDir: spec.host.sshKeysRoot ? `${spec.host.sshKeysRoot}/${spec.projectId}` : undefined,
      credentialGateway: gatewayPort !== undefined,
      limits: spec.limits,
      running: spec.running,
      labels,
    },
    { parent, dependsOn: [egress.firewall] },
  );
  declareFrontDoor(name, spec, network, sandbox, parent);
  return hostOutputs(spec, base, {
    containerName: sandbox.containerName,
    volumeName: storage.volumeName,
    running: sandbox.running,
  });
}
