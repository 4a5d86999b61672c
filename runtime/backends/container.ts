// The container backend: the engine's exec API into the project's container (ARCHITECTURE decision 5:
// nothing listens inside the sandbox for the platform), and snapshots as images in the platform's registry.
import { tenantNames } from "../../components/tenant/names.js";
import { isNotFound } from "../../lib/docker-client.js";
import { ExecLaunchers } from "../sandbox/launcher.js";
import { AGENT_USER } from "../sandbox/process.js";
import { dockerRunner } from "../sandbox/runner.js";
import { sshSessions } from "../sandbox/ssh-sessions.js";
import { dockerAttacher } from "../terminal/attach.js";
import { deleteAllSnapshots, ensureImage, takeSnapshot } from "../tenants/snapshots.js";
import { applyHostAllowlist } from "../tenants/allowlist.js";
import { platformTenantProgram } from "../tenants/stack.js";
import type { BackendParts, BackendTraits, SandboxBackend } from "./backend.js";
import { backUpInside, snapshotOptions } from "./shared.js";

export const CONTAINER_TRAITS: BackendTraits = {
  sandboxNoun: "container",
  snapshots: true,
  backupDaemonInside: true,
  tokenCopiedIn: false,
  warmPool: true,
};

export function containerBackend(parts: BackendParts): SandboxBackend {
  const { docker } = parts;
  // One waiting launcher per sandbox that ran a command: the next command skips the engine's exec.
  const launchers = new ExecLaunchers(docker, AGENT_USER);
  const runner = async (projectId: string) => dockerRunner(docker(), projectId, launchers);
  return {
    kind: "container",
    traits: CONTAINER_TRAITS,
    // Every host runs containers; a container's spec names no backend (as every spec before there were two).
    admit: () => ({}),
    program: async (spec, options) => platformTenantProgram(spec, options),
    runner: ({ projectId }) => runner(projectId),
    attach: ({ projectId }, session) => dockerAttacher(docker()).attach(projectId, session),
    finalBackup: (db, spec, seconds) =>
      backUpInside(db, spec, seconds, () => runner(spec.projectId), parts.log),
    // A replaced container keeps the project's volume: a restart loses nothing written to /home/agent.
    beforeRestart: async () => undefined,
    sshSessions: (spec) => sshSessions(docker(), spec.projectId),
    // An exited container (a restarted engine starts none: they carry no restart policy): its exit time.
    async diedAt(spec) {
      try {
        const { State } = await docker().getContainer(tenantNames(spec.projectId).container).inspect();
        return State.Status === "exited" ? State.FinishedAt : undefined;
      } catch (error) {
        if (isNotFound(error)) return undefined;
        throw error;
      }
    },
    // Its egress is the host's shared Squid: a new allowlist holds before the PATCH answers.
    applyAllowlist: applyHostAllowlist,
    prepareImage: (spec) => ensureImage(docker(), spec.image, parts.snapshots?.registryAuth),
    snapshots: {
      take: async (db, spec) => {
        const options = snapshotOptions(parts.snapshots);
        return takeSnapshot(db, docker(), spec.projectId, options);
      },
      deleteAll: async (db, spec) =>
        parts.snapshots ? deleteAllSnapshots(db, docker(), spec.projectId, parts.snapshots) : [],
    },
  };
}
