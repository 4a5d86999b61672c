// Deep imports: the packages' indexes would bring 2,800 declaration files into every check of the tenant
// program (stacks/tenant/version.ts), for the resources used here.
import * as gcpServiceAccount from "@pulumi/gcp/serviceaccount/index.js";
import * as appsV1 from "@pulumi/kubernetes/apps/v1/index.js";
import * as coreV1 from "@pulumi/kubernetes/core/v1/index.js";
import * as networkingV1 from "@pulumi/kubernetes/networking/v1/index.js";
import { Provider as KubernetesProvider } from "@pulumi/kubernetes/provider.js";
import * as pulumi from "@pulumi/pulumi";
import { LABELS } from "../../../lib/constants.js";
import { parseCidr } from "../../../lib/ipv4.js";
import { FRONT_DOOR_MIN_PREFIX } from "./spec.js";
import { dns1123Label, isDns1123Label, kubernetesTenantNames, labelValue } from "./names.js";
import {
  type ClusterDns,
  DEFAULT_CLUSTER_DNS,
  EGRESS_PROXY,
  proxyConfigDigest,
  proxyContainerSecurityContext,
  proxyNetworkPolicySpec,
  proxyPodSecurityContext,
  proxyResources,
  tenantProxyConfig,
  validateProxyAllowlist,
} from "./egress-proxy.js";
import {
  defaultDenyPolicySpec,
  namespaceQuota,
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
  /** Names the sandbox may reach through its proxy (the tenant spec's `allowlist`). */
  readonly allowlist: readonly string[];
  /** The cluster's DNS Pods, which the proxy asks (default: kube-dns in kube-system). */
  readonly clusterDns?: ClusterDns;
  /**
   * Where the platform's front door reaches the cluster's Pods from (IPv4 CIDRs): the sandbox Pod admits them
   * on its agent's ports (1024 and up), and nothing else. Absent: the sandbox Pod admits nothing at all.
   */
  readonly frontDoorFrom?: readonly string[];
  readonly homeSize: string;
  readonly storageClassName?: string;
  readonly limits: { readonly memoryMiB: number; readonly cpus: number };
  readonly running: boolean;
  /** The tenant's labels (lib/constants.ts LABELS): values that are not valid label values are mapped. */
  readonly labels: Readonly<Record<string, string>>;
  /**
   * The GCP project (its Workload Identity pool is `<project>.svc.id.goog`) and the tenant's GSA; absent on a
   * cluster without Google identities (the local target's), where the service account is bound to nothing.
   */
  readonly workloadIdentity?: {
    readonly project: string;
    readonly serviceAccountEmail: pulumi.Input<string>;
  };
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
  problems.push(...validateProxyAllowlist(args.allowlist));
  if (args.clusterDns !== undefined) {
    if (!isDns1123Label(args.clusterDns.namespace))
      problems.push(
        `clusterDns.namespace ${JSON.stringify(args.clusterDns.namespace)} is not a namespace name`,
      );
    if (Object.keys(args.clusterDns.podLabels).length === 0)
      problems.push("clusterDns.podLabels must select the cluster's DNS Pods (at least one label)");
  }
  for (const cidr of args.frontDoorFrom ?? []) {
    const parsed = parseCidr(cidr);
    if (!parsed)
      problems.push(`frontDoorFrom ${JSON.stringify(cidr)} is not an IPv4 CIDR such as 10.128.0.2/32`);
    else if (parsed.prefix < FRONT_DOOR_MIN_PREFIX)
      problems.push(
        `frontDoorFrom ${JSON.stringify(cidr)} is wider than a /${FRONT_DOOR_MIN_PREFIX} (the front door's hosts, not a network other Pods are in)`,
      );
  }
  if (args.frontDoorFrom?.length === 0)
    problems.push("frontDoorFrom must name at least one address range, or be left out (no ingress)");
  if (!STORAGE_QUANTITY.test(args.homeSize))
    problems.push(`homeSize ${JSON.stringify(args.homeSize)} is not a size such as 10Gi`);
  if (args.storageClassName !== undefined && !DNS1123_SUBDOMAIN.test(args.storageClassName))
    problems.push(`storageClassName ${JSON.stringify(args.storageClassName)} is not a StorageClass name`);
  return problems;
}

