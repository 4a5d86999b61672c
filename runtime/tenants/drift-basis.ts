// The drift pre-check's basis for a stack's Kubernetes objects (runtime/tenants/drift-precheck.ts): Pulumi's
// Kubernetes provider cannot be asked in the runtime's process, so the pre-check proves that the engine's last
// clean refresh still holds. The API server gives an object a new resourceVersion with every write to it (and a
// re-made object a new uid); an object with the uid and resourceVersion a refresh saw is the object it read.
// The basis is that, per object, with what else the refresh's verdict depends on: the checkpoint (by digest),
// the CLI, and the provider's settings from the environment (docs/tenant-stacks.md).
import { createHash } from "node:crypto";
import { pinnedPulumiVersion } from "../../lib/toolchain.js";
import { KubernetesClient } from "../kubernetes/client.js";
import { parseKubeconfig } from "../kubernetes/kubeconfig.js";
import type { DriftBasis } from "../store/drift.js";

/** An object the basis cannot be read for (the pre-check then leaves the verdict to the engine). */
export class NotVouched extends Error {}

/** One Kubernetes object of a stack's checkpoint, its secrets opened. */
export interface StackObject {
  readonly urn: string;
  /** The type token, `kubernetes:<group>/<version>:<Kind>`. */
  readonly type: string;
  /** What the engine reads it by: `<namespace>/<name>`, or `<name>`. */
  readonly id: string;
  readonly outputs: unknown;
  /** Its `pulumi:providers:kubernetes` resource, with the inputs a refresh configures it with. */
  readonly provider: { readonly urn: string; readonly inputs: Readonly<Record<string, unknown>> };
}

/**
 * The REST collection of each type a tenant stack holds (its token's group/version and kind); an object of
 * another type is left to the engine.
 */
const COLLECTIONS: Readonly<Record<string, string>> = {
  "apps/v1:Deployment": "deployments",
  "apps/v1:StatefulSet": "statefulsets",
  "core/v1:ConfigMap": "configmaps",
  "core/v1:Namespace": "namespaces",
  "core/v1:PersistentVolumeClaim": "persistentvolumeclaims",
  "core/v1:ResourceQuota": "resourcequotas",
  "core/v1:Secret": "secrets",
  "core/v1:Service": "services",
  "core/v1:ServiceAccount": "serviceaccounts",
  "networking.k8s.io/v1:NetworkPolicy": "networkpolicies",
  "rbac.authorization.k8s.io/v1:Role": "roles",
  "rbac.authorization.k8s.io/v1:RoleBinding": "rolebindings",
};

/**
 * The API path of a stack's object: its type token's group, version and kind, its outputs' name and
 * namespace, which must be the id the engine reads it by.
 */
function objectPath(object: StackObject): string {
  const [, groupVersion = "", kind = ""] = object.type.split(":");
  const collection = COLLECTIONS[`${groupVersion}:${kind}`];
  if (!collection)
    throw new NotVouched(`${object.urn} is of a type this check does not read (${object.type})`);
  const metadata = (object.outputs as { metadata?: { name?: unknown; namespace?: unknown } } | null)
    ?.metadata;
  const { name, namespace } = metadata ?? {};
  if (typeof name !== "string" || name === "" || (namespace !== undefined && typeof namespace !== "string"))
    throw new NotVouched(`${object.urn}'s outputs name no object`);
  if (object.id !== (namespace ? `${namespace}/${name}` : name))
    throw new NotVouched(`${object.urn}'s id ${object.id} is not the object its outputs name`);
  const base = groupVersion.startsWith("core/") ? `/api/${groupVersion.slice(5)}` : `/apis/${groupVersion}`;
  const scope = namespace ? `/namespaces/${encodeURIComponent(namespace)}` : "";
  return `${base}${scope}/${collection}/${encodeURIComponent(name)}`;
}

