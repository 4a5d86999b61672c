// One seam per backend: what the runtime does to a project's live sandbox (run a command, move files, take a
// backup, attach a terminal) goes through the SandboxBackend of the project's recorded spec. The registry
// (registry.ts) is the one place that tells the backends apart; each backend is a file of its own beside it.
import type { TenantSpec } from "../../components/tenant/spec.js";
import type { SandboxRunner } from "../sandbox/runner.js";
import type { TerminalAttachment } from "../terminal/attach.js";

/** The backends a spec names (an absent `backend` is a container: every spec recorded before there were two). */
export type BackendKind = NonNullable<TenantSpec["backend"]>;

/** The project a backend is asked about: its id and, once its tenant is recorded, its spec. */
export interface BackendTarget {
  readonly projectId: string;
  readonly spec?: TenantSpec;
}

export interface SandboxBackend {
  readonly kind: BackendKind;
  /**
   * Where the platform runs commands in the sandbox and moves files (exec, files, sync, backups); its calls
   * throw SandboxNotRunningError, naming why, when the sandbox cannot be reached.
   */
  runner(target: BackendTarget): Promise<SandboxRunner>;
  /** A terminal on the sandbox's tmux session `session` (created when missing). */
  attach(target: BackendTarget, session: string): Promise<TerminalAttachment>;
}
