// The kubernetes backend of the tenant program under Pulumi mocks (its provider plugin cannot run here):
// the objects a tenant gets, their security context, the NetworkPolicy's exact egress, the Workload
// Identity binding, the labels tying each object to its stack, the namespace names of odd project ids, and
// bad input refused before anything is declared.
import * as pulumi from "@pulumi/pulumi";
import { beforeAll, describe, expect, it } from "vitest";
import {
  GCP_PROJECT,
  KUBECONFIG,
  kubernetesSpec as tenantSpec,
  kubernetesTenantArgs,
  SECRET_SIG,
  SECRET_VALUE_SIG,
  SERVICE_CLUSTER_IP,
  setTenantMocks,
  type Registered,
} from "../helpers/tenant-mocks.js";

const registered: Registered[] = [];

type Modules = {
  Tenant: typeof import("../../components/tenant/tenant.js").Tenant;
  TenantSpec: typeof import("../../components/tenant/spec.js").TenantSpec;
  KubernetesTenant: typeof import("../../components/tenant/kubernetes/kubernetes-tenant.js").KubernetesTenant;
  names: typeof import("../../components/tenant/kubernetes/names.js");
  tenantServiceAccountEmail: typeof import("../../components/tenant/identity.js").tenantServiceAccountEmail;
  constants: typeof import("../../lib/constants.js");
  GVISOR: typeof import("../../components/gcp/sandbox-cluster.js").GVISOR;
  proxy: typeof import("../../components/tenant/kubernetes/egress-proxy.js");
};
let m: Modules;

beforeAll(async () => {
  await setTenantMocks(registered, "tenant-mock");
  m = {
    Tenant: (await import("../../components/tenant/tenant.js")).Tenant,
    TenantSpec: (await import("../../components/tenant/spec.js")).TenantSpec,
    KubernetesTenant: (await import("../../components/tenant/kubernetes/kubernetes-tenant.js"))
      .KubernetesTenant,
    names: await import("../../components/tenant/kubernetes/names.js"),
    tenantServiceAccountEmail: (await import("../../components/tenant/identity.js"))
      .tenantServiceAccountEmail,
    constants: await import("../../lib/constants.js"),
    GVISOR: (await import("../../components/gcp/sandbox-cluster.js")).GVISOR,
    proxy: await import("../../components/tenant/kubernetes/egress-proxy.js"),
  };
});

const kubernetesSpec = (overrides: Record<string, unknown> = {}) => tenantSpec("p1", overrides);

async function settle(outputs: pulumi.Output<unknown>[]) {
  await new Promise<void>((resolve) => pulumi.all(outputs).apply(() => resolve()));
  await new Promise((resolve) => setTimeout(resolve, 50));
}

/** `kubeconfig: null` gives the tenant none (then it reads the stack's config). */
async function declare(spec: Record<string, unknown>, kubeconfig: string | null = KUBECONFIG) {
  registered.length = 0;
  const tenant = new m.Tenant("tenant", { ...m.TenantSpec.parse(spec), kubeconfig: kubeconfig ?? undefined });
  await settle([tenant.urn, tenant.containerName, tenant.volumeName, tenant.backupRemote]);
  return { tenant, resources: [...registered] };
}

const unwrapSecret = (value: Record<string, unknown> | string | undefined) =>
  value && typeof value === "object" && value[SECRET_SIG] === SECRET_VALUE_SIG ? value.value : value;
const byType = (resources: Registered[], type: string) => resources.filter((r) => r.type === type);
const one = (resources: Registered[], type: string) => {
  const found = byType(resources, type);
  expect(found, type).toHaveLength(1);
  return found[0]!;
};
const K8S = {
  provider: "pulumi:providers:kubernetes",
  namespace: "kubernetes:core/v1:Namespace",
  quota: "kubernetes:core/v1:ResourceQuota",
  claim: "kubernetes:core/v1:PersistentVolumeClaim",
  serviceAccount: "kubernetes:core/v1:ServiceAccount",
  policy: "kubernetes:networking.k8s.io/v1:NetworkPolicy",
  statefulSet: "kubernetes:apps/v1:StatefulSet",
  configMap: "kubernetes:core/v1:ConfigMap",
  deployment: "kubernetes:apps/v1:Deployment",
  service: "kubernetes:core/v1:Service",
} as const;
const policyNamed = (resources: Registered[], name: string) => {
  const found = byType(resources, K8S.policy).filter((r) => r.inputs.metadata.name === name);
  expect(found, name).toHaveLength(1);
  return found[0]!;
};
const isKubernetesObject = (r: Registered) => r.type.startsWith("kubernetes:");

