// The gcp target of the platform stack: the GCP project's setup as code, plus the host VM that runs the
// host baseline (lib/host/render.ts), the runtime service and Postgres.
import * as gcp from "@pulumi/gcp";
import * as k8s from "@pulumi/kubernetes";
import * as pulumi from "@pulumi/pulumi";
import { readFileSync } from "node:fs";
import * as path from "node:path";
import { MANAGED_BY } from "../../lib/constants.js";
import { HostAddress } from "../../components/gcp/host-address.js";
import { HostIdentity } from "../../components/gcp/host-identity.js";
import { HostVm } from "../../components/gcp/host-vm.js";
import { PlatformNetwork } from "../../components/gcp/network.js";
import { ProjectServiceIdentity } from "../../components/gcp/project-service-identity.js";
import { ProjectServices } from "../../components/gcp/project-services.js";
import { ProjectBudget } from "../../components/gcp/budget.js";
import { SandboxRegistry } from "../../components/gcp/registry.js";
import { RuntimeRelease } from "../../components/gcp/runtime-release.js";
import { GVISOR, SandboxCluster } from "../../components/gcp/sandbox-cluster.js";
import { RuntimeClusterAccess } from "../../components/kubernetes/runtime-access.js";
import { SandboxImage } from "../../components/gcp/sandbox-image.js";
import { StateSecretsKey } from "../../components/gcp/state-key.js";
import {
  renderStartupScript,
  RUNTIME_KUBECONFIG,
  type StartupFrontDoor,
  type StartupScriptInput,
} from "../../components/gcp/startup-script.js";
import { PlatformBucket } from "../../components/gcp/storage.js";
import { pinnedKubernetesProviderVersion, pinnedPulumiVersion, REPO_ROOT } from "../../lib/toolchain.js";
import { gcpMicroVm, PROJECT, type GcpConfig, type StackConfig } from "../config.js";
import type { PlatformOutputs } from "./outputs.js";

/** GCP label values: lowercase letters, digits, `_` and `-`, at most 63 characters. */
export const labelValue = (value: string) =>
  value
    .toLowerCase()
    .replace(/[^a-z0-9_-]/g, "-")
    .slice(0, 63);

/** The provider plugins the runtime's engine needs on the VM, at the versions this checkout pins. */
function pinnedPlugins(config: StackConfig): { name: string; version: string }[] {
  const gcpPackage = JSON.parse(
    readFileSync(path.join(REPO_ROOT, "node_modules/@pulumi/gcp/package.json"), "utf8"),
  ) as { version: string };
  // Kubernetes tenant stacks apply their objects through Pulumi's Kubernetes provider: Pulumi's own release of
  // the version package.json pins (on this host, where there is no Go to build it: scripts/setup.sh).
  const cluster = config.gcp?.gke.enabled || config.tenants.kubernetes !== undefined;
  return [
    { name: "gcp", version: gcpPackage.version },
    ...(cluster ? [{ name: "kubernetes", version: pinnedKubernetesProviderVersion() }] : []),
  ];
}

/**
 * The runtime's `tenants.kubernetes` on a host of a platform that made the sandbox cluster: the operator's block
 * (RuntimeClass, home size, ...), gVisor by default, with the kubeconfig the startup script writes and the
 * runtime's own GKE token (the kubeconfig's user runs gke-gcloud-auth-plugin, for people).
 */
export function runtimeClusterConfig(config: StackConfig): Record<string, unknown> {
  return {
    runtimeClassName: GVISOR.runtimeClass,
    ...config.tenants.kubernetes,
    kubeconfigFile: RUNTIME_KUBECONFIG,
    credentials: "gke",
  };
}

/**
 * The runtime's config on the GCP host: it listens on loopback behind the front door, which it trusts for
 * the client's address; its terminal URLs, the console's origin and the SSH host are the platform's domain.
 */
export function publicRuntimeConfig(config: StackConfig): StackConfig["runtime"] {
  const domain = config.gcp!.domain;
  return {
    ...config.runtime,
    listenHost: "127.0.0.1",
    publicHost: domain,
    terminalUrlBase: `wss://${domain}/terminal`,
    consoleOrigins: [`https://${domain}`],
    trustedProxies: ["127.0.0.1"],
  };
}

