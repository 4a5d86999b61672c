// The microVM backend: the guest's sshd on the project's own bridge, logged into with the platform's key,
// for commands, files and the terminal alike (a microVM has no engine to exec through).
import { promises as fs } from "node:fs";
import type { TenantSpec } from "../../components/tenant/spec.js";
import { tenantAddresses } from "../../lib/subnets.js";
import { platformKeyFile, type MicroVmSupport } from "../host/microvm.js";
import { SandboxNotRunningError } from "../sandbox/exec.js";
import { sshRunner } from "../sandbox/runner.js";
import type { SshTarget } from "../sandbox/ssh.js";
import { sshAttach } from "../terminal/ssh-attach.js";
import type { SandboxBackend } from "./backend.js";

/**
 * `support`: this runtime's own probe of the host (the API's), whose key it logs in with and whose absence
 * it names; without one (the reconciler, which runs no probe), the key is read from beside the spec's
 * state root.
 */
export function microVmBackend(support?: () => MicroVmSupport | undefined): SandboxBackend {
  const target = async (projectId: string, spec: TenantSpec | undefined): Promise<SshTarget> => {
    if (spec?.backend !== "microvm") throw new Error(`project ${projectId} is not a microVM`);
    return support ? probedTarget(spec, support()) : microVmSpecTarget(spec);
  };
  return {
    kind: "microvm",
    runner: async ({ projectId, spec }) => sshRunner(await target(projectId, spec)),
    attach: async ({ projectId, spec }, session) => sshAttach(await target(projectId, spec), session),
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