describe("Tenant, backend kubernetes", () => {
  let resources: Registered[];
  let tenant: InstanceType<Modules["Tenant"]>;
  beforeAll(async () => {
    ({ resources, tenant } = await declare(kubernetesSpec()));
  });

  it("declares identity and the cluster objects, and nothing of a host (no Docker, iptables, Squid)", () => {
    expect(resources.map((r) => r.type).sort()).toEqual(
      [
        "sandbox:tenant:Tenant",
        "sandbox:tenant:Identity",
        "sandbox:crypto:SshKeyPair",
        "gcp:serviceaccount/account:Account",
        "gcp:serviceaccount/iAMMember:IAMMember",
        "gcp:storage/bucketIAMMember:BucketIAMMember",
        "gcp:storage/bucketIAMMember:BucketIAMMember",
        "gcp:storage/bucketIAMMember:BucketIAMMember",
        "sandbox:tenant:KubernetesTenant",
        K8S.provider,
        K8S.namespace,
        K8S.quota,
        K8S.claim,
        K8S.serviceAccount,
        "gcp:serviceaccount/iAMMember:IAMMember",
        K8S.policy,
        K8S.policy,
        K8S.policy,
        K8S.configMap,
        K8S.deployment,
        K8S.service,
        K8S.statefulSet,
      ].sort(),
    );
    for (const r of resources) expect(r.name.startsWith("tenant")).toBe(true);
  });

  it("passes the policy pack; the same StatefulSet without its RuntimeClass is refused at preview by name", async () => {
    const { platformPolicies } = await import("../../policy/rules.js");
    const check = async (type: string, props: Record<string, unknown>) => {
      const found: string[] = [];
      for (const policy of platformPolicies)
        for (const validate of [policy.validateResource ?? []].flat())
          await validate({ type, props } as never, (message) => found.push(`${policy.name}: ${message}`));
      return found;
    };
    for (const r of resources) expect(await check(r.type, r.inputs), r.type).toEqual([]);
    const set = one(resources, K8S.statefulSet).inputs;
    const stripped = structuredClone(set);
    delete stripped.spec.template.spec.runtimeClassName;
    expect(await check(K8S.statefulSet, stripped)).toEqual([
      "tenant-workload-sandboxed: a tenant's workload runs under a sandboxed RuntimeClass (gvisor on GKE Sandbox); runtimeClassName is missing",
    ]);
  });

  it("every Kubernetes object goes through the stack's own provider, built from the given kubeconfig", () => {
    const provider = one(resources, K8S.provider);
    expect(provider.name).toBe("tenant-kubernetes-provider");
    expect(unwrapSecret(provider.inputs.kubeconfig)).toBe(KUBECONFIG);
    expect(provider.inputs.kubeconfig[SECRET_SIG]).toBe(SECRET_VALUE_SIG);
    expect(provider.inputs.enableServerSideApply).toBe("true");
    const objects = resources.filter(isKubernetesObject);
    expect(objects).toHaveLength(11);
    for (const r of objects)
      expect(r.provider, r.type).toMatch(
        /^urn:pulumi:tenant-mock::agent-sandbox-tenant::.*pulumi:providers:kubernetes::tenant-kubernetes-provider::/,
      );
  });

  it("the namespace is the tenant's, with Pod Security `restricted` enforced", () => {
    const namespace = one(resources, K8S.namespace);
    expect(namespace.inputs.metadata.name).toBe("sbx-p1");
    expect(namespace.inputs.metadata.labels).toMatchObject({
      "pod-security.kubernetes.io/enforce": "restricted",
      "pod-security.kubernetes.io/enforce-version": "latest",
    });
    for (const r of resources.filter(isKubernetesObject).filter((r) => r.type !== K8S.namespace))
      expect(r.inputs.metadata.namespace, r.type).toBe("sbx-p1");
  });

  it("labels on every object (and the Pod template) tie it to the tenant stack; the owner's e-mail is mapped", () => {
    const { LABELS, MANAGED_BY } = m.constants;
    const owner = m.names.labelValue("alice@example.com");
    expect(owner).not.toBe("alice@example.com");
    expect(m.names.isLabelValue(owner)).toBe(true);
    const expected = {
      [LABELS.tenant]: "p1",
      [LABELS.owner]: owner,
      [LABELS.stack]: "tenant-p1",
      [LABELS.managedBy]: MANAGED_BY,
    };
    for (const r of resources.filter(isKubernetesObject)) {
      expect(r.inputs.metadata.labels, r.type).toMatchObject(expected);
      // The original owner id, where any string fits.
      expect(r.inputs.metadata.annotations[LABELS.owner], r.type).toBe("alice@example.com");
    }
    const template = one(resources, K8S.statefulSet).inputs.spec.template;
    expect(template.metadata.labels).toMatchObject({ ...expected, app: "sandbox" });
    expect(one(resources, K8S.statefulSet).inputs.spec.selector.matchLabels).toEqual({
      [LABELS.tenant]: "p1",
      app: "sandbox",
    });
    const proxy = one(resources, K8S.deployment).inputs.spec;
    expect(proxy.template.metadata.labels).toMatchObject({ ...expected, app: "egress-proxy" });
    expect(proxy.selector.matchLabels).toEqual({ [LABELS.tenant]: "p1", app: "egress-proxy" });
    expect(one(resources, K8S.service).inputs.spec.selector).toEqual(proxy.selector.matchLabels);
  });

  it("the sandbox: one replica under gVisor, the same image, home on the claim, no token, no service links", () => {
    const set = one(resources, K8S.statefulSet);
    expect(set.inputs.metadata.name).toBe("sandbox");
    expect(set.inputs.spec.replicas).toBe(1);
    const pod = set.inputs.spec.template.spec;
    expect(pod.runtimeClassName).toBe("gvisor");
    expect(pod.runtimeClassName).toBe(m.GVISOR.runtimeClass);
    expect(pod.serviceAccountName).toBe("sandbox");
    expect(pod.automountServiceAccountToken).toBe(false);
    expect(pod.enableServiceLinks).toBe(false);
    expect(pod.hostNetwork).toBeUndefined();
    expect(pod.containers).toHaveLength(1);
    const [container] = pod.containers;
    expect(container.image).toBe("europe-docker.pkg.dev/gcp-project/sandboxes/sandbox:abc");
    expect(container.volumeMounts).toEqual([
      { name: "home", mountPath: "/home/agent" },
      // The backup daemon's state, writable for the agent: the image's entrypoint runs it without root here.
      { name: "state", mountPath: "/var/lib/agent-sandbox" },
    ]);
    expect(pod.volumes).toEqual([
      { name: "home", persistentVolumeClaim: { claimName: "home" } },
      { name: "state", emptyDir: { sizeLimit: "16Mi" } },
    ]);
    // Ready only when the image's supervisor runs every program, as the container backend's HEALTHCHECK says;
    // the same script works without root (sandbox-image.test's non-root run checks it as the agent).
    expect(container.readinessProbe).toEqual({
      exec: { command: ["/usr/local/sbin/sandbox-healthcheck"] },
      periodSeconds: 30,
      timeoutSeconds: 5,
      failureThreshold: 3,
    });
    const claim = one(resources, K8S.claim);
    expect(claim.inputs.metadata.name).toBe("home");
    expect(claim.inputs.spec).toEqual({
      accessModes: ["ReadWriteOnce"],
      resources: { requests: { storage: "10Gi" } },
    });
  });

  it("security context: the agent uid, non-root, every capability dropped, no escalation, RuntimeDefault seccomp", () => {
    const { AGENT_UID } = m.constants;
    const pod = one(resources, K8S.statefulSet).inputs.spec.template.spec;
    expect(pod.securityContext).toEqual({
      runAsNonRoot: true,
      runAsUser: AGENT_UID,
      runAsGroup: AGENT_UID,
      fsGroup: AGENT_UID,
      fsGroupChangePolicy: "OnRootMismatch",
      seccompProfile: { type: "RuntimeDefault" },
    });
    expect(pod.containers[0].securityContext).toEqual({
      runAsNonRoot: true,
      runAsUser: AGENT_UID,
      runAsGroup: AGENT_UID,
      allowPrivilegeEscalation: false,
      privileged: false,
      capabilities: { drop: ["ALL"] },
      seccompProfile: { type: "RuntimeDefault" },
    });
  });

  it("requests equal the spec's limits (1 CPU, 1 GiB); the quota allows one such Pod and two proxies", () => {
    const container = one(resources, K8S.statefulSet).inputs.spec.template.spec.containers[0];
    expect(container.resources).toEqual({
      requests: { cpu: "1000m", memory: "1024Mi" },
      limits: { cpu: "1000m", memory: "1024Mi" },
    });
    // The sandbox, its proxy and a second proxy while a new allowlist rolls it (100m and 128Mi each).
    expect(one(resources, K8S.quota).inputs.spec.hard).toEqual({
      pods: "3",
      persistentvolumeclaims: "1",
      "requests.storage": "10Gi",
      "limits.cpu": "1200m",
      "limits.memory": "1280Mi",
    });
  });

  it("NetworkPolicies: the namespace denies everything by default, both ways", () => {
    expect(policyNamed(resources, "default-deny").inputs.spec).toEqual({
      podSelector: {},
      policyTypes: ["Ingress", "Egress"],
      ingress: [],
      egress: [],
    });
  });

  it("the sandbox's NetworkPolicy: no ingress, egress to its own proxy's Pods on 3128 and nothing else", () => {
    const policy = policyNamed(resources, "sandbox-egress");
    expect(policy.inputs.spec).toEqual({
      podSelector: { matchLabels: { [m.constants.LABELS.tenant]: "p1", app: "sandbox" } },
      policyTypes: ["Ingress", "Egress"],
      ingress: [],
      egress: [
        {
          // No namespace selector: the peer is in the sandbox's own namespace, never another tenant's.
          to: [{ podSelector: { matchLabels: { [m.constants.LABELS.tenant]: "p1", app: "egress-proxy" } } }],
          ports: [{ protocol: "TCP", port: 3128 }],
        },
      ],
    });
    // No address block at all: the metadata server and private ranges are outside every allowed peer; no DNS.
    expect(JSON.stringify(policy.inputs)).not.toMatch(/ipBlock|169\.254|cidr|namespaceSelector|"port":53/i);
  });

  it("the proxy's NetworkPolicy: only the sandbox in; out only to public addresses on 80/443 and kube-dns on 53", () => {
    // Where no allowed name may lead: the metadata server, private and shared ranges, loopback, and the rest of
    // what Squid's own `dst` rules refuse (multicast, reserved, "this network").
    const INWARD = [
      "169.254.0.0/16",
      "10.0.0.0/8",
      "172.16.0.0/12",
      "192.168.0.0/16",
      "100.64.0.0/10",
      "127.0.0.0/8",
    ];
    const policy = policyNamed(resources, "egress-proxy");
    expect(policy.inputs.spec).toEqual({
      podSelector: { matchLabels: { [m.constants.LABELS.tenant]: "p1", app: "egress-proxy" } },
      policyTypes: ["Ingress", "Egress"],
      ingress: [
        {
          from: [{ podSelector: { matchLabels: { [m.constants.LABELS.tenant]: "p1", app: "sandbox" } } }],
          ports: [{ protocol: "TCP", port: 3128 }],
        },
      ],
      egress: [
        {
          to: [
            {
              ipBlock: {
                cidr: "0.0.0.0/0",
                except: expect.arrayContaining(INWARD),
              },
            },
          ],
          ports: [
            { protocol: "TCP", port: 80 },
            { protocol: "TCP", port: 443 },
          ],
        },
        {
          to: [
            {
              namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": "kube-system" } },
              podSelector: { matchLabels: { "k8s-app": "kube-dns" } },
            },
          ],
          ports: [
            { protocol: "UDP", port: 53 },
            { protocol: "TCP", port: 53 },
          ],
        },
      ],
    });
    expect(policy.inputs.spec.egress[0].to[0].ipBlock.except).toHaveLength(10);
  });

  it("the proxy: Squid from the tenant's image as `proxy`, read-only, under gVisor, its config from the ConfigMap", () => {
    const deployment = one(resources, K8S.deployment).inputs;
    expect(deployment.metadata.name).toBe("egress-proxy");
    expect(deployment.spec.replicas).toBe(1);
    expect(deployment.spec.strategy).toEqual({
      type: "RollingUpdate",
      rollingUpdate: { maxUnavailable: 0, maxSurge: 1 },
    });
    const pod = deployment.spec.template.spec;
    expect(pod.runtimeClassName).toBe("gvisor");
    expect(pod.automountServiceAccountToken).toBe(false);
    expect(pod.enableServiceLinks).toBe(false);
    expect(pod.serviceAccountName).toBeUndefined(); // not the sandbox's Workload Identity account
    expect(pod.securityContext).toEqual({
      runAsNonRoot: true,
      runAsUser: 13,
      runAsGroup: 13,
      seccompProfile: { type: "RuntimeDefault" },
    });
    expect(pod.containers).toHaveLength(1);
    const [squid] = pod.containers;
    expect(squid.image).toBe("europe-docker.pkg.dev/gcp-project/sandboxes/sandbox:abc");
    expect(squid.command).toEqual(["squid", "-N", "-f", "/etc/agent-sandbox-proxy/main.squid"]);
    expect(squid.ports).toEqual([{ name: "proxy", containerPort: 3128, protocol: "TCP" }]);
    expect(squid.securityContext).toEqual({
      runAsNonRoot: true,
      runAsUser: 13,
      runAsGroup: 13,
      seccompProfile: { type: "RuntimeDefault" },
      allowPrivilegeEscalation: false,
      privileged: false,
      readOnlyRootFilesystem: true,
      capabilities: { drop: ["ALL"] },
    });
    expect(squid.resources).toEqual({
      requests: { cpu: "100m", memory: "128Mi" },
      limits: { cpu: "100m", memory: "128Mi" },
    });
    expect(squid.readinessProbe).toEqual({ tcpSocket: { port: 3128 }, periodSeconds: 5 });
    expect(squid.volumeMounts).toEqual([
      { name: "config", mountPath: "/etc/agent-sandbox-proxy", readOnly: true },
    ]);
    expect(pod.volumes).toEqual([{ name: "config", configMap: { name: "egress-proxy" } }]);
    const data = one(resources, K8S.configMap).inputs.data;
    expect(deployment.spec.template.metadata.annotations["dev.agent-sandbox/egress-config-sha256"]).toBe(
      m.proxy.proxyConfigDigest(data),
    );
    const service = one(resources, K8S.service).inputs;
    expect(service.metadata.name).toBe("egress-proxy");
    expect(service.spec).toEqual({
      type: "ClusterIP",
      selector: { [m.constants.LABELS.tenant]: "p1", app: "egress-proxy" },
      ports: [{ name: "proxy", port: 3128, targetPort: "proxy", protocol: "TCP" }],
    });
  });

  it("the proxy's config is the host's Squid config with the tenant's allowlist, for a Pod", () => {
    const data = one(resources, K8S.configMap).inputs.data;
    expect(Object.keys(data).sort()).toEqual([
      "00-baseline.conf",
      "main.squid",
      "tenant-sbx-p1.conf",
      "tenant-sbx-p1.domains",
    ]);
    const main: string = data["main.squid"];
    expect(main).toMatch(/^http_port 3128$/m);
    expect(main).toMatch(/^pid_filename none$/m);
    expect(main).toMatch(/^access_log stdio:\/dev\/stdout$/m);
    expect(main).toMatch(/^cache_log \/dev\/stderr$/m);
    expect(main).toMatch(/^include \/etc\/agent-sandbox-proxy\/\*\.conf$/m);
    // The host's refusals, unchanged: IP literals, inward destinations, and the final deny.
    expect(main).toMatch(/^http_access deny CONNECT ip_literal_v4$/m);
    expect(main).toMatch(/^acl to_linklocal dst 169\.254\.0\.0\/16/m);
    expect(main.trimEnd().split("\n").at(-1)).toBe("http_access deny all");
    expect(data["tenant-sbx-p1.domains"]).toBe(".github.com\napi.anthropic.com\n");
    expect(data["tenant-sbx-p1.conf"]).toContain(
      'acl tenant_sbx_p1_domains dstdomain -n "/etc/agent-sandbox-proxy/tenant-sbx-p1.domains"',
    );
    expect(data["tenant-sbx-p1.conf"]).toContain(
      "http_access allow tenant_sbx_p1_src tenant_sbx_p1_domains !to_localhost !to_linklocal !to_private !to_host_self",
    );
  });

  it("the sandbox is pointed at the proxy's ClusterIP and gets no DNS (a lookup fails at once)", () => {
    const pod = one(resources, K8S.statefulSet).inputs.spec.template.spec;
    expect(pod.dnsPolicy).toBe("None");
    expect(pod.dnsConfig).toEqual({ nameservers: ["127.0.0.1"] });
    const env = Object.fromEntries(
      pod.containers[0].env.map((e: { name: string; value: string }) => [e.name, e.value]),
    );
    expect(env).toMatchObject({
      PROJECT_ID: "p1",
      HTTP_PROXY: `http://${SERVICE_CLUSTER_IP}:3128`,
      HTTPS_PROXY: `http://${SERVICE_CLUSTER_IP}:3128`,
      https_proxy: `http://${SERVICE_CLUSTER_IP}:3128`,
      NO_PROXY: "localhost,127.0.0.1",
      SSH_PUBLIC_KEY: "ssh-ed25519 AAAAmock agent@test",
    });
    // Backups are the runtime's, from outside (runtime/kubernetes/backup.ts): the Pod is given no remote, and
    // nothing it could use to reach the bucket.
    expect(Object.keys(env).filter((name) => /BACKUP|GCS|TOKEN|CREDENTIALS/.test(name))).toEqual([]);
  });

  it("local mode (a cluster of the operator's own): no Google identity at all; backups to the host's directory", async () => {
    const { resources: local, tenant: localTenant } = await declare(
      kubernetesSpec({ mode: "local", gcp: undefined }),
    );
    expect(local.filter((r) => r.type.startsWith("gcp:"))).toEqual([]);
    const ksa = one(local, K8S.serviceAccount);
    expect(Object.keys(ksa.inputs.metadata.annotations ?? {})).not.toContain(
      "iam.gke.io/gcp-service-account",
    );
    expect(ksa.inputs.automountServiceAccountToken).toBe(false);
    // The identity's directory under the spec's backupRoot, which the runtime's backups write to.
    const dir = one(local, m.constants.RESOURCE_TYPES.hostDirectory);
    expect(dir.inputs.path).toBe(`${m.TenantSpec.parse(kubernetesSpec()).host.backupRoot}/p1`);
    // The cluster's objects are the gcp mode's, one for one.
    const kinds = (of: Registered[]) =>
      of
        .filter(isKubernetesObject)
        .map((r) => r.type)
        .sort();
    expect(kinds(local)).toEqual(kinds(resources));
    await settle([localTenant.backupRemote]);
  });

  it("Workload Identity: the KSA names the tenant's GSA, which the KSA (and only it) may act as", () => {
    const email = m.tenantServiceAccountEmail(GCP_PROJECT, "p1");
    const ksa = one(resources, K8S.serviceAccount);
    expect(ksa.inputs.metadata.name).toBe("sandbox");
    expect(ksa.inputs.metadata.annotations["iam.gke.io/gcp-service-account"]).toBe(email);
    expect(ksa.inputs.automountServiceAccountToken).toBe(false);
    const bindings = byType(resources, "gcp:serviceaccount/iAMMember:IAMMember");
    const workloadIdentity = bindings.filter((b) => b.inputs.role === "roles/iam.workloadIdentityUser");
    expect(workloadIdentity).toHaveLength(1);
    expect(workloadIdentity[0]!.inputs).toEqual({
      serviceAccountId: `projects/${GCP_PROJECT}/serviceAccounts/${email}`,
      role: "roles/iam.workloadIdentityUser",
      member: `serviceAccount:${GCP_PROJECT}.svc.id.goog[sbx-p1/sandbox]`,
    });
    // The identity is the container backend's: the same account id, the runtime's token-creator binding.
    expect(one(resources, "gcp:serviceaccount/account:Account").inputs.accountId).toBe(email.split("@")[0]);
    expect(bindings.map((b) => b.inputs.role).sort()).toEqual([
      "roles/iam.serviceAccountTokenCreator",
      "roles/iam.workloadIdentityUser",
    ]);
  });

  it("the tenant's outputs name the Pod and the claim", async () => {
    const [containerName, volumeName, running] = await new Promise<[string, string, boolean]>((resolve) =>
      pulumi.all([tenant.containerName, tenant.volumeName, tenant.running]).apply(resolve),
    );
    expect(containerName).toBe("sbx-p1/sandbox-0");
    expect(volumeName).toBe("sbx-p1/home");
    expect(running).toBe(true);
  });
});

