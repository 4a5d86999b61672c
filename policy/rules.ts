/**
 * The platform's invariants as policies: pure functions of a resource's type and properties, so they are
 * unit-tested with plain objects (tests/unit/policy-pack.test.ts) and run by index.ts in `preview`.
 */
import type { ReportViolation, ResourceValidationArgs, ResourceValidationPolicy } from "@pulumi/policy";
import { LABELS, PORTS } from "../lib/constants.js";

/** Roles that grant everything of a kind on the whole project: never granted by the platform. */
export const PRIMITIVE_ROLES = ["roles/owner", "roles/editor", "roles/viewer"] as const;
/** IAM principals meaning "anyone". */
export const PUBLIC_MEMBERS = ["allUsers", "allAuthenticatedUsers"] as const;

/** What a validation reads of a resource: its type token and its properties. */
export type ResourceInput = Pick<ResourceValidationArgs, "type" | "props">;
type Props = Record<string, unknown>;

const T = {
  firewall: "gcp:compute/firewall:Firewall",
  bucket: "gcp:storage/bucket:Bucket",
  repository: "gcp:artifactregistry/repository:Repository",
} as const;

const asArray = (value: unknown): unknown[] => (Array.isArray(value) ? value : []);
const asProps = (value: unknown): Props =>
  value !== null && typeof value === "object" ? (value as Props) : {};

/** True when a firewall `allow` (protocol + optional ports) lets `port` in over TCP. */
export function allowCoversPort(allow: Props, port: number): boolean {
  const protocol = String(allow.protocol ?? "").toLowerCase();
  if (protocol !== "tcp" && protocol !== "all" && protocol !== "6") return false;
  const ports = asArray(allow.ports).map(String);
  if (ports.length === 0) return true; // no ports: every port of the protocol
  return ports.some((range) => {
    const [low, high] = range.split("-").map(Number) as [number, number?];
    return port >= low && port <= (high ?? low);
  });
}

/** Seed 000 §7.2: "Port 3128 must never be opened in GCP firewall rules". */
export function checkSquidPortClosed(resource: ResourceInput, report: ReportViolation): void {
  if (resource.type !== T.firewall) return;
  const direction = String(resource.props.direction ?? "INGRESS").toUpperCase();
  if (direction !== "INGRESS") return;
  for (const allow of asArray(resource.props.allows).map(asProps)) {
    if (allowCoversPort(allow, PORTS.squid)) {
      const ports = asArray(allow.ports).join(",") || "all ports";
      report(
        `firewall rule allows ${String(allow.protocol)} ${ports}, which opens Squid's port ${PORTS.squid}`,
      );
    }
  }
}

/** Members of any IAM grant shape: `member`, `members`, or an IAM policy document's bindings. */
function grantedMembersAndRoles(props: Props): { role: string; member: string }[] {
  const grants: { role: string; member: string }[] = [];
  const role = typeof props.role === "string" ? props.role : "";
  if (typeof props.member === "string") grants.push({ role, member: props.member });
  for (const member of asArray(props.members)) grants.push({ role, member: String(member) });
  if (typeof props.entity === "string") grants.push({ role: String(props.role ?? ""), member: props.entity });
  if (typeof props.policyData === "string") {
    try {
      const policy = JSON.parse(props.policyData) as { bindings?: { role?: string; members?: string[] }[] };
      for (const binding of policy.bindings ?? [])
        for (const member of binding.members ?? []) grants.push({ role: binding.role ?? "", member });
    } catch {
      grants.push({ role: "(unparseable policyData)", member: "(unparseable policyData)" });
    }
  }
  return grants;
}

const isIamResource = (type: string) =>
  /:(\w*IAM(Member|Binding|Policy)|\w*Iam(Member|Binding|Policy)|\w*AccessControl)$/.test(type);

/** Buckets are never public: public access prevention enforced, uniform access, no public grant. */
export function checkBucketNotPublic(resource: ResourceInput, report: ReportViolation): void {
  if (resource.type === T.bucket) {
    if (resource.props.publicAccessPrevention !== "enforced")
      report(
        `bucket publicAccessPrevention is '${String(resource.props.publicAccessPrevention)}', not 'enforced'`,
      );
    if (resource.props.uniformBucketLevelAccess !== true)
      report("bucket has no uniform bucket-level access (object ACLs could make objects public)");
    return;
  }
  if (!resource.type.startsWith("gcp:storage/") || !isIamResource(resource.type)) return;
  for (const { member } of grantedMembersAndRoles(resource.props)) {
    // Conditional forms (`allUsers` with a condition) are still public.
    if ((PUBLIC_MEMBERS as readonly string[]).includes(member.split(/[:\s]/)[0]!))
      report(`storage grant to ${member} makes the bucket public`);
  }
}

/** Buckets always have lifecycle rules, at least one of which deletes (seed 000 §9 step 2). */
export function checkBucketLifecycle(resource: ResourceInput, report: ReportViolation): void {
  if (resource.type !== T.bucket) return;
  const rules = asArray(resource.props.lifecycleRules).map(asProps);
  if (rules.length === 0) return report("bucket has no lifecycle rules");
  if (!rules.some((rule) => asProps(rule.action).type === "Delete"))
    report("bucket lifecycle rules never delete anything (deleted projects' data would be kept forever)");
}

/** No primitive role (owner/editor/viewer) in any IAM member, binding or policy. */
export function checkNoPrimitiveRoles(resource: ResourceInput, report: ReportViolation): void {
  if (!isIamResource(resource.type)) return;
  for (const { role, member } of grantedMembersAndRoles(resource.props)) {
    if ((PRIMITIVE_ROLES as readonly string[]).includes(role))
      report(
        `primitive role ${role} granted to ${member}; grant a predefined role on the narrowest resource`,
      );
  }
}

