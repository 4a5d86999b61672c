import * as os from "node:os";
import type { EngineEvent } from "@pulumi/pulumi/automation/index.js";
import type { TenantSpec } from "../../components/tenant/spec.js";
import type { Database } from "../store/db.js";
import { engineErrorSummary, engineSignal, type TenantStackOptions } from "../tenants/stack.js";
import type { DriftRemediation } from "../tenants/drift.js";
import type { SnapshotOptions } from "../tenants/snapshots.js";
import type { SandboxRunner } from "../sandbox/runner.js";
import { platformBackends, type SandboxBackends } from "../backends/registry.js";
import type { SandboxBackend } from "../backends/backend.js";
import { deadEngineLock, readyStack } from "../tenants/stack-recovery.js";
import { OPERATION_HANDLERS } from "./handlers.js";
import { MAX_CLUSTER_ATTEMPTS, MAX_STATE_SPACE_ATTEMPTS, retryReason } from "./retry.js";
import { Slots } from "./slots.js";
import { EngineSpans } from "./engine-spans.js";
import { contextOf, inSpan, ROOT, spanFailed, startSpan, withSpan } from "../../lib/telemetry.js";
import { currentProgramVersion, type ProgramVersion } from "../../stacks/tenant/version.js";
import type { TenantSecret } from "../../components/tenant/secrets.js";
import type { SecretBox } from "../secrets.js";
import { listSecrets, openSecrets } from "../tenants/project-secrets.js";
import { dockerClient } from "../../lib/docker-client.js";
import type Docker from "dockerode";
import { GuestTokens } from "../gcp/guest-token.js";
import type { TenantCloud } from "../tenants/config.js";
import {
  appendEvent,
  cancelRequested,
  claimOperation,
  finishOperation,
  lastEventSeq,
  onOperationsQueued,
  renewLease,
  requeueOperation,
  type Operation,
} from "../store/operations.js";
import { sharedProviderExits } from "../tenants/shared-provider.js";
import type { KubernetesBackups } from "../kubernetes/backup.js";
import type { KubernetesProjects } from "../kubernetes/sandbox.js";
import {
  fileBackendDir,
  STATE_BACKEND_MIN_FREE,
  stateBackendFullError,
  stateBackendSpace,
} from "../stack-state.js";
import { getTenant, recordProgramVersion, setTenantState, type TenantState } from "../store/tenants.js";
import { driftRemediationOf } from "../store/projects.js";

/** A running operation's watch on its cluster (`Reconciler.watchCluster`). */
interface ClusterWatch {
  /** Why the cluster was found gone, and how to ask it again; undefined while it answers. */
  cut: { why: string; ask: () => Promise<string | undefined> } | undefined;
  stop(): void;
}

