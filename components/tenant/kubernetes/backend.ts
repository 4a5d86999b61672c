import * as pulumi from "@pulumi/pulumi";
import { NOBODY_UID } from "../../../lib/constants.js";
import { TenantIdentity } from "../identity.js";
import type { TenantOutputs } from "../outputs.js";
import type { KubernetesTenantSpec } from "../spec.js";
import { KubernetesTenant, validateKubernetesTenantArgs } from "./kubernetes-tenant.js";

/**
 * The `kubernetes` backend of the tenant program: the same identity as on a host (SSH keypair, the tenant's
 * GSA with prefix-scoped bucket IAM), then the tenant's objects on the cluster. The kubeconfig comes beside
 * the spec, or else from the stack's secret config `kubeconfig`; never from the process's environment.
 * Host-only parts (bridge, iptables, the host's Squid fragment, host secrets directory, front door) are not
 * declared: the tenant's egress proxy runs in its namespace.
 */
export function declareKubernetesBackend(
  name: string,
  spec: KubernetesTenantSpec,
  labels: Readonly<Record<string, string>>,
  kubeconfig: pulumi.Input<string> | undefined,
  parent: pulumi.Resource,
): TenantOutputs {
  const cluster = spec.kubernetes;
  const clusterArgs = {
    projectId: spec.projectId,
    image: spec.image,
    kubeconfig: kubeconfig ?? new pulumi.Config().getSecret("kubeconfig"),
    runtimeClassName: cluster.runtimeClassName,
    allowlist: spec.allowlist,
    ...(cluster.clusterDns === undefined ? {} : { clusterDns: cluster.clusterDns }),
    ...(cluster.frontDoorFrom === undefined ? {} : { frontDoorFrom: cluster.frontDoorFrom }),
    homeSize: cluster.homeSize,
    storageClassName: cluster.storageClassName,
    limits: spec.limits,
    running: spec.running,
    labels,
  };
  // Refused before anything is declared, so bad input leaves nothing half-made.
  const problems = validateKubernetesTenantArgs({ ...clusterArgs, env: {} });
  if (problems.length > 0) throw new pulumi.ResourceError(problems.join("; "), parent);
  // gcp: the tenant's GSA, which its Pod runs as (Workload Identity). local: the keypair, and the directory on
  // the runtime's host its backups go to (the runtime takes them from outside the Pod: runtime/kubernetes/backup.ts).
  const identity = new TenantIdentity(
    `${name}-identity`,
    {
      projectId: spec.projectId,
      mode: spec.mode,
      gcp: spec.gcp,
      backupRoot: spec.host.backupRoot,
      backupOwner: NOBODY_UID,
      sshPublicKey: spec.sshPublicKey,
    },
    { parent },
  );
  const gcp = spec.mode === "gcp" ? spec.gcp : undefined;
  const tenant = new KubernetesTenant(
    `${name}-kubernetes`,
    {
      ...clusterArgs,
      ...(gcp
        ? {
            workloadIdentity: {
              project: gcp.project,
              serviceAccountEmail: identity.serviceAccountEmail.apply((email) => email!),
            },
          }
        : {}),
      // No BACKUP_REMOTE: the runtime backs the home up from outside the Pod (runtime/kubernetes/backup.ts),
      // with a token the Pod never holds; the image's daemon then stays idle ("disabled").
      env: { SSH_PUBLIC_KEY: identity.sshPublicKey },
    },
    { parent },
  );
  return {
    containerName: pulumi.interpolate`${tenant.namespace}/${tenant.podName}`,
    sandboxAddress: pulumi.output(""),
    bridge: pulumi.output(""),
    subnet: pulumi.output(spec.subnet),
    volumeName: pulumi.interpolate`${tenant.namespace}/${tenant.homeClaim}`,
    sshHostPort: pulumi.output(spec.sshHostPort),
    sshPublicKey: identity.sshPublicKey,
    sshPrivateKey: identity.sshPrivateKey,
    backupRemote: identity.backupRemote,
    running: tenant.running,
  };
}