describe("Tenant, backend kubernetes, other settings", () => {
  it("a stopped tenant keeps its claim and scales the StatefulSet to 0", async () => {
    const { resources } = await declare(kubernetesSpec({ running: false }));
    expect(one(resources, K8S.statefulSet).inputs.spec.replicas).toBe(0);
    expect(one(resources, K8S.claim).inputs.metadata.name).toBe("home");
  });

  it("a stopped tenant stops its proxy too", async () => {
    const { resources } = await declare(kubernetesSpec({ running: false }));
    expect(one(resources, K8S.deployment).inputs.spec.replicas).toBe(0);
  });

  it("a new allowlist is a new config and a new digest, so the proxy rolls; the sandbox keeps its template", async () => {
    const before = await declare(kubernetesSpec());
    const after = await declare(kubernetesSpec({ allowlist: ["api.anthropic.com", "registry.npmjs.org"] }));
    const digest = (r: Registered[]) =>
      one(r, K8S.deployment).inputs.spec.template.metadata.annotations[
        "dev.agent-sandbox/egress-config-sha256"
      ];
    expect(digest(after.resources)).not.toBe(digest(before.resources));
    expect(one(after.resources, K8S.configMap).inputs.data["tenant-sbx-p1.domains"]).toBe(
      "api.anthropic.com\nregistry.npmjs.org\n",
    );
    expect(one(after.resources, K8S.statefulSet).inputs.spec.template).toEqual(
      one(before.resources, K8S.statefulSet).inputs.spec.template,
    );
  });

  it("another cluster DNS, home size and storage class", async () => {
    const { resources } = await declare(
      kubernetesSpec({
        kubernetes: {
          runtimeClassName: "gvisor",
          clusterDns: { namespace: "dns-system", podLabels: { app: "coredns" } },
          homeSize: "20Gi",
          storageClassName: "premium-rwo",
        },
      }),
    );
    expect(policyNamed(resources, "egress-proxy").inputs.spec.egress[1].to).toEqual([
      {
        namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": "dns-system" } },
        podSelector: { matchLabels: { app: "coredns" } },
      },
    ]);
    expect(one(resources, K8S.claim).inputs.spec).toEqual({
      accessModes: ["ReadWriteOnce"],
      resources: { requests: { storage: "20Gi" } },
      storageClassName: "premium-rwo",
    });
  });

  it("the front door's addresses (frontDoorFrom): the sandbox Pod admits them on its agent's ports, nothing else", async () => {
    const { resources } = await declare(
      kubernetesSpec({
        kubernetes: { runtimeClassName: "gvisor", frontDoorFrom: ["10.128.0.2/32", "10.196.0.0/24"] },
      }),
    );
    const policy = policyNamed(resources, "sandbox-egress").inputs.spec;
    expect(policy.ingress).toEqual([
      {
        from: [{ ipBlock: { cidr: "10.128.0.2/32" } }, { ipBlock: { cidr: "10.196.0.0/24" } }],
        ports: [{ protocol: "TCP", port: 1024, endPort: 65535 }],
      },
    ]);
    // Its egress is as without it: its own proxy's Pods on 3128, no address block.
    expect(JSON.stringify(policy.egress)).not.toMatch(/ipBlock|cidr/);
    // The namespace's default deny and the proxy's own ingress do not change.
    expect(policyNamed(resources, "default-deny").inputs.spec.ingress).toEqual([]);
    expect(JSON.stringify(policyNamed(resources, "egress-proxy").inputs.spec.ingress)).not.toMatch(/ipBlock/);
  });

  it("the kubeconfig may come from the stack's secret config instead", async () => {
    pulumi.runtime.setConfig(
      "agent-sandbox-tenant:kubeconfig",
      "apiVersion: v1\nkind: Config # from config\n",
    );
    try {
      const { resources } = await declare(kubernetesSpec(), null);
      expect(unwrapSecret(one(resources, K8S.provider).inputs.kubeconfig)).toContain("# from config");
    } finally {
      pulumi.runtime.setAllConfig({});
    }
  });

  it("the container backend is what an absent backend means, and its recorded spec gains no key", async () => {
    const container: Record<string, unknown> = { ...kubernetesSpec(), mode: "local" };
    for (const key of ["kubernetes", "backend", "gcp"]) delete container[key];
    const parsed = m.TenantSpec.parse(container);
    expect("backend" in parsed).toBe(false);
    expect("kubernetes" in parsed).toBe(false);
    const { resources } = await declare(container);
    expect(resources.filter(isKubernetesObject)).toEqual([]);
    expect(byType(resources, "sandbox:docker:Container")).toHaveLength(1);
  });
});