export interface ReconcilerOptions {
  readonly db: Database;
  readonly stack: TenantStackOptions;
  /** Unique per process; a lease names its owner. */
  readonly worker?: string;
  /** A worker that has not renewed its lease for this long is presumed dead and its operation taken over. */
  readonly leaseMs?: number;
  readonly pollMs?: number;
  /** Operations run at once by this process (each on a different stack). */
  readonly maxConcurrent?: number;
  /**
   * How long a background operation (the warm pool's own) waits after it was queued before this reconciler
   * takes it (`claimOperation`); default 0. The runtime's is `tenants.warmPool.settleSeconds`.
   */
  readonly backgroundSettleMs?: number;
  readonly log?: (message: string, fields?: Record<string, unknown>) => void;
  /** Kubernetes projects' sandboxes: the platform's own commands in a Pod go through the cluster's exec. */
  readonly kubernetes?: KubernetesProjects;
  /** Kubernetes projects' backups, which the runtime takes from outside the Pod (runtime/kubernetes/backup.ts). */
  readonly kubernetesBackups?: KubernetesBackups;
  /** Where snapshot operations push their images; without it a snapshot operation fails. */
  readonly snapshots?: SnapshotOptions;
  /**
   * The backends this reconciler's operations go through (runtime/backends/registry.ts); absent, the
   * platform's, over this process's engine and the parts above. A runtime that registered a backend of its
   * own gives its registry here and to the API alike.
   */
  readonly backends?: SandboxBackends;
  /**
   * How long the final backup before a stop or snapshot may take (default 120 s). Past it the backup is
   * killed and the operation goes on without it, saying so: a tenant cannot hold up its own stop.
   */
  readonly finalBackupSeconds?: number;
  /** The terminal proxy's recordings; a project's go with its delete. */
  readonly recordingsDir?: string;
  /** What a drift check that finds drift does, unless the project says otherwise (default `report`). */
  readonly driftRemediation?: DriftRemediation;
  /** Failed drift checks in a row after which a project is marked stalled (default 3). */
  readonly driftStallAfter?: number;
  /**
   * Take only the operations queued for this reconciler's program version (`stack.programVersion`): a
   * rollout's worker, which must not run anyone else's operations with a program the runtime is not on.
   */
  readonly onlyOwnProgram?: boolean;
  /**
   * Opens the projects' sealed secrets (runtime/tenants/project-secrets.ts), which every operation that
   * runs the tenant program hands it: without it a project's secret files are written empty.
   */
  readonly secrets?: SecretBox;
  /**
   * gcp: the platform bucket, whose `projects/<id>/` a delete empties, and the tenants' GCS tokens, minted
   * by impersonation after every up and renewed before they expire (runtime/gcp/credentials.ts).
   */
  readonly gcp?: TenantCloud;
  /**
   * How long an operation whose `file://` state backend ran out of space waits for room before it fails
   * (default 30 min). With room again, it runs again: freeing space is all it takes.
   */
  readonly stateSpaceWaitMs?: number;
  /**
   * How long an operation that failed with its sandboxes' cluster out of reach (a backend's `unreachable`)
   * waits for it to answer before it fails (default 30 min). Once it answers, it runs again.
   */
  readonly clusterWaitMs?: number;
  /**
   * How often a running operation of a backend with a cluster (`unreachable`) asks whether the cluster still
   * answers (default 5 s). Two answers in a row that it does not end the engine's run at once and wait for
   * the cluster, rather than leave it to the provider's await of an object, which gives up only after its
   * own timeout (up to 10 minutes).
   */
  readonly clusterWatchMs?: number;
  /**
   * Who holds a sleeping sandbox's ports meanwhile (the SSH waker, runtime/jobs/ssh-waker.ts): every
   * operation takes the project's back first, since a start binds them, and lets them go when it ends.
   */
  readonly sleepingPorts?: { takeBack(projectId: string): Promise<() => void> };
}

/** The engine events kept as progress: small, and enough to show what is happening to which resource. */
function progressOf(event: EngineEvent): Record<string, unknown> | undefined {
  const pre = event.resourcePreEvent?.metadata;
  if (pre) return { type: "resource", op: pre.op, resource: pre.type, urn: pre.urn, status: "started" };
  const out = event.resOutputsEvent?.metadata;
  if (out) return { type: "resource", op: out.op, resource: out.type, urn: out.urn, status: "done" };
  const failed = event.resOpFailedEvent?.metadata;
  if (failed)
    return { type: "resource", op: failed.op, resource: failed.type, urn: failed.urn, status: "failed" };
  const diag = event.diagnosticEvent;
  if (diag && (diag.severity === "error" || diag.severity === "warning"))
    return { type: "diagnostic", severity: diag.severity, message: diag.message.trim() };
  if (event.summaryEvent)
    return {
      type: "summary",
      changes: event.summaryEvent.resourceChanges,
      seconds: event.summaryEvent.durationSeconds,
    };
  return undefined;
}

export class Reconciler {
  private readonly worker: string;
  private readonly leaseMs: number;
  private readonly pollMs: number;
  /** The tenant program this process applies; it only takes operations meant for it (rollouts). */
  private readonly program: ProgramVersion;
  private readonly guestTokens: GuestTokens | undefined;
  private readonly running = new Map<string, Promise<void>>();
  /** The `maxConcurrent` operations this process runs at once. */
  private readonly slots: Slots;
  private timer: NodeJS.Timeout | undefined;
  private stopping = false;
  private polling = false;
  private pollAgain = false;
  private offQueued?: () => void;

