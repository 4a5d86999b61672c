import * as gcp from "@pulumi/gcp";
import * as pulumi from "@pulumi/pulumi";

/** Node label and taint GKE puts on GKE Sandbox nodes; pods get there with `runtimeClassName: gvisor`. */
export const GVISOR = {
  runtimeClass: "gvisor",
  sandboxType: "GVISOR",
  nodeLabel: "sandbox.gke.io/runtime",
} as const;

/** Minimal node roles (GKE's recommended least-privileged node service account). */
export const NODE_ROLES = [
  "roles/logging.logWriter",
  "roles/monitoring.metricWriter",
  "roles/monitoring.viewer",
] as const;

/** A kubeconfig that reaches a GKE cluster with the gcloud credentials of whoever runs it (no token in it). */
export function gkeKubeconfig(clusterName: string, endpoint: string, caCertificateBase64: string): string {
  return JSON.stringify({
    apiVersion: "v1",
    kind: "Config",
    clusters: [
      {
        name: clusterName,
        cluster: { server: `https://${endpoint}`, "certificate-authority-data": caCertificateBase64 },
      },
    ],
    users: [
      {
        name: clusterName,
        user: {
          exec: {
            apiVersion: "client.authentication.k8s.io/v1beta1",
            command: "gke-gcloud-auth-plugin",
            provideClusterInfo: true,
            installHint: "gcloud components install gke-gcloud-auth-plugin",
          },
        },
      },
    ],
    contexts: [{ name: clusterName, context: { cluster: clusterName, user: clusterName } }],
    "current-context": clusterName,
  });
}

/** Arguments of {@link SandboxCluster}. */
export interface SandboxClusterArgs {
  readonly project: string;
  readonly region: string;
  readonly zone: string;
  readonly networkId: pulumi.Input<string>;
  readonly subnetworkId: pulumi.Input<string>;
  readonly podsRangeName: string;
  readonly servicesRangeName: string;
  readonly sandboxMachineType: string;
  readonly sandboxNodeCount: number;
  readonly registry: { readonly location: pulumi.Input<string>; readonly repositoryId: pulumi.Input<string> };
  readonly labels: Record<string, string>;
}

export function validateSandboxClusterArgs(args: SandboxClusterArgs): string[] {
  return args.sandboxNodeCount >= 1 ? [] : [`sandboxNodeCount ${args.sandboxNodeCount} < 1`];
}

/**
 * The optional GKE cluster for the future Kubernetes backend (ARCHITECTURE decision 11): zonal, VPC-native,
 * Workload Identity, a small system pool (GKE Sandbox needs one pool without it for system pods) and a
 * gVisor node pool where sandboxes run.
 */
export class SandboxCluster extends pulumi.ComponentResource {
  public readonly clusterName: pulumi.Output<string>;
  public readonly endpoint: pulumi.Output<string>;
  public readonly sandboxPoolName: pulumi.Output<string>;
  /**
   * A kubeconfig of the cluster for the platform stack's own Kubernetes provider: the endpoint, its CA, and GKE's
   * `gke-gcloud-auth-plugin` (the operator's gcloud credentials at `pulumi up`). No credential is in it.
   */
  public readonly kubeconfig: pulumi.Output<string>;

  constructor(name: string, args: SandboxClusterArgs, opts?: pulumi.ComponentResourceOptions) {
    super("sandbox:gcp:SandboxCluster", name, {}, opts);
    const problems = validateSandboxClusterArgs(args);
    if (problems.length > 0) throw new pulumi.ResourceError(problems.join("; "), this);
    const nodeAccount = new gcp.serviceaccount.Account(
      `${name}-nodes`,
      {
        project: args.project,
        accountId: "agent-sandbox-gke-nodes",
        displayName: "Agent Platform - GKE nodes",
      },
      { parent: this },
    );
    const member = pulumi.interpolate`serviceAccount:${nodeAccount.email}`;
    NODE_ROLES.forEach(
      (role) =>
        new gcp.projects.IAMMember(
          `${name}-nodes-${role.split("/")[1]!.replace(/\./g, "-")}`,
          { project: args.project, role, member },
          { parent: this },
        ),
    );
    new gcp.artifactregistry.RepositoryIamMember(
      `${name}-nodes-registry-reader`,
      {
        project: args.project,
        location: args.registry.location,
        repository: args.registry.repositoryId,
        role: "roles/artifactregistry.reader",
        member,
      },
      { parent: this },
    );
    const cluster = new gcp.container.Cluster(
      `${name}-gke`,
      {
        project: args.project,
        location: args.zone,
        network: args.networkId,
        subnetwork: args.subnetworkId,
        removeDefaultNodePool: true,
        initialNodeCount: 1,
        networkingMode: "VPC_NATIVE",
        ipAllocationPolicy: {
          clusterSecondaryRangeName: args.podsRangeName,
          servicesSecondaryRangeName: args.servicesRangeName,
        },
        workloadIdentityConfig: { workloadPool: `${args.project}.svc.id.goog` },
        // NetworkPolicy egress to the proxy is how the Kubernetes backend confines sandboxes.
        datapathProvider: "ADVANCED_DATAPATH",
        releaseChannel: { channel: "REGULAR" },
        resourceLabels: args.labels,
        deletionProtection: true,
      },
      { parent: this },
    );
    const nodeConfig = (machineType: string) => ({
      machineType,
      serviceAccount: nodeAccount.email,
      oauthScopes: ["https://www.googleapis.com/auth/cloud-platform"],
      imageType: "COS_CONTAINERD",
      workloadMetadataConfig: { mode: "GKE_METADATA" },
      shieldedInstanceConfig: { enableSecureBoot: true, enableIntegrityMonitoring: true },
      resourceLabels: args.labels,
    });
    new gcp.container.NodePool(
      `${name}-system`,
      {
        project: args.project,
        location: args.zone,
        cluster: cluster.name,
        nodeCount: 1,
        nodeConfig: nodeConfig("e2-medium"),
        management: { autoRepair: true, autoUpgrade: true },
      },
      { parent: this },
    );
    const sandboxPool = new gcp.container.NodePool(
      `${name}-gvisor`,
      {
        project: args.project,
        location: args.zone,
        cluster: cluster.name,
        nodeCount: args.sandboxNodeCount,
        nodeConfig: { ...nodeConfig(args.sandboxMachineType), sandboxConfig: { type: GVISOR.sandboxType } },
        management: { autoRepair: true, autoUpgrade: true },
      },
      { parent: this },
    );
    this.clusterName = cluster.name;
    this.endpoint = cluster.endpoint;
    this.kubeconfig = pulumi
      .all([cluster.name, cluster.endpoint, cluster.masterAuth])
      .apply(([clusterName, endpoint, auth]) =>
        gkeKubeconfig(clusterName, endpoint, auth.clusterCaCertificate ?? ""),
      );
    this.sandboxPoolName = sandboxPool.name;
    this.registerOutputs({
      clusterName: this.clusterName,
      endpoint: this.endpoint,
      sandboxPoolName: this.sandboxPoolName,
    });
  }
}
