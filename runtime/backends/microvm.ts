// The microVM backend: the guest's sshd on the project's own bridge, logged into with the platform's key,
// for commands, files and the terminal alike (a microVM has no engine to exec through); its snapshots are
// copies of its root beside it (runtime/tenants/microvm-snapshots.ts).
import { promises as fs } from "node:fs";
import * as path from "node:path";
import type { TenantSpec, TenantSpecInput } from "../../components/tenant/spec.js";
import { SANDBOX_SSH_PORT } from "../../lib/constants.js";
import { microVmFiles, readMicroVm } from "../../lib/microvm/launcher.js";
import { NESTED_DEFAULT_CAPS, type NestedCaps } from "../../lib/microvm/nested.js";
import { lastBoot, savedMemory } from "../../lib/microvm/suspend.js";
import { tenantAddresses } from "../../lib/subnets.js";
import { platformKeyFile, type MicroVmHost, type MicroVmSupport } from "../microvm-support.js";
import { InsideDevServers } from "../sandbox/dev-servers.js";
import { SandboxNotRunningError } from "../sandbox/exec.js";
import { sshRunner } from "../sandbox/runner.js";
import { establishedTo } from "../sandbox/ssh-sessions.js";
import type { SshTarget } from "../sandbox/ssh.js";
import { sshAttach } from "../terminal/ssh-attach.js";
import { deleteAllMicroVmSnapshots, takeMicroVmSnapshot } from "../tenants/microvm-snapshots.js";
import { TenantRequestError } from "../tenants/service.js";
import { ensureImage } from "../tenants/snapshots.js";
import { applyHostAllowlist } from "../tenants/allowlist.js";
import { microVmHome } from "../tenants/fork.js";
import { platformTenantProgram } from "../tenants/stack.js";
import type { BackendParts, BackendTarget, BackendTraits, SandboxBackend } from "./backend.js";
import { backUpInside, snapshotOptions } from "./shared.js";

export const MICROVM_TRAITS: BackendTraits = {
  sandboxNoun: "microVM",
  snapshots: true,
  backupDaemonInside: true,
  tokenCopiedIn: true,
  // Each microVM boots its own kernel from the project's own disks: always a cold create.
  warmPool: false,
  nestedVirtualization: true,
};

/**
 * `parts.microvm`: this runtime's own probe of the host (the API's), whose key it logs in with and whose
 * absence it names; without one (the reconciler, which runs no probe), the key is read from beside the
 * spec's state root.
 */
