// The container backend: the engine's exec API into the project's container (ARCHITECTURE decision 5:
// nothing listens inside the sandbox for the platform), and snapshots as images in the platform's registry.
import { tenantNames } from "../../components/tenant/names.js";
import { isNotFound } from "../../lib/docker-client.js";
import { ExecLaunchers } from "../sandbox/launcher.js";
import { AGENT_USER } from "../sandbox/process.js";
import { dockerRunner } from "../sandbox/runner.js";
import { ContainerDevServers } from "../sandbox/dev-servers.js";
import { sshSessions } from "../sandbox/ssh-sessions.js";
import { dockerAttacher } from "../terminal/attach.js";
import { deleteAllSnapshots, ensureImage, takeSnapshot } from "../tenants/snapshots.js";
import { applyHostAllowlist } from "../tenants/allowlist.js";
import { filesystemHome } from "../tenants/fork.js";
import {
  TenantRequestError,
  type BackendFields,
  type Isolation,
  type TenantDefaults,
} from "../tenants/service.js";
import { platformTenantProgram } from "../tenants/stack.js";
import type { BackendParts, BackendTraits, SandboxBackend } from "./backend.js";
import { backUpInside, snapshotOptions } from "./shared.js";

export const CONTAINER_TRAITS: BackendTraits = {
  sandboxNoun: "container",
  snapshots: true,
  backupDaemonInside: true,
  tokenCopiedIn: false,
  warmPool: true,
  isolation: true,
  bandwidth: true,
};

export function containerBackend(parts: BackendParts): SandboxBackend {
  const { docker } = parts;
  const devServers = new ContainerDevServers(docker);
  // One waiting launcher per sandbox that ran a command: the next command skips the engine's exec.
  const launchers = new ExecLaunchers(docker, AGENT_USER);
  const runner = async (projectId: string) => dockerRunner(docker(), projectId, launchers);
  return {
    kind: "container",
    traits: CONTAINER_TRAITS,
    // Every host runs containers; a container's spec names no backend (as every spec before there were two),
    // and gVisor only where the engine's probe found it (runtime/gvisor-support.ts).
    admit: (defaults, asked) => admitIsolation(asked?.isolation ?? defaults.isolation ?? "runc", defaults),
    program: async (spec, options) => platformTenantProgram(spec, options),
    runner: ({ projectId }) => runner(projectId),
    attach: ({ projectId }, session) => dockerAttacher(docker()).attach(projectId, session),
    finalBackup: (db, spec, seconds) =>
      backUpInside(db, spec, seconds, () => runner(spec.projectId), parts.log),
    // A replaced container keeps the project's volume: a restart loses nothing written to /home/agent.
    beforeRestart: async () => undefined,
    sshSessions: (spec) => sshSessions(docker(), spec.projectId),
    // Read on the host from the container's network namespace: a port answers once it listens.
    devServers: ({ projectId }, maxAgeMs) => devServers.found(projectId, maxAgeMs),
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
    // Its home is a filesystem of its own (tenants.homeBytes), frozen for a fork's copy.
    forkableHome: async (spec) => filesystemHome(spec),
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

/**
 * A container create's isolation: runc adds nothing to the spec (as every spec before there was a choice);
 * gVisor where the engine's probe passed it, else a 409 naming why (as a microVM is on a host without QEMU).
 */
function admitIsolation(isolation: Isolation, defaults: TenantDefaults): BackendFields {
  if (isolation === "runc") return {};
  const probed = defaults.gvisor?.();
  if (!probed)
    throw new TenantRequestError(
      409,
      defaults.gvisor
        ? "isolation gvisor is not decided yet: the engine's gVisor probe is still running; retry in a few seconds"
        : "isolation gvisor is not available on this platform (no gVisor probe runs here)",
    );
  // 409 as for a microVM on a host without QEMU: the request is sound, this host cannot serve it.
  if (!probed.available)
    throw new TenantRequestError(409, `isolation gvisor is not available on this host: ${probed.reason}`);
  return { isolation: "gvisor" };
}
