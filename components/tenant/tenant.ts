import * as pulumi from "@pulumi/pulumi";
import { LABELS, MANAGED_BY, SANDBOX_SSH_PORT } from "../../lib/constants.js";
import type { TenantSpec } from "./spec.js";
import { secretFiles, TenantSecrets, type TenantSecret } from "./secrets.js";
import { TenantEgress } from "./egress.js";
import { TenantIdentity } from "./identity.js";
import { TenantNetwork } from "./network.js";
import { TenantSandbox } from "./sandbox.js";
import { MICROVM_DEFAULT_HOME_MIB, TenantMicroVm } from "./microvm.js";
import { TenantStorage } from "./storage.js";
import { tenantNames } from "./names.js";
import { FrontDoorRoute } from "../resources/front-door-route.js";
import { frontDoorRoutes } from "../../lib/front-door.js";
import { declareKubernetesBackend } from "./kubernetes/backend.js";

/**
 * One project's whole sandbox: identity, network, egress rules, storage, container. Egress is in place
 * before the container starts, so a sandbox never runs unfiltered.
 */
export class Tenant extends pulumi.ComponentResource {
  public readonly containerName: pulumi.Output<string>;
  public readonly sandboxAddress: pulumi.Output<string>;
  public readonly bridge: pulumi.Output<string>;
  public readonly subnet: pulumi.Output<string>;
  public readonly volumeName: pulumi.Output<string>;
  public readonly sshHostPort: pulumi.Output<number>;
  public readonly sshPublicKey: pulumi.Output<string>;
  public readonly sshPrivateKey: pulumi.Output<string | undefined>;
  public readonly backupRemote: pulumi.Output<string>;
  public readonly running: pulumi.Output<boolean>;

  /**
   * `spec.secrets`: the project's secrets with their values (never part of the recorded spec), written
   * into the tenant's secrets directory when the platform has one.
   */
  constructor(
    name: string,
    spec: TenantSpec & {
      readonly secrets?: readonly TenantSecret[];
      /** Backend `kubernetes`: the cluster's kubeconfig (else the stack's secret config `kubeconfig`). */
      readonly kubeconfig?: pulumi.Input<string>;
    },
    opts?: pulumi.ComponentResourceOptions,
  ) {
    super("sandbox:tenant:Tenant", name, {}, opts);
    const labels = {
      [LABELS.tenant]: spec.projectId,
      ...(spec.ownerLabel === false ? {} : { [LABELS.owner]: spec.ownerId }),
      [LABELS.stack]: tenantNames(spec.projectId).stack,
      [LABELS.managedBy]: MANAGED_BY,
      ...(spec.host.instance === undefined ? {} : { [LABELS.instance]: spec.host.instance }),
    };
    if (spec.backend === "kubernetes") {
      const outputs = declareKubernetesBackend(name, spec, labels, spec.kubeconfig, this);
      this.containerName = outputs.containerName;
      this.sandboxAddress = outputs.sandboxAddress;
      this.bridge = outputs.bridge;
      this.subnet = outputs.subnet;
      this.volumeName = outputs.volumeName;
      this.sshHostPort = outputs.sshHostPort;
      this.sshPublicKey = outputs.sshPublicKey;
      this.sshPrivateKey = outputs.sshPrivateKey;
      this.backupRemote = outputs.backupRemote;
      this.running = outputs.running;
      this.registerOutputs({ ...outputs });
      return;
    }
    const child = { parent: this };
    // Local mode: the tenant's own filesystems under <disksRoot>/<project> (absent in older tenants' specs).
    const disksDir =
      spec.mode === "local" && spec.host.disksRoot ? `${spec.host.disksRoot}/${spec.projectId}` : undefined;
    const disk = (kind: string, sizeBytes: number | undefined) =>
      disksDir && sizeBytes !== undefined
        ? { imagePath: `${disksDir}/${kind}.img`, mountpoint: `${disksDir}/${kind}`, sizeBytes }
        : undefined;
    const microvm = spec.backend === "microvm" ? spec.microvm : undefined;
    const identity = new TenantIdentity(
      `${name}-identity`,
      {
        projectId: spec.projectId,
        mode: spec.mode,
        backupRoot: spec.host.backupRoot,
        backupDisk: microvm ? undefined : disk("backup", spec.backupBytes),
        backupInGuest: microvm !== undefined,
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
    const egress = new TenantEgress(
      `${name}-egress`,
      {
        projectId: spec.projectId,
        bridge: network.bridge,
        subnet: network.subnet,
        gateway: network.gateway,
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
    if (microvm) {
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
          gcsTokenFile: spec.mode === "gcp",
          protectedPaths: spec.protectedPaths,
          backupSizeMiB:
            spec.mode === "local" ? mib(spec.backupBytes, Math.ceil(homeSizeMiB * 1.2)) : undefined,
        },
        { parent: this, dependsOn: [egress] },
      );
      this.declareFrontDoor(name, spec, network, vm);
      this.containerName = pulumi.output(tenantNames(spec.projectId).container);
      this.sandboxAddress = network.sandboxAddress;
      this.bridge = network.bridge;
      this.subnet = network.subnet;
      this.volumeName = pulumi.output("");
      this.sshHostPort = pulumi.output(spec.sshHostPort);
      this.sshPublicKey = identity.sshPublicKey;
      this.sshPrivateKey = identity.sshPrivateKey;
      this.backupRemote = identity.backupRemote;
      this.running = vm.running;
      this.registerOutputs(this.outputs());
      return;
    }
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
      { projectId: spec.projectId, labels, disk: disk("home", spec.homeBytes) },
      child,
    );
    const sandbox = new TenantSandbox(
      `${name}-sandbox`,
      {
        projectId: spec.projectId,
        image: spec.image,
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
      { parent: this, dependsOn: [egress] },
    );
    this.declareFrontDoor(name, spec, network, sandbox);
    this.containerName = sandbox.containerName;
    this.sandboxAddress = network.sandboxAddress;
    this.bridge = network.bridge;
    this.subnet = network.subnet;
    this.volumeName = storage.volumeName;
    this.sshHostPort = pulumi.output(spec.sshHostPort);
    this.sshPublicKey = identity.sshPublicKey;
    this.sshPrivateKey = identity.sshPrivateKey;
    this.backupRemote = identity.backupRemote;
    this.running = sandbox.running;
    this.registerOutputs(this.outputs());
  }

  private outputs(): Record<string, pulumi.Output<unknown>> {
    return {
      containerName: this.containerName,
      sandboxAddress: this.sandboxAddress,
      bridge: this.bridge,
      subnet: this.subnet,
      volumeName: this.volumeName,
      sshHostPort: this.sshHostPort,
      sshPublicKey: this.sshPublicKey,
      sshPrivateKey: this.sshPrivateKey,
      backupRemote: this.backupRemote,
      running: this.running,
    };
  }

  /**
   * One front-door route per declared port (lib/front-door.ts): `<label>[-<name>].<domain>` → the sandbox's
   * address and port on its bridge, behind the runtime's forward-auth.
   */
  private declareFrontDoor(
    name: string,
    spec: TenantSpec,
    network: TenantNetwork,
    sandbox: pulumi.Resource,
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
        { parent: this, dependsOn: [sandbox] },
      );
    }
  }
}