export function microVmBackend(parts: BackendParts): SandboxBackend {
  const support = parts.microvm;
  const target = async (projectId: string, spec: TenantSpec | undefined): Promise<SshTarget> => {
    if (spec?.backend !== "microvm") throw new Error(`project ${projectId} is not a microVM`);
    return support ? probedTarget(spec, support()) : microVmSpecTarget(spec);
  };
  const runner = async (spec: TenantSpec | undefined, projectId = spec?.projectId ?? "") =>
    sshRunner(await target(projectId, spec));
  // The guest's kernel has its sockets: read over its sshd, as the agent; the front door reaches the guest on
  // its bridge address, as a container's.
  const devServers = new InsideDevServers<BackendTarget>(({ projectId, spec }) => runner(spec, projectId));
  return {
    kind: "microvm",
    traits: MICROVM_TRAITS,
    admit: ({ microvm, nestedCaps }, asked) => {
      const probed = microvm?.();
      if (!probed)
        throw new TenantRequestError(
          409,
          microvm
            ? "the microvm backend is not ready yet: the host's accelerator probe is still running; retry in a few seconds"
            : "the microvm backend is not available on this platform (no microVM support configured)",
        );
      if (!probed.available)
        throw new TenantRequestError(
          409,
          `the microvm backend is not available on this host: ${probed.reason}`,
        );
      const { kernel, initrd, accelerator, stateRoot, platformKey } = probed.host;
      return {
        backend: "microvm",
        microvm: {
          kernel,
          initrd,
          accelerator,
          stateRoot,
          platformKey,
          keepMemory: true,
          ...(asked?.nestedVirtualization ? admitNested(probed.host, nestedCaps) : {}),
        },
      };
    },
    program: async (spec, options) => platformTenantProgram(spec, options),
    runner: ({ projectId, spec }) => runner(spec, projectId),
    attach: async ({ projectId, spec }, session) => sshAttach(await target(projectId, spec), session),
    finalBackup: (db, spec, seconds) => backUpInside(db, spec, seconds, () => runner(spec), parts.log),
    /**
     * The guest's writes onto its disks. The VM stops by QMP quit, without a shutdown in the guest; its
     * mounts bound what that loses to about a second, and this sync brings it to what the guest wrote
     * during the up. `sync` is anyone's to run: the agent's login does it. A guest that is not running has
     * nothing to lose.
     */
    async beforeRestart(spec) {
      try {
        await (await runner(spec)).run(["sync"], { timeoutMs: 30_000 });
      } catch (error) {
        if (!(error instanceof SandboxNotRunningError))
          parts.log?.("guest sync failed", { project: spec.projectId, error: (error as Error).message });
      }
    },
    // The host's own connections to the guest's sshd on the tenant's bridge: its SSH port's forwarder and the
    // terminal's.
    sshSessions: async (spec) =>
      establishedTo(
        await fs.readFile("/proc/self/net/tcp", "utf8"),
        tenantAddresses(spec.subnet).sandbox,
        SANDBOX_SSH_PORT,
      ),
    // Its state directory is there and its qemu is not running (a host reboot, a killed process): the boot
    // it ended (its pid file's time), which a clean stop removes.
    async diedAt(spec) {
      if (!spec.microvm) return undefined;
      const stateDir = path.join(spec.microvm.stateRoot, spec.projectId);
      const state = await readMicroVm(stateDir).catch(() => undefined);
      if (!state || state.running) return undefined;
      const booted = await fs.stat(microVmFiles(stateDir).pid).catch(() => undefined);
      return booted ? booted.mtime.toISOString() : "no-pid-file";
    },
    // A stop that kept its memory left the image beside its disks (docs/microvm.md, "Pause with memory").
    async paused(spec) {
      const saved = spec.microvm
        ? await savedMemory(path.join(spec.microvm.stateRoot, spec.projectId))
        : undefined;
      return saved
        ? { kind: "memory", bytes: saved.bytes, saved_at: saved.savedAt.toISOString() }
        : { kind: "files" };
    },
    // The provider records each boot beside the disks: resumed, or cold and why.
    async started(spec) {
      const boot = spec.microvm
        ? await lastBoot(path.join(spec.microvm.stateRoot, spec.projectId))
        : undefined;
      return boot
        ? { from: boot.resumed ? "memory" : "disks", cold_reason: boot.coldReason ?? null, at: boot.at }
        : undefined;
    },
    devServers: (target, maxAgeMs) => devServers.found(target, maxAgeMs),
    // Its egress is the host's shared Squid: a new allowlist holds before the PATCH answers.
    applyAllowlist: applyHostAllowlist,
    // Its home disk, the guest paused for a fork's copy once it has written its page cache out. A fork boots
    // cold from its own root (its own host keys): the source's memory is never copied.
    forkableHome: (spec) =>
      microVmHome(spec, async () => {
        await (await runner(spec)).run(["sync"], { timeoutMs: 30_000 });
      }),
    // A snapshot is a file beside the VM, not an image; the base image is the engine's, exported to a root.
    prepareImage: async (spec) => {
      if (!path.isAbsolute(spec.image))
        await ensureImage(parts.docker(), spec.image, parts.snapshots?.registryAuth);
    },
    snapshots: {
      take: async (db, spec) => takeMicroVmSnapshot(db, spec, snapshotOptions(parts.snapshots).keep),
      deleteAll: (db, spec) => deleteAllMicroVmSnapshots(db, spec),
    },
  };
}

/**
 * A nested project's guest (docs/microvm.md, "Nested virtualisation"): the host's CPU flag, the initramfs with
 * KVM's modules, and the caps on its size; or a 409 naming why this host offers none (the request is sound,
 * the host cannot serve it, as gVisor where its probe failed), at the create rather than at the first VM.
 */
function admitNested(
  host: MicroVmHost,
  caps: NestedCaps = NESTED_DEFAULT_CAPS,
): Pick<NonNullable<TenantSpecInput["microvm"]>, "initrd" | "nested"> {
  const nested = host.nested;
  if (!nested?.available || host.nestedInitrd === undefined)
    throw new TenantRequestError(
      409,
      `nested virtualisation is not available on this host: ${nested ? nested.reason : "this runtime's probe did not decide it"}`,
    );
  return {
    initrd: host.nestedInitrd,
    nested: { cpuFlag: nested.cpuFlag, maxMemoryMiB: caps.memoryMiB, maxVcpus: caps.vcpus },
  };
}

/** A microVM's sshd with the key of this runtime's probe, or why this runtime cannot reach microVMs. */
function probedTarget(spec: TenantSpec, support: MicroVmSupport | undefined): SshTarget {
  if (!support?.available)
    throw new SandboxNotRunningError(
      `microVM ${spec.projectId}`,
      `this runtime cannot reach microVMs (${support ? support.reason : "still probing the host; try again in seconds"})`,
    );
  return { host: tenantAddresses(spec.subnet).sandbox, privateKey: support.host.platformPrivateKey };
}

/** A recorded microVM spec's sshd, the key read from beside its state root (no probe needed). */
export async function microVmSpecTarget(spec: TenantSpec): Promise<SshTarget> {
  if (spec.backend !== "microvm" || !spec.microvm)
    throw new Error(`project ${spec.projectId} is not a microVM`);
  const file = platformKeyFile(spec.microvm.stateRoot);
  const privateKey = await fs.readFile(file, "utf8").catch((error: Error) => {
    throw new Error(`the platform's microVM key ${file} is unreadable: ${error.message}`);
  });
  return { host: tenantAddresses(spec.subnet).sandbox, privateKey };
}