describe("bad input is refused with a message naming it, before anything is declared", () => {
  it("no kubeconfig given and none in the stack's config", async () => {
    await new Promise((resolve) => setTimeout(resolve, 50));
    registered.length = 0;
    expect(() => new m.Tenant("tenant", { ...m.TenantSpec.parse(kubernetesSpec()) })).toThrow(
      /kubeconfig is required for the kubernetes backend.*ambient ~\/\.kube\/config is never used/,
    );
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(registered.filter((r) => r.type !== "sandbox:tenant:Tenant")).toEqual([]);
  });

  it("no RuntimeClass name: refused by the spec, and by the component", () => {
    const result = m.TenantSpec.safeParse(kubernetesSpec({ kubernetes: { homeSize: "10Gi" } }));
    expect(result.success).toBe(false);
    expect(result.error!.issues).toContainEqual(
      expect.objectContaining({
        path: ["kubernetes", "runtimeClassName"],
        message: "is required: the RuntimeClass sandboxes run under (gvisor on GKE Sandbox)",
      }),
    );
    expect(() => component("p1", { runtimeClassName: "" })).toThrow(
      /runtimeClassName is required for the kubernetes backend/,
    );
    expect(() => component("p1", { runtimeClassName: "gVisor!" })).toThrow(
      /runtimeClassName "gVisor!" is not a RuntimeClass name/,
    );
  });

  it("backend kubernetes without its block, or with a cluster DNS that selects nothing", () => {
    const noBlock: Record<string, unknown> = kubernetesSpec();
    delete noBlock.kubernetes;
    expect(m.TenantSpec.safeParse(noBlock).error!.issues).toContainEqual(
      expect.objectContaining({ path: ["kubernetes"], message: "is required when backend is kubernetes" }),
    );
    expect(
      m.TenantSpec.safeParse(
        kubernetesSpec({
          kubernetes: { runtimeClassName: "gvisor", clusterDns: { namespace: "kube-system", podLabels: {} } },
        }),
      ).error!.issues,
    ).toContainEqual(expect.objectContaining({ path: ["kubernetes", "clusterDns", "podLabels"] }));
    const frontDoor = (frontDoorFrom: unknown) =>
      m.TenantSpec.safeParse(kubernetesSpec({ kubernetes: { runtimeClassName: "gvisor", frontDoorFrom } }))
        .error?.issues;
    expect(frontDoor(["10.128.0.0/28"])).toBeUndefined();
    expect(frontDoor(["10.128.0.1/28"])).toContainEqual(
      expect.objectContaining({
        path: ["kubernetes", "frontDoorFrom", 0],
        message: "must be an IPv4 CIDR such as 10.128.0.2/32",
      }),
    );
    expect(frontDoor(["10.128.0.2/32", "fd00::/8"])).toContainEqual(
      expect.objectContaining({ path: ["kubernetes", "frontDoorFrom", 1] }),
    );
    // Every Pod of the cluster would be past the front door.
    expect(frontDoor(["0.0.0.0/0"])).toContainEqual(
      expect.objectContaining({
        path: ["kubernetes", "frontDoorFrom", 0],
        message: "must be at most a /24 (the front door's hosts, not a network other Pods are in)",
      }),
    );
    expect(frontDoor([])).toContainEqual(expect.objectContaining({ path: ["kubernetes", "frontDoorFrom"] }));
  });

  it("an allowlist entry the proxy cannot take: refused naming it, nothing declared", () => {
    expect(() => component("p1", { allowlist: ["api.anthropic.com", "10.0.0.1"] })).toThrow(
      /allowlist entry "10\.0\.0\.1": must be a host name like api\.example\.com/,
    );
    expect(() => component("p1", { allowlist: ["*.example.com"] })).toThrow(
      /allowlist entry "\*\.example\.com"/,
    );
    expect(() => component("p1", { allowlist: [] })).toThrow(/needs at least one domain/);
    expect(() =>
      component("p1", { clusterDns: { namespace: "Kube_System", podLabels: { a: "b" } } }),
    ).toThrow(/clusterDns\.namespace "Kube_System" is not a namespace name/);
    expect(() => component("p1", { frontDoorFrom: ["10.0.0.300/32"] })).toThrow(
      /frontDoorFrom "10\.0\.0\.300\/32" is not an IPv4 CIDR such as 10\.128\.0\.2\/32/,
    );
    expect(() => component("p1", { frontDoorFrom: [] })).toThrow(/frontDoorFrom must name at least one/);
    expect(() => component("p1", { frontDoorFrom: ["10.0.0.0/8"] })).toThrow(
      /frontDoorFrom "10\.0\.0\.0\/8" is wider than a \/24/,
    );
  });
});

