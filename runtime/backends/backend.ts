// One seam per backend: what the runtime does to a project's live sandbox (run a command, move files, take a
// backup, attach a terminal, keep snapshots) goes through the SandboxBackend of the project's recorded spec.
// The registry (registry.ts) is the one place that tells the backends apart; each backend is a file of its
// own beside it.
import type { FoundDevServer } from "../../lib/dev-server-names.js";
import type Docker from "dockerode";
import type { PulumiFn } from "@pulumi/pulumi/automation/index.js";
import type { TenantSpec, TenantSpecInput } from "../../components/tenant/spec.js";
import type { Database } from "../store/db.js";
import type { MicroVmSupport } from "../microvm-support.js";
import type { KubernetesBackups } from "../kubernetes/backup.js";
import type { KubernetesProjects, SandboxObservation } from "../kubernetes/sandbox.js";
import type { SandboxRunner } from "../sandbox/runner.js";
import type { TerminalAttachment } from "../terminal/attach.js";
import type { AdmitRequest, BackendFields, TenantDefaults } from "../tenants/service.js";
import type { SnapshotOptions } from "../tenants/snapshots.js";
import type { TenantStackOptions } from "../tenants/stack.js";
import type { SnapshotRecord } from "../store/snapshots.js";
import type { PauseRecord, StartRecord } from "../store/tenants.js";
import type { ForkableHome } from "../tenants/fork.js";

/**
 * A backend's name, as a spec records it (an absent `backend` is a container: every spec recorded before
 * there were two): one of the platform's (container, microvm, kubernetes) or one a runtime registered.
 */
export type BackendKind = string;

/** The project a backend is asked about: its id and, once its tenant is recorded, its spec. */
export interface BackendTarget {
  readonly projectId: string;
  readonly spec?: TenantSpec;
}

/** What a backend is, whatever a runtime configured for it: the same on the API's side and the reconciler's. */
export interface BackendTraits {
  /** What the sandbox is called in a message: "its container is down". */
  readonly sandboxNoun: string;
  /**
   * It keeps snapshots (an image of the container, a copy of the microVM's root). Where it keeps none, the
   * API refuses a snapshot naming the backend, and the idle shutdown (a snapshot and a stop) leaves the
   * sandbox running.
   */
  readonly snapshots: boolean;
  /**
   * Its backup daemon runs inside the sandbox: it reports its own status (backup-status asks it), and on GCP
   * it reads the tenant's storage token the runtime writes beside the sandbox, renewed before it expires
   * (the container's mounted file, a microVM's copy of it). Without, the runtime backs the sandbox up from
   * outside, minting a token for each backup and never writing it, and what it recorded is the status (a
   * Pod's agent could write anything there; runtime/kubernetes/backup.ts).
   */
  readonly backupDaemonInside: boolean;
  /**
   * With `backupDaemonInside`: the sandbox cannot mount the host's copy of the token, so the runtime copies
   * each token it mints into it, and again after every boot (a microVM's guest: runtime/gcp/guest-token.ts).
   */
  readonly tokenCopiedIn: boolean;
  /** A create may take a ready sandbox of this backend from the warm pool (runtime/tenants/pool.ts). */
  readonly warmPool: boolean;
  /**
   * A create may choose its sandbox's isolation (TenantSpec `isolation`: the engine's runc, or gVisor): a
   * container's runtime. Elsewhere an `isolation` asked for is refused naming the backend (a microVM has a
   * kernel of its own; a Pod, its cluster's runtime class).
   */
  readonly isolation?: boolean;
  /**
   * A create may ask for nested virtualisation (a microVM's guest with KVM of its own, where the host's probe
   * offers it). Elsewhere it is refused naming the backend: a container or a Pod has no kernel of its own.
   */
  readonly nestedVirtualization?: boolean;
  /**
   * Its sandbox may have bandwidth caps (TenantSpec `bandwidth`: tc on the tenant's bridge, where only the
   * sandbox's container is). Elsewhere caps asked for are refused naming the backend.
   */
  readonly bandwidth?: boolean;
}

/** The snapshots of a backend that keeps them (`BackendTraits.snapshots`). */
export interface BackendSnapshots {
  /** A snapshot of the sandbox now, recorded, and the ones past the newest the platform keeps removed. */
  take(db: Database, spec: TenantSpec): Promise<SnapshotRecord>;
  /** Every snapshot of a deleted project, where it is kept and in the database; the tags removed. */
  deleteAll(db: Database, spec: TenantSpec): Promise<string[]>;
}

