import * as k8s from "@pulumi/kubernetes";
import * as pulumi from "@pulumi/pulumi";
import { LABELS, MANAGED_BY } from "../../lib/constants.js";

/** What the tenant stacks the runtime runs write: the objects of components/tenant/kubernetes/. */
const TENANT_WRITES = ["get", "list", "watch", "create", "update", "patch", "delete"];

/**
 * Everything the runtime does on the cluster, and nothing else: its tenant stacks create, change
 * and delete each tenant's namespace and the objects in it; the runtime itself reads a sandbox's state
 * (runtime/kubernetes/sandbox.ts), runs commands and terminals through `pods/exec`, and deletes a namespace a
 * destroyed stack left. Each tenant's egress proxy is a ConfigMap (its Squid config), a Deployment and a
 * ClusterIP Service. No Secrets, nodes, RBAC or cluster-scoped objects besides namespaces.
 */
export const RUNTIME_CLUSTER_RULES = [
  { apiGroups: [""], resources: ["namespaces"], verbs: TENANT_WRITES },
  {
    apiGroups: [""],
    resources: ["resourcequotas", "persistentvolumeclaims", "serviceaccounts", "configmaps", "services"],
    verbs: TENANT_WRITES,
  },
  { apiGroups: ["networking.k8s.io"], resources: ["networkpolicies"], verbs: TENANT_WRITES },
  { apiGroups: ["apps"], resources: ["statefulsets", "deployments"], verbs: TENANT_WRITES },
  { apiGroups: [""], resources: ["pods"], verbs: ["get", "list", "watch"] },
  // Pulumi's Kubernetes provider waits for what it applied to be ready by watching what it makes: a Service's
  // Endpoints, a Deployment's ReplicaSets (pods and claims are above). Without them a tenant stack's `up` waited
  // out the provider's ten minutes on the proxy's Service (tests/integration/kubernetes-provider.test.ts).
  { apiGroups: [""], resources: ["endpoints"], verbs: ["get", "list", "watch"] },
  { apiGroups: ["apps"], resources: ["replicasets"], verbs: ["get", "list", "watch"] },
  // A websocket exec (runtime/kubernetes/exec.ts) is a GET upgraded: the server checks `get` (and `create`,
  // which a SPDY exec's POST needs); a real kube-apiserver 1.37 refused it with `create` alone.
  { apiGroups: [""], resources: ["pods/exec"], verbs: ["get", "create"] },
  { apiGroups: [""], resources: ["events"], verbs: ["list"] },
] as const;

/** The label every namespace the platform manages carries (the tenant program's namespaces do). */
const MANAGED = `'${LABELS.managedBy}'`;

/**
 * The CEL a runtime's request must pass: it acts only in namespaces labelled as the platform's. A namespace
 * itself is judged by its own labels (before and after a change); anything else by its namespace's, so a
 * cluster-scoped object, which has none, is refused.
 */
export const RUNTIME_NAMESPACE_RULE = [
  `request.kind.kind == 'Namespace' && request.kind.group == ''`,
  `? ((request.operation == 'CREATE' || (has(oldObject.metadata.labels) && ${MANAGED} in oldObject.metadata.labels && oldObject.metadata.labels[${MANAGED}] == '${MANAGED_BY}'))`,
  `   && (request.operation == 'DELETE' || (has(object.metadata.labels) && ${MANAGED} in object.metadata.labels && object.metadata.labels[${MANAGED}] == '${MANAGED_BY}')))`,
  `: (namespaceObject != null && has(namespaceObject.metadata.labels) && ${MANAGED} in namespaceObject.metadata.labels && namespaceObject.metadata.labels[${MANAGED}] == '${MANAGED_BY}')`,
].join("\n");

/**
 * The CEL a Service of the runtime's must pass: a plain ClusterIP Service (the tenant's proxy), never a
 * NodePort, LoadBalancer or ExternalName one, and no `externalIPs` (which would let it take over traffic to
 * any address: CVE-2020-8554). Anything but a Service passes.
 */
