import * as gcp from "@pulumi/gcp";
import * as k8s from "@pulumi/kubernetes";
import * as pulumi from "@pulumi/pulumi";
import { LABELS } from "../../../lib/constants.js";
import { dns1123Label, isDns1123Label, kubernetesTenantNames, labelValue } from "./names.js";
import {
  type EgressProxyTarget,
  proxyNeedsDns,
  sandboxContainerSecurityContext,
  sandboxNetworkPolicySpec,
  sandboxPodSecurityContext,
  sandboxResources,
} from "./policy.js";

/** The annotation GKE's metadata server reads to map a Kubernetes service account to a Google one. */
export const WORKLOAD_IDENTITY_ANNOTATION = "iam.gke.io/gcp-service-account";
/** What lets a KSA act as the GSA (GKE Workload Identity). */
export const WORKLOAD_IDENTITY_USER_ROLE = "roles/iam.workloadIdentityUser";
/** Pod Security Admission level every tenant namespace enforces (the API server refuses anything weaker). */
export const POD_SECURITY_LEVEL = "restricted";
/** A DNS-1123 subdomain (RuntimeClass names, storage classes). */
const DNS1123_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
/** A storage quantity such as `10Gi`. */
const STORAGE_QUANTITY = /^[1-9][0-9]*(Ki|Mi|Gi|Ti)$/;

/** Arguments of {@link KubernetesTenant}. */
export interface KubernetesTenantArgs {
  readonly projectId: string;
  readonly image: string;
  /** The cluster's kubeconfig (from the platform's outputs); the ambient one is never used. */
  readonly kubeconfig: pulumi.Input<string> | undefined;
  /** The RuntimeClass the sandbox runs under: `gvisor` on GKE Sandbox. Required: never the node's runc. */
  readonly runtimeClassName: string | undefined;
  readonly egressProxy: EgressProxyTarget;
  readonly homeSize: string;
  readonly storageClassName?: string;
  readonly limits: { readonly memoryMiB: number; readonly cpus: number };
  readonly running: boolean;
  /** The tenant's labels (lib/constants.ts LABELS): values that are not valid label values are mapped. */
  readonly labels: Readonly<Record<string, string>>;
  /** The GCP project (its Workload Identity pool is `<project>.svc.id.goog`) and the tenant's GSA. */
  readonly workloadIdentity: { readonly project: string; readonly serviceAccountEmail: pulumi.Input<string> };
  /** The sandbox's environment besides the proxy variables (SSH key, backup remote, ...). */
  readonly env: Readonly<Record<string, pulumi.Input<string>>>;
}

export function validateKubernetesTenantArgs(args: KubernetesTenantArgs): string[] {
  const problems: string[] = [];
  if (args.kubeconfig === undefined || args.kubeconfig === "")
    problems.push(
      "kubeconfig is required for the kubernetes backend (the cluster's kubeconfig from the platform's " +
        "outputs; the ambient ~/.kube/config is never used)",
    );
  if (args.runtimeClassName === undefined || args.runtimeClassName === "")
    problems.push(
      "runtimeClassName is required for the kubernetes backend: sandboxes run only under a sandboxing " +
        "RuntimeClass (gvisor on GKE Sandbox), never the node's default runtime",
    );
  else if (!DNS1123_SUBDOMAIN.test(args.runtimeClassName) || args.runtimeClassName.length > 253)
    problems.push(`runtimeClassName ${JSON.stringify(args.runtimeClassName)} is not a RuntimeClass name`);
  if (!isDns1123Label(args.egressProxy.namespace))
    problems.push(
      `egressProxy.namespace ${JSON.stringify(args.egressProxy.namespace)} is not a namespace name`,
    );
  if (Object.keys(args.egressProxy.podLabels).length === 0)
    problems.push("egressProxy.podLabels must select the proxy's Pods (at least one label)");
  if (!Number.isInteger(args.egressProxy.port) || args.egressProxy.port < 1 || args.egressProxy.port > 65535)
    problems.push(`egressProxy.port ${args.egressProxy.port} is not a port`);
  if (args.egressProxy.address === "") problems.push("egressProxy.address is required");
  if (!STORAGE_QUANTITY.test(args.homeSize))
    problems.push(`homeSize ${JSON.stringify(args.homeSize)} is not a size such as 10Gi`);
  if (args.storageClassName !== undefined && !DNS1123_SUBDOMAIN.test(args.storageClassName))
    problems.push(`storageClassName ${JSON.stringify(args.storageClassName)} is not a StorageClass name`);
  return problems;
}

