// The kubernetes backend of the tenant program under Pulumi mocks (its provider plugin cannot run here):
// the objects a tenant gets, their security context, the NetworkPolicy's exact egress, the Workload
// Identity binding, the labels tying each object to its stack, the namespace names of odd project ids, and
// bad input refused before anything is declared.
import * as pulumi from "@pulumi/pulumi";
import { beforeAll, describe, expect, it } from "vitest";
import {
  EGRESS_PROXY,
  GCP_PROJECT,
  KUBECONFIG,
  kubernetesSpec as tenantSpec,
  kubernetesTenantArgs,
  SECRET_SIG,
  SECRET_VALUE_SIG,
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
  };
});

const PROXY = EGRESS_PROXY;
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
} as const;
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
    expect(objects).toHaveLength(6);
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

  it("requests equal the spec's limits (1 CPU, 1 GiB), and the namespace quota allows one such Pod", () => {
    const container = one(resources, K8S.statefulSet).inputs.spec.template.spec.containers[0];
    expect(container.resources).toEqual({
      requests: { cpu: "1000m", memory: "1024Mi" },
      limits: { cpu: "1000m", memory: "1024Mi" },
    });
    expect(one(resources, K8S.quota).inputs.spec.hard).toEqual({
      pods: "1",
      persistentvolumeclaims: "1",
      "requests.storage": "10Gi",
      "limits.cpu": "1000m",
      "limits.memory": "1024Mi",
    });
  });

  it("the NetworkPolicy: default deny both ways, egress to the proxy's Pods on 3128 and nothing else", () => {
    const policy = one(resources, K8S.policy);
    expect(policy.inputs.spec).toEqual({
      podSelector: {},
      policyTypes: ["Ingress", "Egress"],
      ingress: [],
      egress: [
        {
          to: [
            {
              namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": "agent-sandbox-system" } },
              podSelector: { matchLabels: { "app.kubernetes.io/name": "egress-proxy" } },
            },
          ],
          ports: [{ protocol: "TCP", port: 3128 }],
        },
      ],
    });
    // No address block at all: the metadata server and private ranges are outside every allowed peer.
    expect(JSON.stringify(policy.inputs)).not.toMatch(/ipBlock|169\.254|cidr/i);
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
      HTTP_PROXY: "http://10.8.0.10:3128",
      HTTPS_PROXY: "http://10.8.0.10:3128",
      https_proxy: "http://10.8.0.10:3128",
      NO_PROXY: "localhost,127.0.0.1",
      SSH_PUBLIC_KEY: "ssh-ed25519 AAAAmock agent@test",
      BACKUP_REMOTE: ":gcs:agent-sandbox-data/projects/p1/workspace",
      BACKUP_INTERVAL_SECONDS: "300",
    });
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

  it("a proxy named by DNS adds exactly one rule: the cluster DNS Pods on 53, and ClusterFirst", async () => {
    const egressProxy = { ...PROXY, address: "egress-proxy.agent-sandbox-system.svc.cluster.local" };
    const { resources } = await declare(
      kubernetesSpec({
        kubernetes: {
          runtimeClassName: "gvisor",
          egressProxy,
          homeSize: "20Gi",
          storageClassName: "premium-rwo",
        },
      }),
    );
    const egress = one(resources, K8S.policy).inputs.spec.egress;
    expect(egress).toHaveLength(2);
    expect(egress[1]).toEqual({
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
    });
    const pod = one(resources, K8S.statefulSet).inputs.spec.template.spec;
    expect(pod.dnsPolicy).toBe("ClusterFirst");
    expect(pod.dnsConfig).toBeUndefined();
    expect(pod.containers[0].env).toContainEqual({
      name: "HTTPS_PROXY",
      value: "http://egress-proxy.agent-sandbox-system.svc.cluster.local:3128",
    });
    expect(one(resources, K8S.claim).inputs.spec).toEqual({
      accessModes: ["ReadWriteOnce"],
      resources: { requests: { storage: "20Gi" } },
      storageClassName: "premium-rwo",
    });
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
    const result = m.TenantSpec.safeParse(kubernetesSpec({ kubernetes: { egressProxy: PROXY } }));
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

  it("backend kubernetes without its block, or outside gcp mode", () => {
    const noBlock: Record<string, unknown> = kubernetesSpec();
    delete noBlock.kubernetes;
    expect(m.TenantSpec.safeParse(noBlock).error!.issues).toContainEqual(
      expect.objectContaining({ path: ["kubernetes"], message: "is required when backend is kubernetes" }),
    );
    expect(m.TenantSpec.safeParse(kubernetesSpec({ mode: "local" })).error!.issues).toContainEqual(
      expect.objectContaining({ path: ["mode"], message: "must be gcp when backend is kubernetes" }),
    );
    expect(
      m.TenantSpec.safeParse(
        kubernetesSpec({
          kubernetes: { runtimeClassName: "gvisor", egressProxy: { ...PROXY, podLabels: {} } },
        }),
      ).error!.issues,
    ).toContainEqual(expect.objectContaining({ path: ["kubernetes", "egressProxy", "podLabels"] }));
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
