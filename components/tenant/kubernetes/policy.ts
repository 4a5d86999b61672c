import { isIPv4 } from "node:net";
import { AGENT_UID } from "../../../lib/constants.js";

/**
 * The platform's egress proxy as the tenant program sees it: a Service in a platform namespace. Network
 * policies select Pods, not Services, so the rule names the proxy's Pods (namespace + labels) and the port
 * they listen on; the sandbox is pointed at `address:port`. The policy is evaluated after the Service's
 * virtual IP is translated to a Pod's, on both GKE dataplanes (kube-proxy/Calico and Dataplane V2).
 */
export interface EgressProxyTarget {
  /** The platform namespace the proxy runs in (matched by its immutable `kubernetes.io/metadata.name`). */
  readonly namespace: string;
  /** Labels of the proxy's Pods. */
  readonly podLabels: Readonly<Record<string, string>>;
  /** The port the proxy's Pods listen on (the Service's target port). */
  readonly port: number;
  /**
   * Where the sandbox sends its requests: the Service's ClusterIP (no DNS needed, none allowed) or its DNS
   * name (then, and only then, the sandbox may ask the cluster's DNS on port 53).
   */
  readonly address: string;
}

/** The cluster DNS the sandbox may ask when the proxy is named by a DNS name (GKE's kube-dns). */
export const CLUSTER_DNS = {
  namespace: "kube-system",
  podLabels: { "k8s-app": "kube-dns" },
} as const;

/** Whether the sandbox needs DNS at all: only to resolve the proxy's name. */
export const proxyNeedsDns = (proxy: EgressProxyTarget) => !isIPv4(proxy.address);

const inNamespace = (namespace: string, podLabels: Readonly<Record<string, string>>) => ({
  namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": namespace } },
  podSelector: { matchLabels: { ...podLabels } },
});

/**
 * The spec of the tenant namespace's one NetworkPolicy: every Pod of the namespace, no ingress at all (the
 * terminal attaches by exec through the API server, not over the Pod network), egress to the proxy's Pods
 * on its port and nothing else. No `ipBlock` appears: the metadata server (169.254.169.254), the cluster's
 * private ranges, the node and the internet are all outside the only peers allowed. DNS is allowed to the
 * cluster's DNS Pods on 53 only when the proxy is named by a DNS name: a resolver that forwards upstream is
 * an exfiltration channel (queries carry data), so a ClusterIP address is the default and needs none.
 */
export function sandboxNetworkPolicySpec(proxy: EgressProxyTarget) {
  const egress: object[] = [
    { to: [inNamespace(proxy.namespace, proxy.podLabels)], ports: [{ protocol: "TCP", port: proxy.port }] },
  ];
  if (proxyNeedsDns(proxy))
    egress.push({
      to: [inNamespace(CLUSTER_DNS.namespace, CLUSTER_DNS.podLabels)],
      ports: [
        { protocol: "UDP", port: 53 },
        { protocol: "TCP", port: 53 },
      ],
    });
  return { podSelector: {}, policyTypes: ["Ingress", "Egress"], ingress: [], egress };
}

/** The Pod-level security context: the image's agent user, never root, the runtime's seccomp profile. */
export function sandboxPodSecurityContext() {
  return {
    runAsNonRoot: true,
    runAsUser: AGENT_UID,
    runAsGroup: AGENT_UID,
    // The home claim's files belong to the agent's group; only relabel when the root's owner is wrong.
    fsGroup: AGENT_UID,
    fsGroupChangePolicy: "OnRootMismatch",
    seccompProfile: { type: "RuntimeDefault" },
  };
}

/** The sandbox container's security context: what the namespace's `restricted` Pod Security level demands. */
export function sandboxContainerSecurityContext() {
  return {
    runAsNonRoot: true,
    runAsUser: AGENT_UID,
    runAsGroup: AGENT_UID,
    allowPrivilegeEscalation: false,
    privileged: false,
    capabilities: { drop: ["ALL"] },
    seccompProfile: { type: "RuntimeDefault" },
  };
}

/** Requests equal to limits (Guaranteed QoS): a sandbox is never the first evicted under node pressure. */
export function sandboxResources(limits: { readonly memoryMiB: number; readonly cpus: number }) {
  const amounts = { cpu: `${Math.round(limits.cpus * 1000)}m`, memory: `${limits.memoryMiB}Mi` };
  return { requests: { ...amounts }, limits: { ...amounts } };
}