/**
 * One tenant on a Kubernetes cluster (ARCHITECTURE decision 11): its own namespace (Pod Security
 * `restricted` enforced), a quota, a claim for `/home/agent`, a service account bound to the tenant's GSA by
 * Workload Identity (no key, no token mounted), a default-deny NetworkPolicy whose only egress is the
 * platform's proxy, and the sandbox as a one-replica StatefulSet under the sandboxing RuntimeClass. Every
 * Kubernetes object goes through this stack's own provider, built from the kubeconfig it is given.
 */
export class KubernetesTenant extends pulumi.ComponentResource {
  public readonly namespace: pulumi.Output<string>;
  public readonly podName: pulumi.Output<string>;
  public readonly homeClaim: pulumi.Output<string>;
  public readonly serviceAccountName: pulumi.Output<string>;
  public readonly running: pulumi.Output<boolean>;

  constructor(name: string, args: KubernetesTenantArgs, opts?: pulumi.ComponentResourceOptions) {
    super("sandbox:tenant:KubernetesTenant", name, {}, opts);
    const problems = validateKubernetesTenantArgs(args);
    if (problems.length > 0) throw new pulumi.ResourceError(problems.join("; "), this);
    const names = kubernetesTenantNames(args.projectId);
    const labels = Object.fromEntries(
      Object.entries(args.labels).map(([key, value]) => [key, labelValue(value)]),
    );
    // The originals (an owner id may be an e-mail) where any string fits.
    const annotations = Object.fromEntries(
      Object.entries(args.labels).filter(([key, value]) => labels[key] !== value),
    );
    const metadata = (objectName: string, namespace?: pulumi.Input<string>) => ({
      name: objectName,
      ...(namespace === undefined ? {} : { namespace }),
      labels,
      annotations,
    });

    const provider = new k8s.Provider(
      `${name}-provider`,
      {
        kubeconfig: pulumi.secret(args.kubeconfig!),
        // Server-side apply: the API server merges and validates, and field managers show who set what.
        enableServerSideApply: true,
      },
      { parent: this },
    );
    const child = { parent: this, provider };
    const namespace = new k8s.core.v1.Namespace(
      `${name}-namespace`,
      {
        metadata: {
          ...metadata(names.namespace),
          labels: {
            ...labels,
            "pod-security.kubernetes.io/enforce": POD_SECURITY_LEVEL,
            "pod-security.kubernetes.io/enforce-version": "latest",
          },
        },
      },
      child,
    );
    const ns = namespace.metadata.name;
    const quota = new k8s.core.v1.ResourceQuota(
      `${name}-quota`,
      {
        metadata: metadata(names.quota, ns),
        spec: {
          // One sandbox Pod, one claim: the StatefulSet deletes its Pod before making the next one.
          hard: {
            pods: "1",
            persistentvolumeclaims: "1",
            "requests.storage": args.homeSize,
            "limits.cpu": sandboxResources(args.limits).limits.cpu,
            "limits.memory": sandboxResources(args.limits).limits.memory,
          },
        },
      },
      child,
    );
    const home = new k8s.core.v1.PersistentVolumeClaim(
      `${name}-home`,
      {
        metadata: metadata(names.homeClaim, ns),
        spec: {
          accessModes: ["ReadWriteOnce"],
          resources: { requests: { storage: args.homeSize } },
          ...(args.storageClassName === undefined ? {} : { storageClassName: args.storageClassName }),
        },
      },
      { ...child, dependsOn: [quota] },
    );
    const serviceAccount = new k8s.core.v1.ServiceAccount(
      `${name}-ksa`,
      {
        metadata: {
          ...metadata(names.serviceAccount, ns),
          annotations: {
            ...annotations,
            [WORKLOAD_IDENTITY_ANNOTATION]: args.workloadIdentity.serviceAccountEmail,
          },
        },
        automountServiceAccountToken: false,
      },
      child,
    );
    const { project, serviceAccountEmail } = args.workloadIdentity;
    new gcp.serviceaccount.IAMMember(
      `${name}-workload-identity`,
      {
        serviceAccountId: pulumi.interpolate`projects/${project}/serviceAccounts/${serviceAccountEmail}`,
        role: WORKLOAD_IDENTITY_USER_ROLE,
        member: pulumi.interpolate`serviceAccount:${project}.svc.id.goog[${ns}/${serviceAccount.metadata.name}]`,
      },
      { parent: this },
    );
    const networkPolicy = new k8s.networking.v1.NetworkPolicy(
      `${name}-egress`,
      { metadata: metadata(names.networkPolicy, ns), spec: sandboxNetworkPolicySpec(args.egressProxy) },
      child,
    );

    const proxy = `http://${args.egressProxy.address}:${args.egressProxy.port}`;
    const selector = {
      [LABELS.tenant]: labels[LABELS.tenant] ?? dns1123Label(args.projectId),
      app: "sandbox",
    };
    const statefulSet = new k8s.apps.v1.StatefulSet(
      `${name}-sandbox`,
      {
        metadata: metadata(names.statefulSet, ns),
        spec: {
          replicas: args.running ? 1 : 0,
          serviceName: names.statefulSet,
          selector: { matchLabels: selector },
          template: {
            metadata: { labels: { ...labels, ...selector }, annotations },
            spec: {
              runtimeClassName: args.runtimeClassName!,
              serviceAccountName: serviceAccount.metadata.name,
              automountServiceAccountToken: false,
              // No Service addresses of the cluster in the environment.
              enableServiceLinks: false,
              securityContext: sandboxPodSecurityContext(),
              // Without DNS egress a lookup must fail at once, as in the container backend (`--dns 127.0.0.1`).
              ...(proxyNeedsDns(args.egressProxy)
                ? { dnsPolicy: "ClusterFirst" }
                : { dnsPolicy: "None", dnsConfig: { nameservers: ["127.0.0.1"] } }),
              containers: [
                {
                  name: names.container,
                  image: args.image,
                  env: Object.entries({
                    ...args.env,
                    PROJECT_ID: args.projectId,
                    HTTP_PROXY: proxy,
                    HTTPS_PROXY: proxy,
                    http_proxy: proxy,
                    https_proxy: proxy,
                    NO_PROXY: "localhost,127.0.0.1",
                    no_proxy: "localhost,127.0.0.1",
                  }).map(([envName, value]) => ({ name: envName, value })),
                  resources: sandboxResources(args.limits),
                  securityContext: sandboxContainerSecurityContext(),
                  // Ready when the image's supervisor runs every program (the container backend's HEALTHCHECK):
                  // the provider's await of the StatefulSet, and the runtime's reading of the Pod, mean it.
                  readinessProbe: {
                    exec: { command: ["/usr/local/sbin/sandbox-healthcheck"] },
                    periodSeconds: 30,
                    timeoutSeconds: 5,
                    failureThreshold: 3,
                  },
                  volumeMounts: [
                    { name: "home", mountPath: "/home/agent" },
                    // The backup daemon's state: root's in a container; here the Pod has no root, so the
                    // image's entrypoint runs it as the agent with this directory writable (fsGroup).
                    { name: "state", mountPath: "/var/lib/agent-sandbox" },
                  ],
                },
              ],
              volumes: [
                { name: "home", persistentVolumeClaim: { claimName: home.metadata.name } },
                { name: "state", emptyDir: { sizeLimit: "16Mi" } },
              ],
            },
          },
        },
      },
      // Egress is in place before the sandbox starts, so it never runs unfiltered.
      { ...child, dependsOn: [networkPolicy, quota] },
    );

    this.namespace = ns;
    this.podName = statefulSet.metadata.name.apply((set) => `${set}-0`);
    this.homeClaim = home.metadata.name;
    this.serviceAccountName = serviceAccount.metadata.name;
    this.running = pulumi.output(args.running);
    this.registerOutputs({
      namespace: this.namespace,
      podName: this.podName,
      homeClaim: this.homeClaim,
      serviceAccountName: this.serviceAccountName,
      running: this.running,
    });
  }
}