/** Artifact Registry repositories have an active cleanup policy keeping a bounded number of versions. */
export function checkRegistryCleanup(resource: ResourceInput, report: ReportViolation): void {
  if (resource.type !== T.repository) return;
  const policies = asArray(resource.props.cleanupPolicies).map(asProps);
  if (policies.length === 0) return report("repository has no cleanup policy");
  if (resource.props.cleanupPolicyDryRun === true) report("repository cleanup policies are in dry-run mode");
  const keeps = policies.some(
    (p) => p.action === "KEEP" && Number(asProps(p.mostRecentVersions).keepCount) >= 1,
  );
  const deletes = policies.some((p) => p.action === "DELETE");
  if (!keeps || !deletes)
    report("repository cleanup must KEEP the most recent versions and DELETE the rest (seed 000 §9 step 9)");
}

/** Kubernetes workload types and where their Pod spec is. */
const POD_SPEC_PATHS: Record<string, readonly string[]> = {
  "kubernetes:core/v1:Pod": ["spec"],
  "kubernetes:apps/v1:StatefulSet": ["spec", "template", "spec"],
  "kubernetes:apps/v1:Deployment": ["spec", "template", "spec"],
  "kubernetes:apps/v1:ReplicaSet": ["spec", "template", "spec"],
  "kubernetes:apps/v1:DaemonSet": ["spec", "template", "spec"],
  "kubernetes:batch/v1:Job": ["spec", "template", "spec"],
  "kubernetes:batch/v1:CronJob": ["spec", "jobTemplate", "spec", "template", "spec"],
};

/**
 * A tenant's workload on Kubernetes (labelled with its tenant, issue 20) runs sandboxed: under a RuntimeClass
 * of its own (gVisor on GKE Sandbox, never the node's runc), not on the node's network, PID or IPC namespace,
 * without the service-account token, as non-root, with no privilege, escalation or added capability and every
 * capability dropped. The tenant program declares exactly that; this refuses anything else at preview.
 */
export function checkTenantWorkloadSandboxed(resource: ResourceInput, report: ReportViolation): void {
  const path = POD_SPEC_PATHS[resource.type];
  if (!path) return;
  const labels = asProps(asProps(resource.props.metadata).labels);
  if (typeof labels[LABELS.tenant] !== "string") return;
  const pod = path.reduce<Props>((props, key) => asProps(props[key]), resource.props);
  const runtimeClass = pod.runtimeClassName;
  if (typeof runtimeClass !== "string" || runtimeClass === "" || runtimeClass === "runc")
    report(
      `a tenant's workload runs under a sandboxed RuntimeClass (gvisor on GKE Sandbox); runtimeClassName is ${runtimeClass === undefined ? "missing" : JSON.stringify(runtimeClass)}`,
    );
  for (const field of ["hostNetwork", "hostPID", "hostIPC"])
    if (pod[field] === true)
      report(`a tenant's workload does not share the node's namespaces: ${field} is true`);
  if (pod.automountServiceAccountToken !== false)
    report("a tenant's workload gets no service-account token: automountServiceAccountToken must be false");
  const podNonRoot = asProps(pod.securityContext).runAsNonRoot === true;
  for (const container of [...asArray(pod.initContainers), ...asArray(pod.containers)].map(asProps)) {
    const name = String(container.name ?? "(unnamed)");
    const context = asProps(container.securityContext);
    const capabilities = asProps(context.capabilities);
    if (context.privileged === true) report(`container ${name} is privileged`);
    if (context.allowPrivilegeEscalation !== false)
      report(`container ${name}: allowPrivilegeEscalation must be false`);
    if (asArray(capabilities.add).length > 0)
      report(`container ${name} adds capabilities ${asArray(capabilities.add).join(", ")}`);
    if (!asArray(capabilities.drop).includes("ALL")) report(`container ${name} must drop ALL capabilities`);
    if (!podNonRoot && context.runAsNonRoot !== true)
      report(`container ${name} may run as root: runAsNonRoot`);
  }
}

const policy = (
  name: string,
  description: string,
  check: (resource: ResourceInput, report: ReportViolation) => void,
): ResourceValidationPolicy => ({
  name,
  description,
  enforcementLevel: "mandatory",
  validateResource: (args, report) => check(args, report),
});

/** The pack's policies, in the order `preview` reports them. */
export const platformPolicies: ResourceValidationPolicy[] = [
  policy("squid-port-never-open", `No firewall rule opens port ${PORTS.squid} (Squid)`, checkSquidPortClosed),
  policy(
    "bucket-never-public",
    "Buckets enforce public access prevention and have no public grant",
    checkBucketNotPublic,
  ),
  policy("bucket-has-lifecycle", "Buckets have lifecycle rules that delete old data", checkBucketLifecycle),
  policy(
    "no-primitive-roles",
    "No roles/owner, roles/editor or roles/viewer in any IAM grant",
    checkNoPrimitiveRoles,
  ),
  policy(
    "registry-has-cleanup",
    "Artifact Registry repositories have an active keep/delete cleanup policy",
    checkRegistryCleanup,
  ),
  policy(
    "tenant-workload-sandboxed",
    "A tenant's Kubernetes workload runs under a sandboxed RuntimeClass, non-root, unprivileged, without a token",
    checkTenantWorkloadSandboxed,
  ),
];