  /** The backends, a microVM's key read from beside its state root (this reconciler runs no probe). */
  private readonly backends: SandboxBackends;

  constructor(private readonly options: ReconcilerOptions) {
    this.backends =
      options.backends ??
      platformBackends({
        docker: () => this.docker(),
        kubernetes: options.kubernetes,
        kubernetesBackups: options.kubernetesBackups,
        snapshots: options.snapshots,
        log: (message, fields) => this.log(message, fields),
      });
    this.worker = options.worker ?? `${os.hostname()}:${process.pid}`;
    this.leaseMs = options.leaseMs ?? 30_000;
    this.pollMs = options.pollMs ?? 500;
    this.slots = new Slots(options.maxConcurrent ?? 4, () => {
      if (!this.stopping) void this.poll();
    });
    this.program = options.stack.programVersion ?? currentProgramVersion();
    this.guestTokens =
      options.gcp &&
      new GuestTokens(
        options.gcp.tokens,
        (spec) => this.sandbox(spec),
        (spec) => this.backends.of(spec).traits.tokenCopiedIn,
      );
  }

  private log(message: string, fields?: Record<string, unknown>): void {
    this.options.log?.(message, { worker: this.worker, ...fields });
  }

  start(): void {
    this.stopping = false;
    this.timer = setInterval(() => void this.poll(), this.pollMs);
    // Work queued by this process is claimed at once; the poll finds everyone else's.
    this.offQueued = onOperationsQueued(() => void this.poll());
    void this.poll();
  }

  /** Stops taking work and waits for the operations in flight (their leases keep them safe if we die). */
  async stop(): Promise<void> {
    this.stopping = true;
    clearInterval(this.timer);
    this.offQueued?.();
    await Promise.allSettled(this.running.values());
  }

  get inFlight(): number {
    return this.running.size;
  }

  /** Claims operations until the concurrency limit is reached or none is runnable. */
  async poll(): Promise<void> {
    if (this.stopping) return;
    // A poll asked for during one (work queued after its last claim found none): one more pass after it.
    if (this.polling) {
      this.pollAgain = true;
      return;
    }
    this.polling = true;
    try {
      do {
        this.pollAgain = false;
        await this.claimWhileFree();
      } while (this.pollAgain && !this.stopping);
    } catch (error) {
      this.log("poll failed", { error: (error as Error).message });
    } finally {
      this.polling = false;
    }
  }

  private async claimWhileFree(): Promise<void> {
    while (!this.stopping && this.slots.free) {
      const operation = await claimOperation(
        this.options.db,
        this.worker,
        this.leaseMs,
        this.program.version,
        this.options.onlyOwnProgram,
        this.options.backgroundSettleMs,
      );
      if (!operation) break;
      this.slots.take();
      // An operation whose outcome could not be recorded (the database went away) is not lost: its
      // lease expires and it runs again. Left unhandled, the rejection would end the process.
      const run = this.executeWithPorts(operation)
        .catch((error: Error) =>
          this.log("operation outcome not recorded; it runs again once its lease expires", {
            operation: operation.id,
            error: error.message,
          }),
        )
        .finally(() => {
          this.running.delete(operation.id);
          this.slots.release();
          // A slot is free: the next operation waiting for one starts now, not at the next poll.
          void this.poll();
        });
      this.running.set(operation.id, run);
    }
  }

  private async remediationOf(projectId: string): Promise<DriftRemediation> {
    const chosen = (await driftRemediationOf(this.options.db, projectId)) as DriftRemediation | null;
    return chosen ?? this.options.driftRemediation ?? "report";
  }

