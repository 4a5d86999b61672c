// The kubernetes backend: the sandbox Pod's exec through the cluster's API (runtime/kubernetes/sandbox.ts),
// for commands, files and the terminal alike.
import { SandboxNotRunningError } from "../sandbox/exec.js";
import type { KubernetesProjects } from "../kubernetes/sandbox.js";
import type { SandboxBackend } from "./backend.js";

/** `projects`: the runtime's way to its cluster; without one, a kubernetes project is refused naming why. */
export function kubernetesBackend(projects: KubernetesProjects | undefined): SandboxBackend {
  const cluster = (projectId: string): KubernetesProjects => {
    if (!projects)
      throw new SandboxNotRunningError(
        projectId,
        `project ${projectId} runs on a kubernetes cluster, and this runtime has none configured`,
      );
    return projects;
  };
  return {
    kind: "kubernetes",
    runner: async ({ projectId }) => cluster(projectId).runnerOf(projectId),
    attach: ({ projectId }, session) => cluster(projectId).attach(projectId, session),
  };
}