/** `gcp.tls` as the front door's Caddy issuer. */
export function frontDoorIssuer(tls: GcpConfig["tls"]): StartupFrontDoor["issuer"] {
  if (tls.issuer === "internal") return { module: "internal" };
  return {
    module: "acme",
    ...(tls.email ? { email: tls.email } : {}),
    ...(tls.acmeDirectory ? { ca: tls.acmeDirectory } : {}),
  };
}

/** What the platform's resources resolve to, that the host's startup script needs. */
export interface StartupScriptResolved {
  readonly projectServiceEmail: string;
  /** The sandbox image in the registry, tagged by content. */
  readonly sandboxImage: string;
  /** `<location>-docker.pkg.dev/<project>/<repository>`. */
  readonly registryPath: string;
  readonly release: StartupScriptInput["release"];
  readonly plugins: StartupScriptInput["plugins"];
  /** The sandbox cluster's kubeconfig, when the platform made one. */
  readonly kubeconfig?: string | undefined;
}

/**
 * The host's startup script's input: the runtime's stack file (behind the front door, with the cluster when
 * there is one) and the host's toolchain, images and release. Pure, so the script a test boots is the one
 * the stack renders (tests/gcp-host/).
 */
export function startupScriptInput(config: StackConfig, resolved: StartupScriptResolved): StartupScriptInput {
  const gcpConfig = config.gcp;
  if (config.target !== "gcp" || !gcpConfig) {
    throw new Error(`${PROJECT}:target must be gcp, with ${PROJECT}:gcp set, for the gcp platform`);
  }
  const { kubeconfig } = resolved;
  return {
    host: config.host,
    runtimeStackConfig: {
      [`${PROJECT}:target`]: "gcp",
      [`${PROJECT}:host`]: config.host,
      // Behind the front door: the runtime on loopback, its URLs on the platform's domain.
      [`${PROJECT}:runtime`]: publicRuntimeConfig(config),
      [`${PROJECT}:tenants`]: {
        ...config.tenants,
        image: resolved.sandboxImage,
        ...(kubeconfig === undefined ? {} : { kubernetes: runtimeClusterConfig(config) }),
      },
      [`${PROJECT}:gcp`]: { ...gcpConfig, impersonateServiceAccount: resolved.projectServiceEmail },
    },
    frontDoor: {
      domain: gcpConfig.domain,
      issuer: frontDoorIssuer(gcpConfig.tls),
      adminPort: config.host.frontDoorAdminPort,
      apiPort: config.runtime.apiPort,
      terminalPort: config.runtime.terminalPort,
    },
    release: resolved.release,
    pulumiVersion: pinnedPulumiVersion(),
    plugins: resolved.plugins,
    postgresImage: gcpConfig.postgresImage,
    registryHost: resolved.registryPath.split("/")[0]!,
    sandboxImage: resolved.sandboxImage,
    microvm: gcpMicroVm(config),
    ...(kubeconfig === undefined ? {} : { kubeconfig }),
  };
}

