// The container backend: the engine's exec API into the project's container (ARCHITECTURE decision 5:
// nothing listens inside the sandbox for the platform).
import type Docker from "dockerode";
import { dockerRunner } from "../sandbox/runner.js";
import { dockerAttacher } from "../terminal/attach.js";
import type { SandboxBackend } from "./backend.js";

export function containerBackend(docker: () => Docker): SandboxBackend {
  return {
    kind: "container",
    runner: async ({ projectId }) => dockerRunner(docker(), projectId),
    attach: ({ projectId }, session) => dockerAttacher(docker()).attach(projectId, session),
  };
}
