// The tenant program under Pulumi mocks, as the kubernetes backend's tests declare it (its provider plugins
// cannot run here): every resource registered with its inputs, and the outputs a real provider would compute
// for the few the components read back.
import * as pulumi from "@pulumi/pulumi";

export interface Registered {
  type: string;
  name: string;
  inputs: Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
  provider?: string;
}

/** How the engine marks a secret value on the wire (pulumi/sdk runtime rpc.ts). */
export const SECRET_SIG = "4dabf18193072939515e22adb298388d";
export const SECRET_VALUE_SIG = "1b47061264138c4ac30d75fd1eb44270";
export const GCP_PROJECT = "gcp-project";

/** Outputs a real provider would compute, so components can use them. */
function computedOutputs(type: string, inputs: Record<string, unknown>): Record<string, unknown> {
  switch (type) {
    case "sandbox:crypto:SshKeyPair":
      return {
        publicKey: "ssh-ed25519 AAAAmock agent@test",
        privateKey: "-----BEGIN OPENSSH PRIVATE KEY-----mock",
      };
    case "gcp:serviceaccount/account:Account":
      return {
        email: `${inputs.accountId}@${inputs.project}.iam.gserviceaccount.com`,
        name: `projects/${inputs.project}/serviceAccounts/${inputs.accountId}`,
      };
    case "kubernetes:core/v1:Service":
      return { spec: { ...(inputs.spec as object), clusterIP: SERVICE_CLUSTER_IP } };
    default:
      return {};
  }
}

/** Sets the mocks for stack `stack` of the tenant project; each new resource is pushed onto `registered`. */
export async function setTenantMocks(registered: Registered[], stack: string): Promise<void> {
  await pulumi.runtime.setMocks(
    {
      newResource(args) {
        registered.push({ type: args.type, name: args.name, inputs: args.inputs, provider: args.provider });
        return {
          id: `${args.name}-id`,
          state: { ...args.inputs, ...computedOutputs(args.type, args.inputs) },
        };
      },
      call(args) {
        throw new Error(`unexpected call to ${args.token}`);
      },
    },
    "agent-sandbox-tenant",
    stack,
    false,
  );
}

/** A kubeconfig the tenant's provider holds (nothing dials it under mocks). */
export const KUBECONFIG = "apiVersion: v1\nkind: Config\nclusters: []\n";
/** The ClusterIP the mocks give a Service (the tenant's egress proxy's), as the API server would assign one. */
export const SERVICE_CLUSTER_IP = "10.8.0.10";

/** A kubernetes-backend tenant spec as the runtime would record one (`overrides` replace its fields). */
export const kubernetesSpec = (projectId: string, overrides: Record<string, unknown> = {}) => ({
  projectId,
  ownerId: "alice@example.com",
  mode: "gcp",
  image: "europe-docker.pkg.dev/gcp-project/sandboxes/sandbox:abc",
  subnet: "10.100.3.0/24",
  sshHostPort: 10003,
  host: {
    squidConfigFile: "/etc/agent-sandbox/squid/squid.conf",
    squidFragmentsDir: "/etc/agent-sandbox/squid/tenants",
    backupRoot: "/var/lib/agent-sandbox/backups",
  },
  gcp: { project: GCP_PROJECT, bucket: "agent-sandbox-data" },
  backend: "kubernetes",
  allowlist: ["api.anthropic.com", ".github.com"],
  kubernetes: { runtimeClassName: "gvisor" },
  ...overrides,
});

/**
 * The KubernetesTenant component's arguments for `projectId` alone (not through a spec), as the tests that
 * render project ids the API would never make (older or imported tenants) give them; `labels` are the
 * component's tenant labels.
 */
export const kubernetesTenantArgs = (projectId: string, labels: Readonly<Record<string, string>>) => ({
  projectId,
  image: "sandbox:abc",
  kubeconfig: KUBECONFIG,
  runtimeClassName: "gvisor",
  allowlist: ["api.anthropic.com"],
  homeSize: "10Gi",
  limits: { memoryMiB: 2048, cpus: 0.5 },
  running: true,
  labels,
  workloadIdentity: { project: GCP_PROJECT, serviceAccountEmail: "sa@gcp-project.iam.gserviceaccount.com" },
  env: {},
});
