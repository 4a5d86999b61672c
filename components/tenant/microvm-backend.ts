// The `microvm` backend of the tenant program: on the host's identity, bridge and egress (host.ts), a QEMU
// microVM with its own kernel, disks and secrets (TenantMicroVm), where a container's storage and container
// would be.
import * as pulumi from "@pulumi/pulumi";
import { declareFrontDoor, declareHostBase, hostOutputs } from "./host.js";
import { MICROVM_DEFAULT_HOME_MIB, TenantMicroVm } from "./microvm.js";
import { tenantNames } from "./names.js";
import type { TenantArgs, TenantOutputs } from "./outputs.js";
import { secretFiles } from "./secrets.js";
import type { MicroVmTenantSpec } from "./spec.js";

export function declareMicroVmBackend(
  name: string,
  spec: TenantArgs & MicroVmTenantSpec,
  labels: Readonly<Record<string, string>>,
  parent: pulumi.Resource,
): TenantOutputs {
  const microvm = spec.microvm;
  const base = declareHostBase(name, spec, labels, parent, true);
  const { identity, network, egress } = base;
  const mib = (bytes: number | undefined, fallback: number) =>
    bytes === undefined ? fallback : Math.floor(bytes / (1024 * 1024));
  const homeSizeMiB = mib(spec.homeBytes, MICROVM_DEFAULT_HOME_MIB);
  const vm = new TenantMicroVm(
    `${name}-microvm`,
    {
      projectId: spec.projectId,
      image: spec.image,
      gateway: network.gateway,
      proxyPort: spec.host.squidPort,
      sshPublicKey: identity.sshPublicKey,
      backupRemote: identity.backupRemote,
      backupIntervalSeconds: spec.backupIntervalSeconds,
      backupAfterChangeSeconds: spec.backupAfterChangeSeconds,
      credentialGateway: spec.host.gatewayPort !== undefined,
      limits: spec.limits,
      running: spec.running,
      sshHostPort: spec.sshHostPort,
      bridge: network.bridge,
      address: network.sandboxAddress,
      kernel: microvm.kernel,
      initrd: microvm.initrd,
      accelerator: microvm.accelerator,
      stateDir: `${microvm.stateRoot}/${spec.projectId}`,
      platformKey: microvm.platformKey,
      files: pulumi
        .output(
          spec.host.gatewayPort === undefined
            ? undefined
            : pulumi.interpolate`http://${network.gateway}:${spec.host.gatewayPort}`,
        )
        .apply((url) => secretFiles(spec.secrets ?? [], url)),
      homeSizeMiB,
      homeCopyFrom: spec.homeCopyFrom,
      keepMemory: microvm.keepMemory,
      ...(microvm.nested ? { nested: microvm.nested } : {}),
      gcsTokenFile: spec.mode === "gcp",
      protectedPaths: spec.protectedPaths,
      backupSizeMiB: spec.mode === "local" ? mib(spec.backupBytes, Math.ceil(homeSizeMiB * 1.2)) : undefined,
    },
    { parent, dependsOn: [egress.firewall] },
  );
  declareFrontDoor(name, spec, network, vm, parent);
  return hostOutputs(spec, base, {
    containerName: pulumi.output(tenantNames(spec.projectId).container),
    volumeName: pulumi.output(""),
    running: vm.running,
  });
}
