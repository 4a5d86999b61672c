import { createHash } from "node:crypto";
import { renderHostConfig, renderSquidBaselineFragment } from "../../../lib/host/render.js";
import { SquidTenantInputs, squidTenantFiles } from "../../../provider/resources/squid-tenant.js";
import { validateTenantEgressArgs } from "../egress.js";

/**
 * A kubernetes tenant's own egress proxy: Squid in the tenant's namespace, run from the tenant's
 * image (which has Squid) as Debian's `proxy` user, with the same base config the host's Squid renders
 * (host-config/squid/squid.conf: never an open proxy, IP literals and inward destinations refused) and the
 * same tenant fragment, so an allowlist means on a cluster exactly what it means on a host. One proxy per
 * tenant keeps every tenant its own stack: an allowlist change is an update of that stack alone (the
 * config's digest rolls the Deployment), and one tenant's traffic never queues behind another's.
 */
export const EGRESS_PROXY = {
  /** The ConfigMap, Deployment, Service and NetworkPolicy names in the tenant's namespace. */
  name: "egress-proxy",
  port: 3128,
  /** Debian's `proxy` user and group in the image: Squid needs no root and gets none. */
  uid: 13,
  /** Where the ConfigMap is mounted; the tenant fragments are its `*.conf` files. */
  configDir: "/etc/agent-sandbox-proxy",
  /** Not `*.conf`: the base config's include glob must not match the base config itself. */
  mainFile: "main.squid",
  /** Requests equal to limits; Squid with no disk cache and 8 MB of memory cache needs little. */
  cpuMilli: 100,
  memoryMiB: 128,
  /** The label the proxy's Pods carry besides the tenant's (the sandbox's carry `app: sandbox`). */
  app: "egress-proxy",
  /** The annotation of the Pod template holding the config's digest: a new allowlist rolls the proxy. */
  configDigestAnnotation: "dev.agent-sandbox/egress-config-sha256",
} as const;

/** The cluster DNS the proxy asks (GKE's kube-dns); the sandbox asks none. */
export interface ClusterDns {
  readonly namespace: string;
  readonly podLabels: Readonly<Record<string, string>>;
}

export const DEFAULT_CLUSTER_DNS: ClusterDns = {
  namespace: "kube-system",
  podLabels: { "k8s-app": "kube-dns" },
};

/**
 * Where no allowed name may lead, refused by the proxy's NetworkPolicy as well as by Squid's own `dst` rules:
 * private, shared, link-local (the metadata server) and loopback ranges, "this network", multicast and
 * reserved. The cluster's Pod, Service and node ranges are private on GKE, so they are in here too.
 */
export const PROXY_EGRESS_EXCEPT = [
  "0.0.0.0/8",
  "10.0.0.0/8",
  "100.64.0.0/10",
  "127.0.0.0/8",
  "169.254.0.0/16",
  "172.16.0.0/12",
  "192.0.0.0/24",
  "192.168.0.0/16",
  "224.0.0.0/4",
  "240.0.0.0/4",
] as const;

/** The ports an allowed name is reached on (squid.conf's `Safe_ports`). */
export const PROXY_UPSTREAM_PORTS = [80, 443] as const;

/** Problems with a tenant's allowlist for its proxy, worded as the host backend words them. */
export function validateProxyAllowlist(allowlist: readonly string[]): string[] {
  return validateTenantEgressArgs({ allowlist });
}

/**
 * The proxy's ConfigMap data: the base config rendered for a Pod (its port, no pid file, the access log on
 * stdout and the cache log on stderr for the cluster's logging, the Pod's `/etc/hosts`), the baseline
 * fragment, and the tenant's fragment and domain list. The fragment's source is any address: the proxy's
 * NetworkPolicy admits only the tenant's sandbox Pod, so there is no other client to tell apart.
 */