  /** Runs the operation with the project's ports its own again (see `sleepingPorts`). */
  private async executeWithPorts(operation: Operation): Promise<void> {
    const giveBack = await this.options.sleepingPorts?.takeBack(operation.project_id);
    try {
      await this.execute(operation);
    } finally {
      giveBack?.();
    }
  }

  /**
   * Runs one claimed operation as a span (lib/telemetry.ts) from the moment it was queued: its wait in the
   * queue, the stack's readiness, and the engine's run (its start, then each resource step) are its children.
   */
  private execute(operation: Operation): Promise<void> {
    const span = startSpan(
      `operation ${operation.kind}`,
      {
        "sandbox.project_id": operation.project_id,
        "sandbox.operation_id": operation.id,
        "sandbox.operation.kind": operation.kind,
        "sandbox.operation.attempt": operation.attempt,
      },
      // A trace of its own: whatever woke the reconciler (a request's create) is not what it runs.
      { parent: ROOT, startTime: operation.created_at },
    );
    startSpan("queue wait", {}, { parent: contextOf(span), startTime: operation.created_at }).end();
    return withSpan(span, () => this.executeInSpan(operation)).then(
      () => span.end(),
      (error: unknown) => {
        spanFailed(span, error);
        span.end();
        throw error;
      },
    );
  }