/** Clients by the kubeconfig they were made from: a sweep's stacks share a cluster and its connections. */
const clients = new Map<string, KubernetesClient>();

/** A client of the cluster an object's provider names (its recorded kubeconfig and context). */
function clientOf(provider: StackObject["provider"]): KubernetesClient {
  const { kubeconfig, context, cluster } = provider.inputs;
  if (typeof kubeconfig !== "string") throw new NotVouched(`${provider.urn} has no kubeconfig of its own`);
  if (cluster !== undefined) throw new NotVouched(`${provider.urn} names a cluster apart from its context`);
  if (context !== undefined && typeof context !== "string")
    throw new NotVouched(`${provider.urn}'s context is not a string`);
  const id = createHash("sha256")
    .update(`${context ?? ""}\0${kubeconfig}`)
    .digest("hex");
  let client = clients.get(id);
  if (!client) {
    let access: ReturnType<typeof parseKubeconfig>;
    try {
      access = parseKubeconfig(kubeconfig, { source: `${provider.urn}'s kubeconfig`, context });
    } catch (error) {
      throw new NotVouched((error as Error).message);
    }
    client = new KubernetesClient(access, 10_000);
    // A few clusters at most; the oldest client goes first.
    if (clients.size >= 8) {
      const [oldest, old] = clients.entries().next().value!;
      clients.delete(oldest);
      old.close();
    }
    clients.set(id, client);
  }
  return client;
}

/** The provider's settings from the environment (`PULUMI_K8S_*`), which the engine's plugin would read too. */
function providerEnvironment(): string {
  const settings = Object.entries(process.env)
    .filter(([name]) => name.startsWith("PULUMI_K8S_"))
    .sort(([a], [b]) => (a < b ? -1 : 1));
  return createHash("sha256").update(JSON.stringify(settings)).digest("hex");
}

/** The stack's basis: its checkpoint's digest and each object's uid and resourceVersion as the cluster has it. */
export async function observeBasis(checkpoint: string, objects: readonly StackObject[]): Promise<DriftBasis> {
  const seen = await Promise.all(
    objects.map(async (object) => {
      const client = clientOf(object.provider);
      const apiPath = objectPath(object);
      const live = await client.get<{ metadata?: { uid?: unknown; resourceVersion?: unknown } }>(apiPath);
      if (!live) throw new NotVouched(`${object.urn} is gone from the cluster (${apiPath})`);
      const { uid, resourceVersion } = live.metadata ?? {};
      if (typeof uid !== "string" || typeof resourceVersion !== "string")
        throw new NotVouched(`${apiPath} was answered without a uid and resourceVersion`);
      return [object.urn, `${uid}/${resourceVersion}`] as const;
    }),
  );
  return {
    checkpoint,
    cli: pinnedPulumiVersion(),
    environment: providerEnvironment(),
    objects: Object.fromEntries(seen),
  };
}

/** What differs between the vouched basis and the one seen now, in words, or undefined. */
export function basisDifference(vouched: DriftBasis, seen: DriftBasis): string | undefined {
  if (vouched.checkpoint !== seen.checkpoint) return "the stack's checkpoint changed";
  if (vouched.cli !== seen.cli) return `the Pulumi CLI changed (${vouched.cli} → ${seen.cli})`;
  if (vouched.environment !== seen.environment) return "the provider's PULUMI_K8S_* settings changed";
  for (const urn of [...new Set([...Object.keys(vouched.objects), ...Object.keys(seen.objects)])].sort()) {
    const [before, now] = [vouched.objects[urn], seen.objects[urn]];
    if (before !== now) return `${urn} changed on the cluster (uid/resourceVersion ${before} → ${now})`;
  }
  return undefined;
}

/** Whether two bases are the same: the same checkpoint, CLI, provider environment and objects. */
export function sameBasis(a: DriftBasis, b: DriftBasis): boolean {
  return basisDifference(a, b) === undefined;
}
