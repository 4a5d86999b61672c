// The kubernetes backend: the sandbox Pod's exec through the cluster's API (runtime/kubernetes/sandbox.ts),
// for commands, files and the terminal alike; its backups taken by the runtime from outside the Pod
// (runtime/kubernetes/backup.ts). It keeps no snapshots: the home is the Pod's volume claim.
import { checkKubernetesProvider, knownKubernetesProviderProblem } from "../../lib/kubernetes-provider.js";
import { InsideDevServers } from "../sandbox/dev-servers.js";
import { SandboxNotRunningError } from "../sandbox/exec.js";
import type { KubernetesProjects } from "../kubernetes/sandbox.js";
import { TenantRequestError } from "../tenants/service.js";
import { platformTenantProgram } from "../tenants/stack.js";
import type { BackendParts, BackendTarget, BackendTraits, SandboxBackend } from "./backend.js";

export const KUBERNETES_TRAITS: BackendTraits = {
  sandboxNoun: "Pod",
  snapshots: false,
  backupDaemonInside: false,
  tokenCopiedIn: false,
  warmPool: false,
};

/** `parts.kubernetes`: the runtime's way to its cluster; without one, a kubernetes project is refused naming why. */
export function kubernetesBackend(parts: BackendParts): SandboxBackend {
  const cluster = (projectId: string): KubernetesProjects => {
    if (!parts.kubernetes)
      throw new SandboxNotRunningError(
        projectId,
        `project ${projectId} runs on a kubernetes cluster, and this runtime has none configured`,
      );
    return parts.kubernetes;
  };
  // The Pod's kernel has its sockets: read by the cluster's exec; the front door reaches the Pod's own address.
  const devServers = new InsideDevServers<BackendTarget>(
    async ({ projectId }) => cluster(projectId).runnerOf(projectId),
    async ({ projectId }) => cluster(projectId).podAddress(projectId),
  );
  return {
    kind: "kubernetes",
    traits: KUBERNETES_TRAITS,
    admit: ({ kubernetes }) => {
      if (!kubernetes)
        throw new TenantRequestError(
          409,
          "the kubernetes backend is not configured on this platform (tenants.kubernetes: the cluster's kubeconfig and RuntimeClass)",
        );
      // Its stack could only fail at the engine's plugin lookup (or run a provider of another version):
      // refused before anything is recorded, as far as is known now; each operation asks again (program).
      const problem = knownKubernetesProviderProblem();
      if (problem) throw new TenantRequestError(409, problem);
      return { backend: "kubernetes", kubernetes };
    },
    // The tenant's provider gets the cluster's kubeconfig, read (on GKE: a token minted) for each operation,
    // and only the pinned provider runs it: another is the operation's error, named, before the engine starts.
    program: async (spec, options) => {
      const provider = await checkKubernetesProvider();
      if ("problem" in provider) throw new Error(provider.problem);
      return platformTenantProgram(spec, options, await options.kubeconfig?.());
    },
    runner: async ({ projectId }) => cluster(projectId).runnerOf(projectId),
    attach: ({ projectId }, session) => cluster(projectId).attach(projectId, session),
    async finalBackup(db, spec, seconds) {
      // A Pod has no root to keep a token from its agent: the runtime backs it up from outside, and records it.
      if (!parts.kubernetesBackups) return "skipped: this reconciler takes no kubernetes backups";
      const outcome = await parts.kubernetesBackups.backUp(db, spec, "final", seconds);
      if (outcome.ok) return "ok";
      return `${outcome.skipped ? "skipped" : "failed"}: ${outcome.why}`;
    },
    // The home is the Pod's volume claim, written through: a new Pod finds it as the old one left it.
    beforeRestart: async () => undefined,
    // A Pod runs no sshd: its sessions are the runtime's SSH gateway's (runtime/kubernetes/ssh-gateway.ts),
    // which the idle shutdown does not count yet (docs/kubernetes.md, "Left to do").
    sshSessions: async () => 0,
    // The StatefulSet's controller starts a Pod again, whatever ended it.
    diedAt: async () => undefined,
    // Only where its Pod admits the front door (tenants.kubernetes.frontDoorFrom, in its NetworkPolicy).
    devServers: async (target, maxAgeMs) =>
      target.spec?.kubernetes?.frontDoorFrom ? devServers.found(target, maxAgeMs) : null,
    // The cluster's nodes pull the image, from a registry they reach; the runtime's engine has no part in it.
    prepareImage: async () => undefined,
    // What the stack applied does not say the Pod was scheduled, pulled its image or passed its probe.
    ...(parts.kubernetes
      ? { observe: parts.kubernetes.observe, unreachable: parts.kubernetes.unreachable }
      : {}),
  };
}