  private async executeInSpan(operation: Operation): Promise<void> {
    const { db } = this.options;
    let seq = await lastEventSeq(db, operation.id);
    // Only after the first query: a heartbeat started before one that throws would renew the lease forever.
    const abort = new AbortController();
    let lost = false;
    const heartbeat = setInterval(
      async () => {
        try {
          if (!(await renewLease(db, operation.id, this.worker, this.leaseMs))) {
            lost = true;
            abort.abort();
          } else if (await cancelRequested(db, operation.id)) abort.abort();
        } catch {
          // a failed renewal is retried on the next beat; the lease covers a few of them
        }
      },
      Math.max(200, Math.floor(this.leaseMs / 3)),
    );
    const pendingWrites: Promise<void>[] = [];
    let engineSpans: EngineSpans | undefined;
    const stackOptions: TenantStackOptions = {
      ...this.options.stack,
      programVersion: this.program,
      // Each stack's program is its backend's.
      program: (spec, options) => this.backends.program(spec, options),
      onEvent: (event) => {
        engineSpans?.event(event);
        const progress = progressOf(event);
        if (progress)
          pendingWrites.push(appendEvent(db, operation.id, ++seq, progress).catch(() => undefined));
      },
    };
    this.log("operation started", {
      operation: operation.id,
      kind: operation.kind,
      project: operation.project_id,
      attempt: operation.attempt,
    });
    const providerExitsBefore = sharedProviderExits();
    // The engine's own end: the operation's (cancelled, its lease lost) or its cluster's, gone while it ran.
    const engineAbort = new AbortController();
    const endEngine = () => engineAbort.abort();
    abort.signal.addEventListener("abort", endEngine);
    let watch: ClusterWatch | undefined;
    try {
      await inSpan("stack ready", {}, () =>
        readyStack(operation.project_id, operation.attempt, stackOptions, (m) =>
          this.log(m, { operation: operation.id }),
        ),
      );
      watch = await this.watchCluster(operation.project_id, (why) => {
        this.log("operation's cluster gone while its engine runs: the engine is ended", {
          operation: operation.id,
          error: why,
        });
        pendingWrites.push(
          appendEvent(db, operation.id, ++seq, {
            type: "diagnostic",
            severity: "warning",
            message: `${why}: the engine's run is ended, to wait for the cluster`,
          }).catch(() => undefined),
        );
        endEngine();
      });
      const result = await inSpan(`stack ${operation.kind}`, {}, (span) => {
        engineSpans = new EngineSpans(span);
        return this.perform(operation, stackOptions, engineAbort.signal).finally(() => engineSpans?.end());
      });
      watch?.stop();
      await Promise.all(pendingWrites);
      clearInterval(heartbeat);
      if (!lost) await finishOperation(db, operation.id, this.worker, { state: "succeeded", result });
      this.log("operation succeeded", { operation: operation.id, kind: operation.kind });
    } catch (error) {
      watch?.stop();
      // The state backend out of space: the engine's lock or checkpoint could not be written, so
      // the saved state is the one before. The operation keeps its lease and waits for room, then runs
      // again: freeing space is all it takes, no one has to ask again.
      const full = abort.signal.aborted
        ? undefined
        : await stateBackendFullError(engineErrorSummary(error), stackOptions.backendUrl).catch(
            () => undefined,
          );
      const room =
        full !== undefined &&
        operation.attempt < MAX_STATE_SPACE_ATTEMPTS &&
        (await this.waitForRoom(operation.id, full, abort.signal, () => ++seq));
      // Its sandboxes' cluster out of reach (gone during it, or failing it still): the operation keeps its
      // lease and waits for the cluster to answer, then runs again, the stack recovered first.
      const cluster =
        full === undefined && !abort.signal.aborted
          ? (watch?.cut ?? (await this.unreachable(operation.project_id, engineErrorSummary(error))))
          : undefined;
      const back =
        cluster !== undefined &&
        operation.attempt < MAX_CLUSTER_ATTEMPTS &&
        (await this.waitForCluster(operation.id, cluster.why, cluster.ask, abort.signal, () => ++seq));
      await Promise.all(pendingWrites);
      clearInterval(heartbeat);
      if (lost) return; // another worker owns it now
      const cancelled = abort.signal.aborted;
      const message = cancelled
        ? "cancelled"
        : (full ?? (cluster ? `${cluster.why}: ${engineErrorSummary(error)}` : engineErrorSummary(error)));
      const again = await retryReason({
        attempt: operation.attempt,
        cancelled,
        stateBackendFull: full !== undefined,
        room,
        clusterUnreachable: cluster !== undefined,
        clusterBack: back,
        providerExited: !!this.options.stack.sharedProvider && sharedProviderExits() > providerExitsBefore,
        engineDied: async () =>
          engineSignal(error) !== undefined ||
          (await deadEngineLock(operation.project_id, stackOptions).catch(() => false)),
      });
      if (again && (await requeueOperation(db, operation.id, this.worker))) {
        this.log(`operation requeued: ${again}`, {
          operation: operation.id,
          kind: operation.kind,
          error: message,
        });
        return;
      }
      const failed = OPERATION_HANDLERS[operation.kind]?.failed;
      if (!cancelled && failed)
        await failed(db, operation.project_id, message, this.options.driftStallAfter ?? 3);
      else if (!cancelled) await this.setTenantState(operation.project_id, "error", message);
      await finishOperation(db, operation.id, this.worker, {
        state: cancelled ? "cancelled" : "failed",
        error: message,
      });
      this.log("operation failed", { operation: operation.id, kind: operation.kind, error: message });
    } finally {
      abort.signal.removeEventListener("abort", endEngine);
    }
  }

  /** How the project's backend asks whether its sandboxes' cluster is out of reach; none on this host's. */
  private async clusterQuestion(projectId: string): Promise<SandboxBackend["unreachable"]> {
    const tenant = await getTenant(this.options.db, projectId).catch(() => undefined);
    return this.backends.of(tenant?.spec).unreachable;
  }

  /**
   * Watches, while an operation's engine runs, whether the project's sandboxes' cluster still answers (its
   * backend's `unreachable`, every `clusterWatchMs`): after two answers in a row that it does not, `cut`
   * holds why and `onCut` is called once. Undefined where the backend has no cluster.
   */
  private async watchCluster(
    projectId: string,
    onCut: (why: string) => void,
  ): Promise<ClusterWatch | undefined> {
    const ask = await this.clusterQuestion(projectId);
    if (!ask) return undefined;
    const everyMs = this.options.clusterWatchMs ?? 5_000;
    let timer: NodeJS.Timeout | undefined;
    let stopped = false;
    let missed = 0;
    const watch: ClusterWatch = {
      cut: undefined,
      stop: () => {
        stopped = true;
        clearTimeout(timer);
      },
    };
    const look = async () => {
      const why = await ask().catch(() => undefined);
      if (stopped) return;
      missed = why === undefined ? 0 : missed + 1;
      if (why !== undefined && missed >= 2) {
        watch.cut = { why, ask: () => ask() };
        watch.stop();
        onCut(why);
        return;
      }
      timer = setTimeout(() => void look(), everyMs);
    };
    timer = setTimeout(() => void look(), everyMs);
    return watch;
  }