export function gcpPlatform(config: StackConfig): PlatformOutputs {
  const gcpConfig = config.gcp;
  if (config.target !== "gcp" || !gcpConfig) {
    throw new Error(`${PROJECT}:target must be gcp, with ${PROJECT}:gcp set, for the gcp platform`);
  }
  const { project, region, zone } = gcpConfig;
  const labels = { "managed-by": MANAGED_BY, stack: labelValue(pulumi.getStack()) };

  const services = new ProjectServices("platform", {
    project,
    gke: gcpConfig.gke.enabled,
    budget: gcpConfig.budget !== undefined,
  });
  const afterApis = { dependsOn: services.services };

  const bucket = new PlatformBucket(
    "platform",
    {
      project,
      name: gcpConfig.bucket,
      location: region.toUpperCase(),
      labels,
      deletedDataRetentionDays: gcpConfig.deletedDataRetentionDays,
    },
    afterApis,
  );
  if (gcpConfig.budget) new ProjectBudget("platform", { project, ...gcpConfig.budget }, afterApis);
  const stateKey = new StateSecretsKey("tenant-state", { kmsKey: gcpConfig.kmsKey, labels }, afterApis);
  const registry = new SandboxRegistry("sandboxes", { project, location: region, labels }, afterApis);
  const network = new PlatformNetwork(
    "platform",
    {
      project,
      region,
      subnetCidr: gcpConfig.subnetCidr,
      adminSourceRanges: gcpConfig.adminSourceRanges,
      clientSourceRanges: gcpConfig.clientSourceRanges,
      sshPortRange: config.tenants.sshPortRange,
      squidPort: config.host.squidPort,
      gke: gcpConfig.gke.enabled
        ? { podsCidr: gcpConfig.gke.podsCidr, servicesCidr: gcpConfig.gke.servicesCidr }
        : undefined,
    },
    afterApis,
  );

  const registryRef = { location: registry.repository.location, repositoryId: registry.repositoryId };
  const projectService = new ProjectServiceIdentity(
    "project-service",
    { project, bucket: bucket.bucketName, registry: registryRef },
    afterApis,
  );
  const hostIdentity = new HostIdentity(
    "host",
    {
      project,
      bucketName: gcpConfig.bucket,
      bucket: bucket.bucketName,
      stateKeyId: stateKey.keyId,
      registry: registryRef,
      projectServiceAccount: projectService.accountName,
    },
    afterApis,
  );

  const image = new SandboxImage(
    "sandbox",
    {
      context: path.resolve(REPO_ROOT, gcpConfig.sandboxImageContext),
      repositoryPath: registry.path,
      baseImage: gcpConfig.sandboxBaseImage,
    },
    { dependsOn: [registry] },
  );
  const release = new RuntimeRelease("runtime", { root: REPO_ROOT, bucket: bucket.bucketName });

  // The sandbox cluster, when tenants may run on Kubernetes: made before the host, whose runtime gets its kubeconfig.
  const cluster = gcpConfig.gke.enabled
    ? new SandboxCluster(
        "sandboxes",
        {
          project,
          region,
          zone,
          networkId: network.networkId,
          subnetworkId: network.subnetworkId,
          podsRangeName: network.podsRangeName,
          servicesRangeName: network.servicesRangeName,
          sandboxMachineType: gcpConfig.gke.sandboxMachineType,
          sandboxNodeCount: gcpConfig.gke.sandboxNodeCount,
          registry: registryRef,
          labels,
        },
        afterApis,
      )
    : undefined;

  const address = new HostAddress("host", { project, region, labels }, afterApis);
  const startupScript = pulumi
    .all([projectService.email, image.imageName, registry.path, bucket.bucketName, cluster?.kubeconfig])
    .apply(([projectServiceEmail, sandboxImage, registryPath, bucketName, kubeconfig]) =>
      renderStartupScript(
        startupScriptInput(config, {
          projectServiceEmail,
          sandboxImage,
          registryPath,
          release: { bucket: bucketName, object: release.objectName, digest: release.digest },
          plugins: pinnedPlugins(config),
          kubeconfig,
        }),
      ),
    );
  const host = new HostVm(
    "host",
    {
      project,
      region,
      zone,
      machineType: gcpConfig.machineType,
      image: gcpConfig.image,
      bootDiskSizeGb: gcpConfig.bootDiskSizeGb,
      dataDiskSizeGb: gcpConfig.dataDiskSizeGb,
      subnetworkId: network.subnetworkId,
      serviceAccountEmail: hostIdentity.email,
      address: address.address,
      startupScript,
      labels,
      nestedVirtualization: gcpMicroVm(config),
    },
    { dependsOn: [release, hostIdentity, ...services.services] },
  );

  if (cluster) {
    // The runtime reaches the cluster as the Project Service account (the identity its tenant stacks run as):
    // GKE lets it in with `container.clusters.get`, and RBAC and the admission policy decide the rest.
    new gcp.projects.IAMMember(
      "project-service-cluster-viewer",
      {
        project,
        role: "roles/container.clusterViewer",
        member: pulumi.interpolate`serviceAccount:${projectService.email}`,
      },
      afterApis,
    );
    const clusterProvider = new k8s.Provider("sandboxes-cluster", {
      kubeconfig: cluster.kubeconfig,
      enableServerSideApply: true,
    });
    new RuntimeClusterAccess("runtime-cluster-access", {
      runtimeUser: projectService.email,
      provider: clusterProvider,
    });
  }

  return {
    apiUrl: pulumi.output(`https://${gcpConfig.domain}`),
    terminalUrlBase: pulumi.output(`wss://${gcpConfig.domain}/terminal`),
    hostAddress: host.externalIp,
    registry: registry.path,
    bucket: bucket.bucketName,
    stateBackendUrl: bucket.stateBackendUrl,
  };
}