/** The component on its own, for project ids the API would never make (older or imported tenants). */
function component(projectId: string, overrides: Record<string, unknown> = {}) {
  return new m.KubernetesTenant(`k-${projectId.length}`, {
    ...kubernetesTenantArgs(projectId, { [m.constants.LABELS.tenant]: projectId }),
    ...overrides,
  });
}

describe("names of odd project ids map to valid Kubernetes names, never rejected", () => {
  const odd = [
    "p1",
    "Team_Alpha.Prod",
    "UPPER",
    "-leading-and-trailing-",
    "a".repeat(200),
    "проект",
    "",
    "x",
    "dots.and_underscores__and  spaces",
    "9starts-with-digit",
  ];

  it.each(odd)("%j → a DNS-1123 label of at most 63 characters", (projectId) => {
    const label = m.names.dns1123Label(projectId, "sbx-");
    expect(label).toMatch(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/);
    expect(label.length).toBeLessThanOrEqual(63);
    const value = m.names.labelValue(projectId);
    expect(m.names.isLabelValue(value)).toBe(true);
  });

  it("valid ids are kept as they are; ids that map alike still get distinct names", () => {
    expect(m.names.kubernetesTenantNames("p1").namespace).toBe("sbx-p1");
    expect(m.names.kubernetesTenantNames("a".repeat(40)).namespace).toBe(`sbx-${"a".repeat(40)}`);
    const mapped = ["a_b", "a.b", "A-B", "a b"].map((id) => m.names.dns1123Label(id, "sbx-"));
    expect(new Set(mapped).size).toBe(4);
    for (const name of mapped) expect(name).toMatch(/^sbx-a-b-[0-9a-f]{8}$/);
    // Nothing of the id survives: the prefix and the digest, without a doubled '-'.
    expect(m.names.dns1123Label("проект", "sbx-")).toMatch(/^sbx-[0-9a-f]{8}$/);
  });

  it("a seeded sweep of random strings always maps to valid names", () => {
    let seed = 20;
    const next = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31);
    for (let i = 0; i < 2000; i++) {
      const s = Array.from({ length: next() % 90 }, () => String.fromCharCode(32 + (next() % 400))).join("");
      expect(m.names.isDns1123Label(m.names.dns1123Label(s, "sbx-")), JSON.stringify(s)).toBe(true);
      expect(m.names.isLabelValue(m.names.labelValue(s)), JSON.stringify(s)).toBe(true);
    }
  });

  it("the component puts an odd id's objects in its mapped namespace, with a mapped tenant label", async () => {
    registered.length = 0;
    const tenant = component("Team_Alpha.Prod");
    await settle([tenant.urn, tenant.namespace, tenant.podName]);
    const expectedNamespace = m.names.dns1123Label("Team_Alpha.Prod", "sbx-");
    const namespace = one([...registered], K8S.namespace);
    expect(namespace.inputs.metadata.name).toBe(expectedNamespace);
    const set = one([...registered], K8S.statefulSet);
    expect(set.inputs.metadata.namespace).toBe(expectedNamespace);
    expect(set.inputs.spec.selector.matchLabels[m.constants.LABELS.tenant]).toBe("Team_Alpha.Prod");
    expect(set.inputs.spec.template.spec.containers[0].resources.limits).toEqual({
      cpu: "500m",
      memory: "2048Mi",
    });
    const member = one([...registered], "gcp:serviceaccount/iAMMember:IAMMember").inputs.member;
    expect(member).toBe(`serviceAccount:${GCP_PROJECT}.svc.id.goog[${expectedNamespace}/sandbox]`);
  });
});