  /**
   * Waits, outside its slot and with its lease kept, until the state backend has room again
   * ({@link STATE_BACKEND_MIN_FREE} free): true then, or when this reconciler stops (the next one waits in
   * its turn); false when the wait ran out or the operation was cancelled. The wait is the operation's
   * progress, so its user sees why it is not done.
   */
  private async waitForRoom(
    operationId: string,
    why: string,
    signal: AbortSignal,
    nextSeq: () => number,
  ): Promise<boolean> {
    const dir = fileBackendDir(this.options.stack.backendUrl)!;
    this.log("operation waits for space on the state backend", { operation: operationId, error: why });
    await appendEvent(this.options.db, operationId, nextSeq(), {
      type: "diagnostic",
      severity: "error",
      message: `${why}; the operation runs again once there is room`,
    }).catch(() => undefined);
    const deadline = Date.now() + (this.options.stateSpaceWaitMs ?? 30 * 60_000);
    return this.slots.outside(async () => {
      for (;;) {
        if (signal.aborted) return false;
        if (this.stopping) return true;
        const space = await stateBackendSpace(dir).catch(() => undefined);
        if (space && space.free >= STATE_BACKEND_MIN_FREE) return true;
        if (Date.now() >= deadline) return false;
        await new Promise((resolve) => setTimeout(resolve, 1000));
      }
    });
  }

  /**
   * Why the project's sandboxes' cluster is out of reach, as its backend tells it (`failure`: the operation's
   * error), and how to ask it again; undefined where it answers, or its backend runs on this host.
   */
  private async unreachable(
    projectId: string,
    failure: string,
  ): Promise<{ why: string; ask: () => Promise<string | undefined> } | undefined> {
    const ask = await this.clusterQuestion(projectId);
    if (!ask) return undefined;
    const why = await ask(failure).catch(() => undefined);
    return why === undefined ? undefined : { why, ask: () => ask() };
  }

  /**
   * Waits, outside its slot and with its lease kept, until the cluster answers again, asking after a
   * doubling pause (0.5 s to 15 s): true then, or when this reconciler stops (the next one waits in its
   * turn); false when the wait (`clusterWaitMs`) ran out or the operation was cancelled. The wait is the
   * operation's progress, so its user sees why it is not done.
   */
  private async waitForCluster(
    operationId: string,
    why: string,
    ask: () => Promise<string | undefined>,
    signal: AbortSignal,
    nextSeq: () => number,
  ): Promise<boolean> {
    this.log("operation waits for its cluster", { operation: operationId, error: why });
    await appendEvent(this.options.db, operationId, nextSeq(), {
      type: "diagnostic",
      severity: "error",
      message: `${why}; the operation runs again once it answers`,
    }).catch(() => undefined);
    const deadline = Date.now() + (this.options.clusterWaitMs ?? 30 * 60_000);
    return this.slots.outside(async () => {
      for (let pauseMs = 500; ; pauseMs = Math.min(pauseMs * 2, 15_000)) {
        if (signal.aborted) return false;
        if (this.stopping) return true;
        if ((await ask().catch((error: Error) => error.message)) === undefined) return true;
        if (Date.now() >= deadline) return false;
        await new Promise((resolve) => setTimeout(resolve, Math.min(pauseMs, deadline - Date.now())));
      }
    });
  }

  private async setTenantState(
    projectId: string,
    state: TenantState,
    error: string | null = null,
  ): Promise<void> {
    await setTenantState(this.options.db, projectId, state, error);
  }