/**
 * One tenant on a Kubernetes cluster (ARCHITECTURE decision 11): its own namespace (Pod Security
 * `restricted` enforced), a quota, a claim for `/home/agent`, a service account bound to the tenant's GSA by
 * Workload Identity (no key, no token mounted), its own egress proxy (Squid with the tenant's allowlist, a
 * Deployment behind a ClusterIP Service), NetworkPolicies that deny by default and let the sandbox reach only
 * that proxy and the proxy only public addresses on 80/443 and the cluster's DNS, and the sandbox as a
 * one-replica StatefulSet under the sandboxing RuntimeClass. Every Kubernetes object goes through this
 * stack's own provider, built from the kubeconfig it is given.
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

    const provider = new KubernetesProvider(
      `${name}-provider`,
      {
        kubeconfig: pulumi.secret(args.kubeconfig!),
        // Server-side apply: the API server merges and validates, and field managers show who set what.
        enableServerSideApply: true,
      },
      { parent: this },
    );
    const child = { parent: this, provider };
    const namespace = new coreV1.Namespace(
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
    const quota = new coreV1.ResourceQuota(
      `${name}-quota`,
      {
        metadata: metadata(names.quota, ns),
        spec: {
          hard: namespaceQuota(args.limits, args.homeSize),
        },
      },
      child,
    );
    const home = new coreV1.PersistentVolumeClaim(
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
    const serviceAccount = new coreV1.ServiceAccount(
      `${name}-ksa`,
      {
        metadata: {
          ...metadata(names.serviceAccount, ns),
          annotations: {
            ...annotations,
            ...(args.workloadIdentity
              ? { [WORKLOAD_IDENTITY_ANNOTATION]: args.workloadIdentity.serviceAccountEmail }
              : {}),
          },
        },
        automountServiceAccountToken: false,
      },
      child,
    );
    if (args.workloadIdentity) {
      const { project, serviceAccountEmail } = args.workloadIdentity;
      new gcpServiceAccount.IAMMember(
        `${name}-workload-identity`,
        {
          serviceAccountId: pulumi.interpolate`projects/${project}/serviceAccounts/${serviceAccountEmail}`,
          role: WORKLOAD_IDENTITY_USER_ROLE,
          member: pulumi.interpolate`serviceAccount:${project}.svc.id.goog[${ns}/${serviceAccount.metadata.name}]`,
        },
        { parent: this },
      );
    }
    const selector = {
      [LABELS.tenant]: labels[LABELS.tenant] ?? dns1123Label(args.projectId),
      app: "sandbox",
    };
    const proxySelector = { [LABELS.tenant]: selector[LABELS.tenant], app: EGRESS_PROXY.app };
    const defaultDeny = new networkingV1.NetworkPolicy(
      `${name}-default-deny`,
      { metadata: metadata(names.defaultDeny, ns), spec: defaultDenyPolicySpec() },
      child,
    );
    const networkPolicy = new networkingV1.NetworkPolicy(
      `${name}-egress`,
      {
        metadata: metadata(names.networkPolicy, ns),
        spec: sandboxNetworkPolicySpec(selector, proxySelector, args.frontDoorFrom),
      },
      { ...child, dependsOn: [defaultDeny] },
    );
    const proxyConfig = tenantProxyConfig(names.namespace, args.allowlist);
    const proxyConfigMap = new coreV1.ConfigMap(
      `${name}-proxy-config`,
      { metadata: metadata(names.proxy, ns), data: proxyConfig },
      child,
    );
    const proxyPolicy = new networkingV1.NetworkPolicy(
      `${name}-proxy-policy`,
      {
        metadata: metadata(names.proxy, ns),
        spec: proxyNetworkPolicySpec(proxySelector, selector, args.clusterDns ?? DEFAULT_CLUSTER_DNS),
      },
      { ...child, dependsOn: [defaultDeny] },
    );
    const proxyDeployment = new appsV1.Deployment(
      `${name}-proxy`,
      {
        metadata: metadata(names.proxy, ns),
        spec: {
          // Stopped with its sandbox: a stopped tenant runs nothing.
          replicas: args.running ? 1 : 0,
          selector: { matchLabels: proxySelector },
          // A new allowlist starts the new proxy before the old one goes (the quota leaves room for both).
          strategy: { type: "RollingUpdate", rollingUpdate: { maxUnavailable: 0, maxSurge: 1 } },
          template: {
            metadata: {
              labels: { ...labels, ...proxySelector },
              annotations: {
                ...annotations,
                [EGRESS_PROXY.configDigestAnnotation]: proxyConfigDigest(proxyConfig),
              },
            },
            spec: {
              runtimeClassName: args.runtimeClassName!,
              automountServiceAccountToken: false,
              enableServiceLinks: false,
              securityContext: proxyPodSecurityContext(),
              containers: [
                {
                  name: names.proxyContainer,
                  image: args.image,
                  // The image's own Squid, in the foreground, on the tenant's config only.
                  command: ["squid", "-N", "-f", `${EGRESS_PROXY.configDir}/${EGRESS_PROXY.mainFile}`],
                  ports: [{ name: "proxy", containerPort: EGRESS_PROXY.port, protocol: "TCP" }],
                  resources: proxyResources(),
                  securityContext: proxyContainerSecurityContext(),
                  readinessProbe: { tcpSocket: { port: EGRESS_PROXY.port }, periodSeconds: 5 },
                  volumeMounts: [{ name: "config", mountPath: EGRESS_PROXY.configDir, readOnly: true }],
                },
              ],
              volumes: [{ name: "config", configMap: { name: proxyConfigMap.metadata.name } }],
            },
          },
        },
      },
      { ...child, dependsOn: [proxyPolicy, quota] },
    );
    const proxyService = new coreV1.Service(
      `${name}-proxy-service`,
      {
        metadata: metadata(names.proxy, ns),
        spec: {
          type: "ClusterIP",
          selector: proxySelector,
          ports: [{ name: "proxy", port: EGRESS_PROXY.port, targetPort: "proxy", protocol: "TCP" }],
        },
      },
      child,
    );

    // The proxy by its ClusterIP: the sandbox needs no DNS and gets none.
    const proxyUrl = pulumi.interpolate`http://${proxyService.spec.clusterIP}:${EGRESS_PROXY.port}`;
    const statefulSet = new appsV1.StatefulSet(
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
              dnsPolicy: "None",
              dnsConfig: { nameservers: ["127.0.0.1"] },
              containers: [
                {
                  name: names.container,
                  image: args.image,
                  env: Object.entries({
                    ...args.env,
                    PROJECT_ID: args.projectId,
                    HTTP_PROXY: proxyUrl,
                    HTTPS_PROXY: proxyUrl,
                    http_proxy: proxyUrl,
                    https_proxy: proxyUrl,
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
      { ...child, dependsOn: [networkPolicy, quota, proxyDeployment] },
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