export function tenantProxyConfig(tenantId: string, allowlist: readonly string[]): Record<string, string> {
  const problems = validateProxyAllowlist(allowlist);
  if (problems.length > 0) throw new Error(problems.join("; "));
  const tenant = squidTenantFiles({
    tenantId,
    subnet: "0.0.0.0/0",
    domains: SquidTenantInputs.shape.domains.parse(allowlist),
    configFile: `${EGRESS_PROXY.configDir}/${EGRESS_PROXY.mainFile}`,
    fragmentsDir: EGRESS_PROXY.configDir,
  });
  const main = renderHostConfig("squid/squid.conf", {
    port: EGRESS_PROXY.port,
    // One tenant's proxy, rolled (not reconfigured) on a change: no other tenant's connection to keep open.
    workers: 1,
    pidFile: "none",
    cacheLog: "/dev/stderr",
    accessLog: "stdio:/dev/stdout",
    fragmentsDir: EGRESS_PROXY.configDir,
    hostsFile: "/etc/hosts",
    // No host of the platform's is near the Pod: loopback (refused anyway) stands in, as on a host with none.
    hostAddresses: "127.0.0.1",
  });
  const base = (file: string) => file.slice(EGRESS_PROXY.configDir.length + 1);
  return {
    [EGRESS_PROXY.mainFile]: main,
    "00-baseline.conf": renderSquidBaselineFragment(),
    [base(tenant.fragment)]: tenant.fragmentText,
    [base(tenant.domainsFile)]: tenant.domainsText,
  };
}

/** The digest of the proxy's config, in its Pod template so a change rolls the Deployment. */
export function proxyConfigDigest(data: Readonly<Record<string, string>>): string {
  const hash = createHash("sha256");
  for (const key of Object.keys(data).sort()) hash.update(`${key}\0${data[key]}\0`);
  return hash.digest("hex");
}

const dnsPorts = [
  { protocol: "UDP", port: 53 },
  { protocol: "TCP", port: 53 },
];

/**
 * The proxy's NetworkPolicy: ingress only from the tenant's sandbox Pod on the proxy's port; egress to public
 * addresses on 80 and 443 only, and to the cluster's DNS Pods on 53 (Squid resolves the allowed names).
 */
export function proxyNetworkPolicySpec(
  proxySelector: Readonly<Record<string, string>>,
  sandboxSelector: Readonly<Record<string, string>>,
  dns: ClusterDns,
) {
  return {
    podSelector: { matchLabels: { ...proxySelector } },
    policyTypes: ["Ingress", "Egress"],
    ingress: [
      {
        from: [{ podSelector: { matchLabels: { ...sandboxSelector } } }],
        ports: [{ protocol: "TCP", port: EGRESS_PROXY.port }],
      },
    ],
    egress: [
      {
        to: [{ ipBlock: { cidr: "0.0.0.0/0", except: [...PROXY_EGRESS_EXCEPT] } }],
        ports: PROXY_UPSTREAM_PORTS.map((port) => ({ protocol: "TCP", port })),
      },
      {
        to: [
          {
            namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": dns.namespace } },
            podSelector: { matchLabels: { ...dns.podLabels } },
          },
        ],
        ports: dnsPorts,
      },
    ],
  };
}

/** Requests equal to limits (Guaranteed QoS), as the sandbox's. */
export function proxyResources() {
  const amounts = { cpu: `${EGRESS_PROXY.cpuMilli}m`, memory: `${EGRESS_PROXY.memoryMiB}Mi` };
  return { requests: { ...amounts }, limits: { ...amounts } };
}

/** The proxy's Pod security context: Debian's `proxy` user, never root, the runtime's seccomp profile. */
export function proxyPodSecurityContext() {
  return {
    runAsNonRoot: true,
    runAsUser: EGRESS_PROXY.uid,
    runAsGroup: EGRESS_PROXY.uid,
    seccompProfile: { type: "RuntimeDefault" },
  };
}

/** The proxy container's: nothing added, everything dropped, and a read-only root (Squid writes nothing). */
export function proxyContainerSecurityContext() {
  return {
    ...proxyPodSecurityContext(),
    allowPrivilegeEscalation: false,
    privileged: false,
    readOnlyRootFilesystem: true,
    capabilities: { drop: ["ALL"] },
  };
}