export interface SandboxBackend {
  readonly kind: BackendKind;
  readonly traits: BackendTraits;
  /**
   * A create asking for this backend, before anything is allocated: the spec fields it adds, or a
   * TenantRequestError (409) naming why this platform cannot make one now (not configured, no accelerator).
   */
  admit(defaults: TenantDefaults, asked?: AdmitRequest): BackendFields;
  /**
   * The Pulumi program of the project's stack: every resource of its sandbox, applied by the reconciler's
   * operations and read back by the drift check (`options`: the operation's program version, the project's
   * secrets, what the backend's providers need).
   */
  program(spec: TenantSpecInput, options: TenantStackOptions): Promise<PulumiFn>;
  /**
   * Where the platform runs commands in the sandbox and moves files (exec, files, sync, backups); its calls
   * throw SandboxNotRunningError, naming why, when the sandbox cannot be reached.
   */
  runner(target: BackendTarget): Promise<SandboxRunner>;
  /** A terminal on the sandbox's tmux session `session` (created when missing). */
  attach(target: BackendTarget, session: string): Promise<TerminalAttachment>;
  /**
   * One backup of /home/agent now, before a stop or a snapshot, bounded by `deadlineSeconds`; what the
   * sandbox then says of its backups is recorded for backup-status while it is stopped. Never throws: "ok",
   * or "skipped: why" (nothing to back up: a sandbox that is not running) or "failed: why".
   */
  finalBackup(db: Database, spec: TenantSpec, deadlineSeconds: number): Promise<string>;
  /**
   * Before an up that may restart a running sandbox (an update, a restore): what must reach its disks
   * first. Best-effort, and nothing where a restart loses nothing.
   */
  beforeRestart(spec: TenantSpec): Promise<void>;
  /**
   * Connections to the sandbox's SSH server from elsewhere, as the host's kernel has them (the tenant cannot
   * forge them); one its agent makes to itself does not count. A session is activity: the idle shutdown
   * keeps the sandbox running.
   */
  sshSessions(spec: TenantSpec): Promise<number>;
  /**
   * A sandbox that should run and died behind the platform's back (a restarted engine, a rebooted host, a
   * killed qemu): the mark of that death (its exit time; the dead boot's time), the same at each look until
   * it runs again. Undefined while it runs, when there is no sandbox at all (drift, for the drift check), or
   * where the backend's own platform restarts it (a Pod's controller).
   */
  diedAt(spec: TenantSpec): Promise<string | undefined>;
  /** Before the up of a restore: the image it starts from, where this backend runs it. */
  prepareImage(spec: TenantSpec): Promise<void>;
  /** Present where `traits.snapshots`. */
  readonly snapshots?: BackendSnapshots;
  /**
   * The dev servers its agent's programs listen on now, read at most `maxAgeMs` ago, found without being
   * declared (the front door's names for them: lib/dev-server-names.ts; runtime/sandbox/dev-servers.ts reads
   * them); undefined while the sandbox does not run. Absent, or null for a spec, where the front door does not
   * reach them (a Pod whose policy admits no front door).
   */
  readonly devServers?: (
    target: BackendTarget,
    maxAgeMs?: number,
  ) => Promise<FoundDevServer[] | undefined | null>;
  /**
   * The live sandbox as its platform has it now, where the recorded state cannot say it (a Pod scheduled,
   * its image pulled, its readiness probe passed); absent where the recorded state is the answer.
   */
  readonly observe?: (projectId: string) => Promise<SandboxObservation>;
  /**
   * How its stopped sandbox sleeps, after the up that stopped it: its memory kept (a microVM's image, which
   * the next start resumes) and how big. Absent where a stop keeps the files alone (a container: CRIU does
   * not run on this kernel, docs/microvm.md; a Pod).
   */
  readonly paused?: (spec: TenantSpec) => Promise<PauseRecord>;
  /**
   * How its sandbox's latest start went (resumed from its memory, or booted from its disks and why), where
   * the backend can tell; undefined where it cannot, or before any start it recorded.
   */
  readonly started?: (spec: TenantSpec) => Promise<StartRecord | undefined>;
  /**
   * The sandbox's home as a fork copies it (runtime/tenants/fork.ts: the image, where each fork's copy is
   * staged, how its writes are held for the one copy of a point), or why it cannot be now. Absent where the
   * home is not an image of this host (a Pod's volume): such a project is not forkable.
   */
  readonly forkableHome?: (spec: TenantSpec) => Promise<ForkableHome>;
  /**
   * A new allowlist in force at once, ahead of the stack's update that records it (the host's shared Squid,
   * its fragment rewritten and reconfigured), where the sandbox's stack has put it in place; run inside the
   * settings change's transaction, so a PATCH's answer means it holds. Absent where only the update can
   * (a Pod's own proxy, rolled by its stack).
   */
  readonly applyAllowlist?: (before: TenantSpec, after: TenantSpec) => Promise<void>;
  /**
   * Why the platform its sandboxes run on cannot be reached now (a cluster's API server), or undefined when
   * it answers; `failure`, a failed operation's error, counts when it names that platform out of reach. An
   * operation that failed while it was gone waits for it to answer, then runs again (the reconciler's
   * `clusterWaitMs`). Absent where the sandbox is this host's.
   */
  readonly unreachable?: (failure?: string) => Promise<string | undefined>;
}

export type BackendLog = (message: string, fields?: Record<string, unknown>) => void;

/** What the platform's backends reach their sandboxes with; a part a runtime has not configured is absent. */
export interface BackendParts {
  /** The engine the containers run on. */
  readonly docker: () => Docker;
  /**
   * This runtime's probe of the host for microVMs (the API's; `undefined` while it runs); without one (the
   * reconciler's), a microVM's key is read from beside its state root.
   */
  readonly microvm?: () => MicroVmSupport | undefined;
  /** The cluster of kubernetes projects; without one, they are refused naming why. */
  readonly kubernetes?: KubernetesProjects;
  /** Kubernetes projects' backups, which the runtime takes from outside the Pod (runtime/kubernetes/backup.ts). */
  readonly kubernetesBackups?: KubernetesBackups;
  /** Where snapshots go and how many stay; without them, a snapshot fails naming that. */
  readonly snapshots?: SnapshotOptions;
  readonly log?: BackendLog;
}
