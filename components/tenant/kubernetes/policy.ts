import { AGENT_UID } from "../../../lib/constants.js";
import { EGRESS_PROXY } from "./egress-proxy.js";

/**
 * The spec of the sandbox's NetworkPolicy: the sandbox Pod, no ingress (the terminal attaches by exec through
 * the API server, not over the Pod network) but from the platform's front door where it is configured
 * (`frontDoorFrom`: the host's address as the Pods see it, on the agent's ports, 1024 and up, where its dev
 * servers listen; the front door lets a request through only with the owner's cookie), egress to the
 * tenant's own proxy Pods on the proxy's port and nothing else. No egress `ipBlock` appears: the metadata
 * server (169.254.169.254), the cluster's private ranges, the node, other tenants and the internet are all
 * outside the only peer allowed. No DNS either: the sandbox reaches its proxy by the Service's ClusterIP, and
 * a resolver that forwards upstream is an exfiltration channel (queries carry data), so a lookup fails at
 * once, as in the container backend.
 */
export function sandboxNetworkPolicySpec(
  sandboxSelector: Readonly<Record<string, string>>,
  proxySelector: Readonly<Record<string, string>>,
  frontDoorFrom?: readonly string[],
) {
  return {
    podSelector: { matchLabels: { ...sandboxSelector } },
    policyTypes: ["Ingress", "Egress"],
    ingress: frontDoorFrom?.length
      ? [
          {
            from: frontDoorFrom.map((cidr) => ({ ipBlock: { cidr } })),
            ports: [{ protocol: "TCP", port: 1024, endPort: 65535 }],
          },
        ]
      : [],
    egress: [
      {
        to: [{ podSelector: { matchLabels: { ...proxySelector } } }],
        ports: [{ protocol: "TCP", port: EGRESS_PROXY.port }],
      },
    ],
  };
}

/**
 * The namespace's default deny: every Pod, no ingress, no egress. Network policies add up, so each Pod gets
 * exactly what its own policy allows (the sandbox's and the proxy's) and a Pod that none selects gets nothing.
 */
export function defaultDenyPolicySpec() {
  return { podSelector: {}, policyTypes: ["Ingress", "Egress"], ingress: [], egress: [] };
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

/**
 * The namespace's quota: the sandbox Pod and its proxy, plus one more proxy while a new allowlist rolls it
 * (the StatefulSet deletes its Pod before making the next one, so the sandbox never needs two); one claim.
 */
export function namespaceQuota(
  limits: { readonly memoryMiB: number; readonly cpus: number },
  homeSize: string,
) {
  const proxies = 2;
  return {
    pods: String(1 + proxies),
    persistentvolumeclaims: "1",
    "requests.storage": homeSize,
    "limits.cpu": `${Math.round(limits.cpus * 1000) + proxies * EGRESS_PROXY.cpuMilli}m`,
    "limits.memory": `${limits.memoryMiB + proxies * EGRESS_PROXY.memoryMiB}Mi`,
  };
}

/** Requests equal to limits (Guaranteed QoS): a sandbox is never the first evicted under node pressure. */
export function sandboxResources(limits: { readonly memoryMiB: number; readonly cpus: number }) {
  const amounts = { cpu: `${Math.round(limits.cpus * 1000)}m`, memory: `${limits.memoryMiB}Mi` };
  return { requests: { ...amounts }, limits: { ...amounts } };
}
