// Issue 20: the kubernetes backend's objects against a real API server. The tenant program renders them under
// Pulumi mocks (its Kubernetes provider cannot run here), and a kube-apiserver built from Go modules, over
// Debian's etcd on loopback (tests/helpers/kube-apiserver.ts), gets each one by server-side apply with
// `dryRun=All`, as the tenant's provider would send it: every object is accepted, and broken variants are
// refused with the server's own message (Pod Security `restricted`, RuntimeClass, quantities, ports, names,
// quota). Only the cluster-scoped prerequisites and the objects a refusal depends on are created for real.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { kubernetesTenantArgs, setTenantMocks, type Registered } from "../helpers/tenant-mocks.js";
import {
  collect,
  describeObject,
  messageOf,
  objectPath,
  renderTenant as renderTenantOf,
  settle,
  type KubeObject,
  type Rendered,
} from "../helpers/tenant-manifests.js";
import { processAlive } from "../../lib/process.js";
import {
  expectedKubeVersion,
  startKubeApiserver,
  type KubeApiserver,
  type KubeResponse,
} from "../helpers/kube-apiserver.js";

const registered: Registered[] = [];

type Modules = {
  KubernetesTenant: typeof import("../../components/tenant/kubernetes/kubernetes-tenant.js").KubernetesTenant;
  names: typeof import("../../components/tenant/kubernetes/names.js");
  LABELS: typeof import("../../lib/constants.js").LABELS;
};
let m: Modules;

const renderTenant = (projectId: string, overrides: Record<string, unknown> = {}) =>
  renderTenantOf(registered, projectId, overrides);

let components = 0;
/** The component alone, for project ids the API would never make (older or imported tenants). */
async function renderComponent(projectId: string): Promise<Rendered> {
  registered.length = 0;
  const tenant = new m.KubernetesTenant(
    `odd-${++components}`,
    kubernetesTenantArgs(projectId, { [m.LABELS.tenant]: projectId, [m.LABELS.owner]: "bob@example.com" }),
  );
  await settle([tenant.urn, tenant.namespace, tenant.podName]);
  return collect(registered);
}

let api: KubeApiserver;

/** Server-side apply, as the tenant's provider does (`enableServerSideApply`); `dryRun=All` unless `real`. */
function apply(o: KubeObject, { real = false } = {}): Promise<KubeResponse> {
  const query = `fieldManager=agent-sandbox-test&force=true${real ? "" : "&dryRun=All"}`;
  return api.request("PATCH", `${objectPath(o)}?${query}`, o, "application/apply-patch+yaml");
}

/** Applies for real and fails the test, naming the object and the server's message, if it is refused. */
async function create(o: KubeObject): Promise<void> {
  const response = await apply(o, { real: true });
  expect(response.status, `${describeObject(o)}: ${messageOf(response)}`).toBeLessThan(300);
}

/** A dry-run that must be refused: the status and the server's message. */
async function refused(o: KubeObject): Promise<{ status: number; message: string }> {
  const response = await apply(o);
  expect(response.status, `${describeObject(o)} was accepted`).toBeGreaterThanOrEqual(400);
  return { status: response.status, message: messageOf(response) };
}

const ofKind = (rendered: Rendered, kind: string) => {
  const found = rendered.objects.filter((o) => o.kind === kind);
  expect(found, kind).toHaveLength(1);
  return structuredClone(found[0]!);
};

const named = (rendered: Rendered, kind: string, name: string) => {
  const found = rendered.objects.filter((o) => o.kind === kind && o.metadata.name === name);
  expect(found, `${kind} ${name}`).toHaveLength(1);
  return structuredClone(found[0]!);
};

/**
 * The Pod a workload's controller would make (no controller manager runs here): its template, named as the
 * StatefulSet's Pod (`sandbox-0`) or as one of the proxy Deployment's.
 */
function podOf(rendered: Rendered, kind: "StatefulSet" | "Deployment" = "StatefulSet"): KubeObject {
  const workload = ofKind(rendered, kind);
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: {
      ...workload.spec.template.metadata,
      name:
        kind === "StatefulSet" ? `${workload.metadata.name}-0` : `${workload.metadata.name}-0000000000-aaaaa`,
      namespace: workload.metadata.namespace,
    },
    spec: workload.spec.template.spec,
  };
}