  /** After an `up` of the tenant's stack: the version it is on now. */
  private async applied(spec: TenantSpec): Promise<void> {
    const projectId = spec.projectId;
    await recordProgramVersion(this.options.db, projectId, this.program.version);
    // On GCP the up made (or kept) the tenant's account: its sandbox gets a fresh token of it. A failure
    // (a new account's IAM not propagated yet) does not fail the up: the tenant-tokens job retries each
    // minute (runtime/jobs/tenant-tokens.ts).
    if (!this.options.gcp || !this.backends.of(spec).traits.backupDaemonInside) return;
    await this.options.gcp.tokens
      .renew(projectId)
      .catch((error: Error) =>
        this.log("token renewal failed", { project: projectId, error: error.message }),
      );
    // A microVM that may have booted lost its copy (its /run is a tmpfs): it is given the token again.
    this.guestTokens?.forget(projectId);
    await this.deliverToken(spec);
  }

  /** A microVM's guest gets its tenant's token from the runtime (runtime/gcp/guest-token.ts). */
  private async deliverToken(spec: TenantSpec): Promise<void> {
    await this.guestTokens
      ?.deliver(spec)
      .catch((error: Error) =>
        this.log("token delivery failed", { project: spec.projectId, error: error.message }),
      );
  }

  private engine: Docker | undefined;
  /** The engine the sandboxes run on (snapshots, backups), the one the tenant stacks' provider uses. */
  private docker(): Docker {
    const host = this.options.stack.dockerHost;
    return (this.engine ??= dockerClient(host ? { DOCKER_HOST: host } : process.env));
  }

  /**
   * One backup of /home/agent now, and the daemon's status recorded for backup-status while the sandbox
   * is stopped. Never fails the operation: a sandbox that is not running has nothing new to back up.
   */
  private async finalBackup(spec: TenantSpec): Promise<string> {
    return this.slots.outside(() =>
      this.backends.of(spec).finalBackup(this.options.db, spec, this.options.finalBackupSeconds ?? 120),
    );
  }

  /**
   * Where the platform runs things in a project's sandbox: a container's engine, a microVM's sshd, a kubernetes
   * Pod's exec through the cluster's API.
   */
  private async sandbox(spec: TenantSpec): Promise<SandboxRunner> {
    return this.backends.runner({ projectId: spec.projectId, spec });
  }

  /** The project's secrets, opened; a reconciler without the key refuses rather than write them empty. */
  private async secretsOf(projectId: string): Promise<TenantSecret[]> {
    if (this.options.secrets) return openSecrets(this.options.db, this.options.secrets, projectId);
    if ((await listSecrets(this.options.db, projectId)).length === 0) return [];
    throw new Error(
      `project ${projectId} has secrets and this reconciler has no key to open them (reconcilerOptions gives it the platform's)`,
    );
  }

  private async perform(
    operation: Operation,
    options: TenantStackOptions,
    signal: AbortSignal,
  ): Promise<unknown> {
    const { db } = this.options;
    const tenant = await getTenant(db, operation.project_id);
    if (!tenant) throw new Error(`project ${operation.project_id} has no desired state`);
    const spec = tenant.spec;
    const handler = OPERATION_HANDLERS[operation.kind];
    if (!handler) throw new Error(`unknown operation kind ${String(operation.kind)}`);
    return handler.run({
      operation,
      db,
      spec,
      backend: this.backends.of(spec),
      stack: options,
      // What runs the tenant program gets the project's secrets (never part of the recorded spec).
      withSecrets: async () => ({ ...options, signal, secrets: await this.secretsOf(spec.projectId) }),
      programVersion: this.program.version,
      setState: (state) => this.setTenantState(spec.projectId, state),
      applied: () => this.applied(spec),
      finalBackup: () => this.finalBackup(spec),
      forgetToken: () => this.guestTokens?.forget(spec.projectId),
      remediation: () => this.remediationOf(spec.projectId),
      gcp: this.options.gcp,
      recordingsDir: this.options.recordingsDir,
    });
  }
}
