// A cluster kubernetes projects can be made on through the runtime, as a platform gives it: the suite's control
// plane and kwok's node (kube-apiserver.ts), the runtime's user holding only what RuntimeClusterAccess grants
// (applied by a Pulumi stack of its own through Pulumi's Kubernetes provider, as the cluster's admin), GKE
// Sandbox's RuntimeClass, volumes for the homes' claims (no provisioner runs here), and the runtime's kubeconfig
// in a file. Shared by tests/integration/kubernetes-provider.test.ts and tests/bench/fleet-1000.ts.
import { chownSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import * as k8s from "@pulumi/kubernetes";
import { LocalWorkspace, PulumiCommand, type Stack } from "@pulumi/pulumi/automation/index.js";
import { toolchain } from "../../lib/toolchain.js";
import { startKubeCluster, type ControlPlaneOptions, type KubeCluster } from "./kube-apiserver.js";
import { REAL_NODE_LABEL } from "./kube-node.js";
import { messageOf } from "./tenant-manifests.js";

/** The runtime's user on the cluster (a name; on GKE it is the Project Service account's e-mail). */
export const RUNTIME_USER = "agent-sandbox-runtime";
/** The RuntimeClass that puts a Pod on the cluster's real node (when it was started with one). */
export const REAL_NODE_RUNTIME_CLASS = "runc-real-node";
/** The unprivileged user kwok runs each exec as (the image's agent is uid 1000 too). */
export const AGENT_UID = 1000;

export interface TenantCluster {
  readonly cluster: KubeCluster;
  /** The runtime's kubeconfig (its own user), for `tenants.kubernetes.kubeconfigFile`. */
  readonly kubeconfigFile: string;
  /** Makes `count` 10Gi volumes named `<prefix>-<n>` for homes' claims to bind. */
  volumes(prefix: string, count: number): Promise<void>;
  /** Destroys the access stack and stops the cluster; the pids that must be gone afterwards. */
  stop(): Promise<Record<string, number>>;
}

/** A 10Gi volume a home's claim binds (kept after it, as a provisioned one would be with Retain). */
export function homeVolume(name: string, hostPath: string) {
  return {
    apiVersion: "v1",
    kind: "PersistentVolume",
    metadata: { name },
    spec: {
      capacity: { storage: "10Gi" },
      accessModes: ["ReadWriteOnce"],
      persistentVolumeReclaimPolicy: "Retain",
      hostPath: { path: hostPath },
    },
  };
}

async function created(cluster: KubeCluster, apiPath: string, body: unknown): Promise<void> {
  const answer = await cluster.request("POST", apiPath, body);
  if (answer.status !== 201) throw new Error(`POST ${apiPath}: ${answer.status} ${messageOf(answer)}`);
}

export async function tenantCluster(options: ControlPlaneOptions = {}): Promise<TenantCluster> {
  const home = mkdtempSync(path.join(os.tmpdir(), "kwok-tenants-home-"));
  chownSync(home, AGENT_UID, AGENT_UID);
  const cluster = await startKubeCluster(
    {
      workDir: home,
      runAsUser: AGENT_UID,
      runAsGroup: AGENT_UID,
      env: { HOME: home, PATH: "/usr/local/bin:/usr/bin:/bin", TMUX_TMPDIR: home },
    },
    [RUNTIME_USER],
    options,
  );
  const accessState = mkdtempSync(path.join(os.tmpdir(), "runtime-access-state-"));
  let access: Stack | undefined;
  const stop = async () => {
    await access?.destroy().catch(() => undefined);
    const { pids } = cluster;
    await cluster.stop();
    rmSync(accessState, { recursive: true, force: true });
    rmSync(home, { recursive: true, force: true });
    return pids;
  };
  try {
    const chain = toolchain();
    access = await LocalWorkspace.createStack(
      {
        stackName: "runtime-access",
        projectName: "agent-sandbox-cluster-access",
        program: async () => {
          const { RuntimeClusterAccess } = await import("../../components/kubernetes/runtime-access.js");
          const provider = new k8s.Provider("cluster-admin", { kubeconfig: cluster.kubeconfig });
          const granted = new RuntimeClusterAccess("runtime-access", { runtimeUser: RUNTIME_USER, provider });
          return { role: granted.clusterRoleName, policy: granted.policyName };
        },
      },
      {
        workDir: accessState,
        pulumiCommand: await PulumiCommand.get({ root: chain.pulumiRoot, skipVersionCheck: false }),
        projectSettings: {
          name: "agent-sandbox-cluster-access",
          runtime: "nodejs",
          backend: { url: `file://${accessState}` },
        },
        envVars: { ...chain.env, PULUMI_CONFIG_PASSPHRASE: "test-only" },
      },
    );
    await access.up();
    await created(cluster, "/apis/node.k8s.io/v1/runtimeclasses", {
      apiVersion: "node.k8s.io/v1",
      kind: "RuntimeClass",
      metadata: { name: "gvisor" },
      handler: "runsc",
    });
    if (cluster.realNode)
      // The real node's Pods: a RuntimeClass of runc whose scheduling puts them there (its nodeSelector and the
      // toleration of the node's taint are merged into every Pod that names it), so a tenant asks for the node
      // the way a GKE Sandbox tenant asks for gVisor's, by `runtimeClassName` alone.
      await created(cluster, "/apis/node.k8s.io/v1/runtimeclasses", {
        apiVersion: "node.k8s.io/v1",
        kind: "RuntimeClass",
        metadata: { name: REAL_NODE_RUNTIME_CLASS },
        handler: "runc",
        scheduling: {
          nodeSelector: { [REAL_NODE_LABEL]: "true" },
          tolerations: [{ key: REAL_NODE_LABEL, operator: "Exists", effect: "NoSchedule" }],
        },
      });
    // Outside kwok's directory, which is every Pod's $HOME here (and so what a backup of one reads).
    const kubeconfigFile = path.join(accessState, "runtime-kubeconfig");
    writeFileSync(kubeconfigFile, cluster.kubeconfigOf(RUNTIME_USER), { mode: 0o600 });
    return {
      cluster,
      kubeconfigFile,
      async volumes(prefix, count) {
        const names = Array.from({ length: count }, (_, i) => `${prefix}-${i}`);
        const worker = async (): Promise<void> => {
          for (let name = names.shift(); name !== undefined; name = names.shift()) {
            // A real kubelet mounts the directory as it is (kwok's node mounts nothing): there, the agent's.
            if (cluster.realNode) {
              mkdirSync(path.join(home, name));
              chownSync(path.join(home, name), AGENT_UID, AGENT_UID);
            }
            await created(cluster, "/api/v1/persistentvolumes", homeVolume(name, path.join(home, name)));
          }
        };
        await Promise.all(Array.from({ length: 8 }, worker));
      },
      stop,
    };
  } catch (error) {
    await stop();
    throw error;
  }
}