/**
 * Applies a rendered tenant with `dryRun=All`. The namespace is then created for real: a namespaced object
 * is admitted against its namespace (NamespaceLifecycle refuses one in a namespace that does not exist, and
 * Pod Security reads the namespace's labels), and a dry-run namespace is never stored.
 */
async function applyTenant(rendered: Rendered): Promise<Map<KubeObject, KubeResponse>> {
  const namespace = rendered.objects.find((o) => o.kind === "Namespace")!;
  const responses = new Map<KubeObject, KubeResponse>();
  responses.set(namespace, await apply(namespace));
  await create(namespace);
  for (const o of rendered.objects) if (o !== namespace) responses.set(o, await apply(o));
  return responses;
}

beforeAll(async () => {
  await setTenantMocks(registered, "tenant-kubernetes-apiserver");
  m = {
    KubernetesTenant: (await import("../../components/tenant/kubernetes/kubernetes-tenant.js"))
      .KubernetesTenant,
    names: await import("../../components/tenant/kubernetes/names.js"),
    LABELS: (await import("../../lib/constants.js")).LABELS,
  };
  api = await startKubeApiserver();
  // What a GKE Sandbox cluster has: the RuntimeClass `gvisor`, handler runsc.
  await create({
    apiVersion: "node.k8s.io/v1",
    kind: "RuntimeClass",
    metadata: { name: "gvisor" },
    handler: "runsc",
  });
});

afterAll(async () => {
  if (api === undefined) return;
  const { pids } = api;
  await api.stop();
  // Neither daemon may outlive the run.
  expect(processAlive(pids.apiserver)).toBe(false);
  expect(processAlive(pids.etcd)).toBe(false);
});

describe("a real kube-apiserver (built from Go modules) over etcd, on loopback", () => {
  it("is the pinned version and serves the APIs the tenant's objects use", async () => {
    expect(api.url).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
    expect(api.version).toBe(expectedKubeVersion());
    for (const group of ["/api/v1", "/apis/apps/v1", "/apis/networking.k8s.io/v1", "/apis/node.k8s.io/v1"])
      expect((await api.request("GET", group)).status, group).toBe(200);
  });
});