export const RUNTIME_SERVICE_RULE = [
  `request.kind.kind != 'Service' || request.kind.group != '' || request.operation == 'DELETE' || request.operation == 'CONNECT'`,
  `|| (has(object.spec.type) && object.spec.type == 'ClusterIP' && (!has(object.spec.externalIPs) || size(object.spec.externalIPs) == 0))`,
].join("\n");

export interface RuntimeClusterAccessArgs {
  /**
   * Who the runtime is to the cluster's API: a user name. On GKE, the host VM's service account e-mail (a
   * Google identity authenticates as its e-mail); elsewhere, whatever the kubeconfig the runtime gets names.
   */
  readonly runtimeUser: pulumi.Input<string>;
  /** The cluster's provider (never the ambient kubeconfig). */
  readonly provider: k8s.Provider;
}

/**
 * The runtime's access to the sandbox cluster: a ClusterRole of {@link RUNTIME_CLUSTER_RULES} bound to its user,
 * and a ValidatingAdmissionPolicy that holds every write and exec of that user to the namespaces the platform
 * manages ({@link RUNTIME_NAMESPACE_RULE}). RBAC cannot name namespaces by label; the API server's own CEL
 * admission can, with no webhook to run.
 */
export class RuntimeClusterAccess extends pulumi.ComponentResource {
  public readonly clusterRoleName: pulumi.Output<string>;
  public readonly policyName: pulumi.Output<string>;

  constructor(name: string, args: RuntimeClusterAccessArgs, opts?: pulumi.ComponentResourceOptions) {
    super("sandbox:kubernetes:RuntimeClusterAccess", name, {}, opts);
    const child = { parent: this, provider: args.provider };
    const labels = { [LABELS.managedBy]: MANAGED_BY };
    const role = new k8s.rbac.v1.ClusterRole(
      `${name}-role`,
      {
        metadata: { name: "agent-sandbox-runtime", labels },
        rules: RUNTIME_CLUSTER_RULES.map((rule) => ({
          apiGroups: [...rule.apiGroups],
          resources: [...rule.resources],
          verbs: [...rule.verbs],
        })),
      },
      child,
    );
    new k8s.rbac.v1.ClusterRoleBinding(
      `${name}-binding`,
      {
        metadata: { name: "agent-sandbox-runtime", labels },
        roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: role.metadata.name },
        subjects: [{ apiGroup: "rbac.authorization.k8s.io", kind: "User", name: args.runtimeUser }],
      },
      child,
    );
    const policy = new k8s.admissionregistration.v1.ValidatingAdmissionPolicy(
      `${name}-namespaces`,
      {
        metadata: { name: "agent-sandbox-runtime-namespaces", labels },
        spec: {
          failurePolicy: "Fail",
          matchConstraints: {
            resourceRules: [
              {
                apiGroups: ["*"],
                apiVersions: ["*"],
                operations: ["CREATE", "UPDATE", "DELETE", "CONNECT"],
                // Every resource and subresource (pods/exec); the server refuses "*" beside it.
                resources: ["*/*"],
              },
            ],
          },
          matchConditions: [
            {
              name: "the-runtime",
              expression: pulumi
                .output(args.runtimeUser)
                .apply((user) => `request.userInfo.username == ${JSON.stringify(user)}`),
            },
          ],
          validations: [
            {
              expression: RUNTIME_NAMESPACE_RULE,
              message: `the agent sandbox runtime acts only in namespaces labelled ${LABELS.managedBy}=${MANAGED_BY}`,
              reason: "Forbidden",
            },
            {
              expression: RUNTIME_SERVICE_RULE,
              message: "the agent sandbox runtime makes only ClusterIP Services, without externalIPs",
              reason: "Forbidden",
            },
          ],
        },
      },
      child,
    );
    new k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding(
      `${name}-namespaces-binding`,
      {
        metadata: { name: "agent-sandbox-runtime-namespaces", labels },
        spec: { policyName: policy.metadata.name, validationActions: ["Deny"] },
      },
      child,
    );
    this.clusterRoleName = role.metadata.name;
    this.policyName = policy.metadata.name;
    this.registerOutputs({ clusterRoleName: this.clusterRoleName, policyName: this.policyName });
  }
}
