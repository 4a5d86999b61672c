// A microVM's guest cannot mount the host's copy of its tenant's storage token, as a container's /run/secrets
// (a read-only bind mount of the tenant's secrets directory) does. The runtime installs each token it mints
// into the guest instead, over the guest's sshd with the platform's key, through the one root command the
// guest allows that key for it (sandbox-platform-command install-gcs-token: stdin to
// /run/secrets/gcs-token.json, root's alone), and again after every boot (the guest's /run is a tmpfs).
import type { TenantSpec } from "../../components/tenant/spec.js";
import { SandboxNotRunningError } from "../sandbox/exec.js";
import type { SandboxRunner } from "../sandbox/runner.js";
import type { TenantTokens } from "./credentials.js";

/** The guest's forced command's verb (sandbox-image/rootfs/usr/local/sbin/sandbox-platform-command). */
export const INSTALL_TOKEN = "install-gcs-token";

export class GuestTokens {
  /** What each guest was last given: a token is installed once, a renewal or a boot has it installed again. */
  private readonly installed = new Map<string, string>();

  /** `copiedIn`: whether a spec's sandbox gets its token this way (its backend's `tokenCopiedIn`). */
  constructor(
    private readonly tokens: TenantTokens,
    private readonly runner: (spec: TenantSpec) => Promise<SandboxRunner>,
    private readonly copiedIn: (spec: TenantSpec) => boolean,
  ) {}

  /** The guest's copy is gone or going (its VM booted, or the project was deleted). */
  forget(projectId: string): void {
    this.installed.delete(projectId);
  }

  /**
   * Installs the tenant's current token in its running guest unless the guest has it already. False when
   * there was nothing to do: not a running microVM, no token minted yet, the guest already has it, or the
   * guest is not reachable (a boot under way); the renewal loop comes back each minute.
   */
  async deliver(spec: TenantSpec): Promise<boolean> {
    if (!this.copiedIn(spec) || !spec.running) return false;
    const token = await this.tokens.read(spec.projectId);
    if (token === undefined || this.installed.get(spec.projectId) === token) return false;
    let result;
    try {
      const sandbox = await this.runner(spec);
      result = await sandbox.run([INSTALL_TOKEN], {
        root: true,
        stdin: Buffer.from(token),
        timeoutMs: 30_000,
      });
    } catch (error) {
      if (error instanceof SandboxNotRunningError) return false;
      throw error;
    }
    if (result.exitCode !== 0) {
      const why = result.stderr.trim().split("\n").at(-1)?.slice(0, 300) || "no message";
      throw new Error(
        `installing the storage token in ${spec.projectId}'s microVM failed (exit ${result.exitCode}): ${why}`,
      );
    }
    this.installed.set(spec.projectId, token);
    return true;
  }
}