describe("every object a tenant renders is accepted by server-side dry-run", () => {
  let p1: Rendered;
  let responses: Map<KubeObject, KubeResponse>;
  beforeAll(async () => {
    p1 = await renderTenant("p1");
    responses = await applyTenant(p1);
  });

  it("the rendered set is the eleven objects, with apiVersion/kind as @pulumi/kubernetes declares them", () => {
    expect(p1.objects.map((o) => `${o.apiVersion} ${o.kind} ${o.metadata.name}`).sort()).toEqual([
      "apps/v1 Deployment egress-proxy",
      "apps/v1 StatefulSet sandbox",
      "networking.k8s.io/v1 NetworkPolicy default-deny",
      "networking.k8s.io/v1 NetworkPolicy egress-proxy",
      "networking.k8s.io/v1 NetworkPolicy sandbox-egress",
      "v1 ConfigMap egress-proxy",
      "v1 Namespace sbx-p1",
      "v1 PersistentVolumeClaim home",
      "v1 ResourceQuota sandbox-quota",
      "v1 Service egress-proxy",
      "v1 ServiceAccount sandbox",
    ]);
    expect(p1.declared).toEqual(p1.objects.map(({ apiVersion, kind }) => ({ apiVersion, kind })));
  });

  it("each is accepted, comes back as the server would store it, and the dry run stored nothing", async () => {
    for (const [o, response] of responses) {
      expect(response.status, `${describeObject(o)}: ${messageOf(response)}`).toBeLessThan(300);
      expect(response.body.kind).toBe(o.kind);
      expect(response.body.metadata.name).toBe(o.metadata.name);
      // Defaults filled in by the server show the object went through its whole create path.
      expect(response.body.metadata.uid, describeObject(o)).toMatch(/^[0-9a-f-]{36}$/);
      if (o.kind !== "Namespace")
        expect((await api.request("GET", objectPath(o))).status, `${describeObject(o)} was stored`).toBe(404);
    }
  });

  it("the StatefulSet's and the proxy Deployment's Pod templates meet Pod Security `restricted`: no warning", () => {
    for (const kind of ["StatefulSet", "Deployment"]) {
      const [, response] = [...responses].find(([o]) => o.kind === kind)!;
      expect(response.warnings, kind).toEqual([]);
      expect(response.body.spec.template.spec.runtimeClassName, kind).toBe("gvisor");
    }
  });

  it("the proxy's Service gets a ClusterIP from the server (the address the sandbox is given)", () => {
    const [, response] = [...responses].find(([o]) => o.kind === "Service")!;
    expect(response.body.spec.type).toBe("ClusterIP");
    expect(response.body.spec.clusterIP).toMatch(/^10\.96\.\d+\.\d+$/);
  });

  it("the Pod the StatefulSet makes is admitted in the restricted namespace, under the real RuntimeClass", async () => {
    // Pod admission looks the service account up, so it exists for real (the rest stays a dry run).
    await create(ofKind(p1, "ServiceAccount"));
    const response = await apply(podOf(p1));
    expect(response.status, messageOf(response)).toBeLessThan(300);
    expect(response.warnings).toEqual([]);
    expect(response.body.spec.runtimeClassName).toBe("gvisor");
    expect(response.body.spec.securityContext.runAsNonRoot).toBe(true);
    // So is the proxy's (no service account named: the namespace's `default`, which the controller would make).
    await create({
      apiVersion: "v1",
      kind: "ServiceAccount",
      metadata: { name: "default", namespace: "sbx-p1" },
    });
    const proxy = await apply(podOf(p1, "Deployment"));
    expect(proxy.status, messageOf(proxy)).toBeLessThan(300);
    expect(proxy.warnings).toEqual([]);
    expect(proxy.body.spec.containers[0].securityContext.readOnlyRootFilesystem).toBe(true);
  });

  it("a tenant with another cluster DNS, a storage class and stopped is accepted too", async () => {
    const rendered = await renderTenant("p2", {
      running: false,
      kubernetes: {
        runtimeClassName: "gvisor",
        clusterDns: { namespace: "dns-system", podLabels: { app: "coredns" } },
        storageClassName: "premium-rwo",
        homeSize: "20Gi",
      },
    });
    for (const [o, response] of await applyTenant(rendered))
      expect(response.status, `${describeObject(o)}: ${messageOf(response)}`).toBeLessThan(300);
    expect(ofKind(rendered, "StatefulSet").spec.replicas).toBe(0);
    expect(ofKind(rendered, "Deployment").spec.replicas).toBe(0);
    expect(named(rendered, "NetworkPolicy", "egress-proxy").spec.egress).toHaveLength(2);
  });
});

describe("names: odd project ids map to names the server accepts; the raw ids are refused", () => {
  const odd = ["Team_Alpha.Prod", "a".repeat(200), "проект", "-leading-and-trailing-", "a_b", "a.b"].map(
    (id) => [id.length > 40 ? `"${id.slice(0, 8)}…" (${id.length} characters)` : JSON.stringify(id), id],
  );

  it.each(odd)("%s: every object of its tenant is accepted in the mapped namespace", async (_, projectId) => {
    const rendered = await renderComponent(projectId);
    const namespace = m.names.dns1123Label(projectId, "sbx-");
    expect(rendered.objects.find((o) => o.kind === "Namespace")!.metadata.name).toBe(namespace);
    for (const [o, response] of await applyTenant(rendered))
      expect(response.status, `${describeObject(o)}: ${messageOf(response)}`).toBeLessThan(300);
    expect((await api.request("GET", `/api/v1/namespaces/${namespace}`)).status).toBe(200);
  });

  it("the unmapped names are refused with the server's DNS-1123 message", async () => {
    const raw = (name: string): KubeObject => ({ apiVersion: "v1", kind: "Namespace", metadata: { name } });
    const mixed = await refused(raw("sbx-Team_Alpha.Prod"));
    expect(mixed.status).toBe(422);
    expect(mixed.message).toContain(
      `metadata.name: Invalid value: "sbx-Team_Alpha.Prod": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-'`,
    );
    const long = await refused(raw(`sbx-${"a".repeat(200)}`));
    expect(long.status).toBe(422);
    expect(long.message).toContain("must be no more than 63 characters");
  });
});

