// A kubernetes tenant as the API server gets it: the tenant program rendered under Pulumi mocks (its Kubernetes
// provider cannot run here), each registered `kubernetes:<group>/<version>:<Kind>` resource turned into the
// manifest the provider would send, and the REST path it is applied at. Shared by the tests that apply them to a
// real API server (tests/integration/kubernetes-apiserver.test.ts, kubernetes-cluster.test.ts).
import * as pulumi from "@pulumi/pulumi";
import type { KubeResponse } from "./kube-apiserver.js";
import { KUBECONFIG, kubernetesSpec, SECRET_SIG, SECRET_VALUE_SIG, type Registered } from "./tenant-mocks.js";

/** A Kubernetes object as the API server takes it. */
export interface KubeObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; [key: string]: unknown };
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  [key: string]: any;
}

/** The registered inputs with secrets unwrapped: what the provider would send. */
export function plain(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(plain);
  if (value === null || typeof value !== "object") return value;
  const record = value as Record<string, unknown>;
  if (record[SECRET_SIG] === SECRET_VALUE_SIG) return plain(record.value);
  return Object.fromEntries(Object.entries(record).map(([key, inner]) => [key, plain(inner)]));
}

/**
 * The manifest of a registered `kubernetes:<group>/<version>:<Kind>` resource: apiVersion and kind from the
 * type token (group `core` is the legacy `v1`), the rest from its inputs.
 */
export function manifestOf(resource: Registered): KubeObject {
  const match = /^kubernetes:([^:/]+)\/([^:]+):([A-Za-z]+)$/.exec(resource.type);
  if (!match) throw new Error(`${resource.type} is not a Kubernetes object`);
  const [, group, version, kind] = match;
  const apiVersion = group === "core" ? version! : `${group}/${version}`;
  return { ...(plain(resource.inputs) as KubeObject), apiVersion, kind: kind! };
}

export interface Rendered {
  /** The tenant's Kubernetes objects in the order the engine registered them (after their dependencies). */
  objects: KubeObject[];
  /** `apiVersion`/`kind` as @pulumi/kubernetes set them in the inputs, to check the type-token mapping. */
  declared: { apiVersion: unknown; kind: unknown }[];
}

export async function settle(outputs: pulumi.Output<unknown>[]) {
  await new Promise<void>((resolve) => pulumi.all(outputs).apply(() => resolve()));
  await new Promise((resolve) => setTimeout(resolve, 50));
}

export function collect(registered: readonly Registered[]): Rendered {
  const resources = registered.filter((r) => r.type.startsWith("kubernetes:"));
  return {
    objects: resources.map(manifestOf),
    declared: resources.map((r) => ({ apiVersion: r.inputs.apiVersion, kind: r.inputs.kind })),
  };
}

/**
 * The whole tenant program's kubernetes backend (Tenant with a parsed spec), as the reconciler runs it, under
 * the mocks {@link setTenantMocks} set (call it first: the components are imported after it).
 */
export async function renderTenant(
  registered: Registered[],
  projectId: string,
  overrides: Record<string, unknown> = {},
): Promise<Rendered> {
  const { Tenant } = await import("../../components/tenant/tenant.js");
  const { TenantSpec } = await import("../../components/tenant/spec.js");
  registered.length = 0;
  const tenant = new Tenant(`tenant-${projectId}`, {
    ...TenantSpec.parse(kubernetesSpec(projectId, overrides)),
    kubeconfig: KUBECONFIG,
  });
  await settle([tenant.urn, tenant.containerName, tenant.volumeName]);
  return collect(registered);
}

export const PLURALS: Record<string, string> = {
  Namespace: "namespaces",
  ResourceQuota: "resourcequotas",
  PersistentVolumeClaim: "persistentvolumeclaims",
  ServiceAccount: "serviceaccounts",
  NetworkPolicy: "networkpolicies",
  StatefulSet: "statefulsets",
  Deployment: "deployments",
  ReplicaSet: "replicasets",
  ConfigMap: "configmaps",
  Service: "services",
  Pod: "pods",
  RuntimeClass: "runtimeclasses",
  ClusterRole: "clusterroles",
  ClusterRoleBinding: "clusterrolebindings",
  ValidatingAdmissionPolicy: "validatingadmissionpolicies",
  ValidatingAdmissionPolicyBinding: "validatingadmissionpolicybindings",
};

export function objectPath(o: KubeObject): string {
  const plural = PLURALS[o.kind];
  if (plural === undefined) throw new Error(`no REST path known for ${o.kind}`);
  const base = o.apiVersion.includes("/") ? `/apis/${o.apiVersion}` : `/api/${o.apiVersion}`;
  const namespace = o.metadata.namespace === undefined ? "" : `/namespaces/${o.metadata.namespace}`;
  return `${base}${namespace}/${plural}/${encodeURIComponent(o.metadata.name)}`;
}

export const describeObject = (o: KubeObject) =>
  `${o.kind} ${o.metadata.namespace ? `${o.metadata.namespace}/` : ""}${o.metadata.name}`;
export const messageOf = (response: KubeResponse) =>
  String(response.body?.message ?? JSON.stringify(response.body));