describe("broken variants are refused with the server's message", () => {
  let p1: Rendered;
  beforeAll(async () => {
    // The namespace (restricted) and the service account exist for real from the suite above; made again
    // here so this block also stands alone (server-side apply of the same object is a no-op).
    p1 = await renderTenant("p1");
    await create(ofKind(p1, "Namespace"));
    await create(ofKind(p1, "ServiceAccount"));
  });

  it("a root sandbox Pod: Pod Security `restricted` refuses runAsUser 0", async () => {
    const pod = podOf(p1);
    pod.spec.securityContext = { ...pod.spec.securityContext, runAsNonRoot: false, runAsUser: 0 };
    pod.spec.containers[0].securityContext = {
      ...pod.spec.containers[0].securityContext,
      runAsNonRoot: false,
      runAsUser: 0,
    };
    const { status, message } = await refused(pod);
    expect(status).toBe(403);
    expect(message).toContain('pods "sandbox-0" is forbidden: violates PodSecurity "restricted:latest"');
    expect(message).toContain("runAsUser=0");
    expect(message).toContain("runAsNonRoot != true");
  });

  it("a Pod adding NET_ADMIN: refused as an unrestricted capability", async () => {
    const pod = podOf(p1);
    pod.spec.containers[0].securityContext.capabilities = { drop: ["ALL"], add: ["NET_ADMIN"] };
    const { status, message } = await refused(pod);
    expect(status).toBe(403);
    expect(message).toContain('violates PodSecurity "restricted:latest": unrestricted capabilities');
    expect(message).toContain('"NET_ADMIN"');
  });

  it("the same root template in a StatefulSet is only warned about: Pod Security enforces on Pods", async () => {
    // Why the namespace's `enforce` label matters and the controller's Pod is what gets refused: a
    // workload resource passes admission with a warning (and its Pods would then fail to be created).
    const set = ofKind(p1, "StatefulSet");
    set.spec.template.spec.securityContext.runAsUser = 0;
    set.spec.template.spec.securityContext.runAsNonRoot = false;
    const response = await apply(set);
    expect(response.status, messageOf(response)).toBeLessThan(300);
    expect(response.warnings).toEqual([
      'would violate PodSecurity "restricted:latest": runAsNonRoot != true (pod must not set ' +
        "securityContext.runAsNonRoot=false), runAsUser=0 (pod must not set runAsUser=0)",
    ]);
  });

  it("a runtimeClassName that does not exist: the RuntimeClass admission plugin refuses the Pod", async () => {
    const pod = podOf(p1);
    pod.spec.runtimeClassName = "runc-unsandboxed";
    const { status, message } = await refused(pod);
    expect(status).toBe(403);
    expect(message).toContain('pod rejected: RuntimeClass "runc-unsandboxed" not found');
  });

  it("a quantity that is not one: refused in the quota and in the claim", async () => {
    const quantity =
      "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";
    const quota = ofKind(p1, "ResourceQuota");
    quota.spec.hard["limits.memory"] = "lots";
    const badQuota = await refused(quota);
    const claim = ofKind(p1, "PersistentVolumeClaim");
    claim.spec.resources.requests.storage = "10 GB";
    const badClaim = await refused(claim);
    // Server-side apply (the provider's way) reports the decoding failure as 500, not 400: a client must not
    // take it for a passing server error and retry it.
    expect([badQuota.status, badClaim.status]).toEqual([500, 500]);
    expect(badQuota.message).toBe(
      "failed to convert new object (sbx-p1/sandbox-quota; /v1, Kind=ResourceQuota) to proper version: " +
        `unable to convert unstructured object to /v1, Kind=ResourceQuota: ${quantity}`,
    );
    expect(badClaim.message).toContain(quantity);
    // A plain create answers the same mistake with 400.
    const created = await api.request(
      "POST",
      `/api/v1/namespaces/sbx-p1/persistentvolumeclaims?dryRun=All`,
      claim,
    );
    expect(created.status).toBe(400);
    expect(messageOf(created)).toBe(
      `PersistentVolumeClaim in version "v1" cannot be handled as a PersistentVolumeClaim: ${quantity}`,
    );
  });

  it("an egress port of 70000: refused by the NetworkPolicy's validation", async () => {
    const policy = named(p1, "NetworkPolicy", "sandbox-egress");
    policy.spec.egress[0].ports[0].port = 70000;
    const { status, message } = await refused(policy);
    expect(status).toBe(422);
    expect(message).toContain(
      "spec.egress[0].ports[0].port: Invalid value: 70000: must be between 1 and 65535, inclusive",
    );
  });
});

describe("the namespace's quota, for real (no controller manager runs here)", () => {
  let rendered: Rendered;
  let quotaPath: string;
  const quotaNow = async () => (await api.request("GET", quotaPath)).body;
  /** Writes the quota's status as kube-controller-manager's quota controller would. */
  const writeStatus = async (status: object) => {
    const response = await api.request("PUT", `${quotaPath}/status`, { ...(await quotaNow()), status });
    expect(response.status, messageOf(response)).toBe(200);
  };
  /**
   * A dry run refused with a message matching `expected`, once the quota admission's cache has the status just
   * written: it reads quotas through an informer, a moment behind the write (seen under load as the previous
   * status's refusal, or none).
   */
  const refusedOnceSeen = async (o: KubeObject, expected: RegExp) => {
    const deadline = Date.now() + 10_000;
    for (;;) {
      const response = await apply(o);
      const message = messageOf(response);
      if ((response.status >= 400 && expected.test(message)) || Date.now() > deadline) {
        expect(response.status, `${describeObject(o)} was accepted`).toBeGreaterThanOrEqual(400);
        return { status: response.status, message };
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  };
  const claimOf = (name: string, storage = "10Gi") => {
    const claim = ofKind(rendered, "PersistentVolumeClaim");
    claim.metadata.name = name;
    claim.spec.resources.requests.storage = storage;
    return claim;
  };
  beforeAll(async () => {
    rendered = await renderTenant("q1");
    await create(ofKind(rendered, "Namespace"));
    const quota = ofKind(rendered, "ResourceQuota");
    await create(quota);
    quotaPath = objectPath(quota);
  });

  it("until the quota controller has copied its limits into status, the quota limits nothing", async () => {
    // Admission counts against status.hard, which only the controller writes: on a real cluster this
    // window is short, but it exists between the quota's create and the claim's (the tenant creates both).
    expect((await quotaNow()).status ?? {}).toEqual({});
    const response = await apply(claimOf("home", "11Gi"));
    expect(response.status, messageOf(response)).toBeLessThan(300);
  });

  it("with the limits in status but no usage counted yet, a claim is refused", async () => {
    await writeStatus({ hard: (await quotaNow()).spec.hard });
    const { status, message } = await refusedOnceSeen(claimOf("home"), /status unknown/);
    expect(status).toBe(403);
    expect(message).toBe(
      'persistentvolumeclaims "home" is forbidden: status unknown for quota: sandbox-quota, resources: ' +
        "persistentvolumeclaims,requests.storage",
    );
  });

  it("with usage counted: a dry run is admitted and charges nothing; the real claim is charged; a second exceeds it", async () => {
    const hard = (await quotaNow()).spec.hard as Record<string, string>;
    await writeStatus({ hard, used: Object.fromEntries(Object.keys(hard).map((key) => [key, "0"])) });

    const tooBig = await refusedOnceSeen(claimOf("home", "11Gi"), /exceeded quota/);
    expect(tooBig.message).toBe(
      'persistentvolumeclaims "home" is forbidden: exceeded quota: sandbox-quota, requested: ' +
        "requests.storage=11Gi, used: requests.storage=0, limited: requests.storage=10Gi",
    );

    const dry = await apply(claimOf("home"));
    expect(dry.status, messageOf(dry)).toBeLessThan(300);
    expect((await quotaNow()).status.used).toMatchObject({
      persistentvolumeclaims: "0",
      "requests.storage": "0",
    });

    await create(claimOf("home"));
    // The admission plugin itself charges what it admits.
    expect((await quotaNow()).status.used).toMatchObject({
      persistentvolumeclaims: "1",
      "requests.storage": "10Gi",
    });

    const { status, message } = await refused(claimOf("home-2"));
    expect(status).toBe(403);
    expect(message).toBe(
      'persistentvolumeclaims "home-2" is forbidden: exceeded quota: sandbox-quota, requested: ' +
        "persistentvolumeclaims=1,requests.storage=10Gi, used: persistentvolumeclaims=1,requests.storage=10Gi, " +
        "limited: persistentvolumeclaims=1,requests.storage=10Gi",
    );
  });
});
