// The warm pool: tenant stacks made ahead of demand, reconciled and running with no owner, so a
// create can hand one out at once. A member is an ordinary tenant whose owner is POOL_OWNER and which no
// project row names yet. It is ready once its stack is up and a first command has run in it through the
// exec API's own path (ready means interactive, not "container started"); one whose command fails is
// deleted and replaced, never handed out. A claim gives a ready member an owner in one transaction, applies
// what makes it the owner's before the answer leaves (the SSH key, the allowlist), and queues an update
// that reconciles its stack with the owner's spec, so it ends up exactly as a cold create would have made it.
// The pool's own operations (its creates, drains, and a claim's update that makes no route) are background
// work: a create beyond the pool, which someone waits on, runs before them (runtime/store/operations.ts).
import { createHash, randomUUID } from "node:crypto";
import * as path from "node:path";
import type { Database, Queryable } from "../store/db.js";
import { enqueueOperation, onAnyOperationFinished, operationsQueued } from "../store/operations.js";
import {
  addPoolMember,
  lockReadyMember,
  lockUncheckedMember,
  lockUnclaimed,
  markMemberClaimed,
  markMemberReady,
  removePoolMember,
  unclaimedMemberCounts,
  unclaimedMembers,
  uncheckedMembers,
} from "../store/pool.js";
import type { SandboxRunners } from "../sandbox/runner.js";
import { inSpan } from "../../lib/telemetry.js";
import { assignTenantOwner, lockOwnerProjects } from "../store/tenants.js";
import { TenantSpec, type TenantSpecInput } from "../../components/tenant/spec.js";
import { SANDBOX_SSH_USER } from "../../lib/constants.js";
import { writeFileAtomic } from "../../lib/files.js";
import { generateSshKeyPair } from "../../lib/ssh-keygen.js";
import type { WarmPoolConfig } from "../../stacks/config.js";
import { applyHostAllowlist } from "./allowlist.js";
import { requestCreateIn, type TenantDefaults } from "./service.js";

/** The owner of a member nobody has claimed (never a user id: those are UUIDs). */
export const POOL_OWNER = "pool";

/** What a member runs before it is ready: the first command of anyone who claims it would run the same way. */
export const READY_CHECK_ARGV = ["true"] as const;
/** How long that command may take before the member is judged broken (and replaced). */
const READY_CHECK_MS = 30_000;

/** `agent-sandbox:tenants.warmPool` (stacks/config.ts): what the pool itself reads of it. */
export type WarmPoolSettings = Pick<WarmPoolConfig, "size" | "idleSize" | "idleMinutes">;

/** What one claim needs: the new owner and what is theirs. */
export interface ClaimRequest {
  readonly ownerId: string;
  readonly sshPublicKey: string;
  readonly allowlist?: string[];
  readonly ports?: TenantSpecInput["ports"];
  readonly idempotencyKey?: string;
}

/** What the pool holds, for `/metrics`, the operator's view and the tests. */
export interface PoolStatus {
  readonly enabled: boolean;
  readonly class: string;
  /** How many ready members it aims at now (`size`, or `idleSize` after `idleMinutes` without a claim). */
  readonly target: number;
  /** Members whose stack is up and whose first command has run: what a claim hands out. */
  readonly ready: number;
  /** Members being created, or up and waiting for their first command to run. */
  readonly creating: number;
  /** Members whose create failed (drained by the next refill). */
  readonly failed: number;
  readonly claims: number;
  /** Creates that found no ready member and were created cold. */
  readonly misses: number;
  readonly lastError: string | null;
  readonly lastClaimAt: string | null;
}

/**
 * What a member is made for: the image and the limits a create without options gets. A member of another
 * class (the default image changed) is never handed out, and the refill drains it.
 */
export function poolClass(defaults: Pick<TenantDefaults, "image">): string {
  const limits = TenantSpec.shape.limits.parse(undefined);
  return createHash("sha256")
    .update(JSON.stringify({ image: defaults.image, limits }))
    .digest("hex")
    .slice(0, 16);
}

/**
 * Why the host cannot hold the pool, if it cannot: its members' memory limits (a create's default) beyond
 * the host's memory, times `memoryOvercommit` where the operator allows more limits than memory (an idle
 * member holds a few tens of MiB of its limit). Subnets and ports are the config schema's check
 * (stacks/config.ts).
 */
export function poolCapacityProblem(
  settings: Pick<WarmPoolConfig, "size"> & Partial<WarmPoolConfig>,
  hostMemoryBytes: number,
): string | undefined {
  const memoryMiB = TenantSpec.shape.limits.parse(undefined).memoryMiB;
  const hostMiB = Math.floor(hostMemoryBytes / 1024 / 1024);
  const overcommit = settings.memoryOvercommit ?? 1;
  const allowed = Math.floor(hostMiB * overcommit);
  if (settings.size * memoryMiB > allowed)
    return (
      `${settings.size} members of ${memoryMiB} MiB each need ${settings.size * memoryMiB} MiB; this host has ${hostMiB} MiB` +
      (overcommit === 1 ? "" : ` (${allowed} MiB of limits with memoryOvercommit ${overcommit})`)
    );
  return undefined;
}

export class WarmPool {
  private claims = 0;
  private misses = 0;
  private lastError: string | null = null;
  /** Since when nothing has been claimed (the pool's start, then each claim): the idle shrink's clock. */
  private idleSince: number;
  private lastClaimAt: number | undefined;
  private timer: NodeJS.Timeout | undefined;
  private wakeTimer: NodeJS.Timeout | undefined;
  private interval = 5_000;
  private refilling: Promise<void> | undefined;
  private checking: Promise<void> | undefined;
  private checkAgain = false;
  private stopListening: (() => void) | undefined;
  readonly class: string;

  constructor(
    private readonly options: {
      readonly db: Database;
      readonly defaults: TenantDefaults;
      readonly settings: WarmPoolSettings;
      /** Each member's sandbox, by its backend: where its first command runs before it is handed out. */
      readonly runners: SandboxRunners;
      readonly log?: (message: string, fields?: Record<string, unknown>) => void;
      /** Whether the image a member runs is there; without it every refill would make failing stacks. */
      readonly imageAvailable?: (image: string) => Promise<boolean>;
      /** Time, for the idle shrink (the tests move it). */
      readonly now?: () => number;
    },
  ) {
    this.class = poolClass(options.defaults);
    this.idleSince = this.now();
  }

  private now(): number {
    return (this.options.now ?? Date.now)();
  }

  get enabled(): boolean {
    return this.options.settings.size > 0;
  }

  /** The size it aims at now: smaller once nothing has been claimed for a while. */
  target(): number {
    const { size, idleSize, idleMinutes } = this.options.settings;
    return this.now() - this.idleSince > idleMinutes * 60_000 ? Math.min(idleSize, size) : size;
  }

  /**
   * Hands the oldest ready member to `request.ownerId` inside the caller's transaction (which records the
   * project row with it), or answers undefined when there is none: the caller creates cold. A member is
   * ready when its stack is up (running, no operation pending) and of this pool's class; `skip locked`
   * lets concurrent claims each take another one, so none is handed out twice. The owner's lock comes
   * first: until this transaction ends, no other claim or create for the same owner runs, so the caller's
   * count of the owner's projects (its quota) sees every one that was made before.
   */
  async claim(tx: Queryable, request: ClaimRequest): Promise<string | undefined> {
    if (!this.enabled) return undefined;
    return inSpan("pool claim", {}, async (span) => {
      const claimed = await this.claimIn(tx, request);
      span.setAttribute("sandbox.pool.claimed", claimed !== undefined);
      return claimed;
    });
  }

  private async claimIn(tx: Queryable, request: ClaimRequest): Promise<string | undefined> {
    await lockOwnerProjects(tx, request.ownerId);
    const member = await lockReadyMember(tx, this.class, POOL_OWNER);
    if (!member || !member.spec.host.sshKeysRoot) {
      this.misses += 1;
      return undefined;
    }
    const spec = TenantSpec.parse({
      ...member.spec,
      ownerId: request.ownerId,
      sshPublicKey: request.sshPublicKey,
      ...(request.allowlist ? { allowlist: request.allowlist } : {}),
      ...(request.ports ? { ports: request.ports } : {}),
    });
    await assignTenantOwner(tx, member.project_id, request.ownerId, spec);
    await markMemberClaimed(tx, member.project_id, request.ownerId);
    // Before the answer (and before the commit: a failure here leaves the member unclaimed): the owner's
    // key is what sshd reads at the next login, and the allowlist what Squid applies to the next request.
    await writeFileAtomic(
      path.join(spec.host.sshKeysRoot!, spec.projectId, SANDBOX_SSH_USER),
      `${request.sshPublicKey}\n`,
      "0644",
    );
    await applyHostAllowlist(member.spec, spec);
    // The rest (front-door routes, the stack's own record of all of it) is the stack's update, queued: in the
    // background (after the creates of a burst beyond the pool) unless it makes the owner's routes.
    await enqueueOperation(tx, member.project_id, "update", request.idempotencyKey, undefined, {
      background: !request.ports?.length,
    });
    this.claims += 1;
    this.lastClaimAt = this.idleSince = this.now();
    this.wake();
    return member.project_id;
  }

  /** Counts by state of this pool's unclaimed members. */
  async status(): Promise<PoolStatus> {
    const rows = await unclaimedMemberCounts(this.options.db);
    const count = (...states: string[]) =>
      rows.filter((r) => states.includes(r.state)).reduce((sum, r) => sum + r.n, 0);
    return {
      enabled: this.enabled,
      class: this.class,
      target: this.enabled ? this.target() : 0,
      ready: count("running"),
      creating: count("creating", "checking"),
      failed: count("error"),
      claims: this.claims,
      misses: this.misses,
      lastError: this.lastError,
      lastClaimAt: this.lastClaimAt === undefined ? null : new Date(this.lastClaimAt).toISOString(),
    };
  }

  /**
   * One pass: drains members that can never be handed out (failed, of another class, beyond the target)
   * and queues creates up to the target. Failed creates are drained, and while the last pass drained one
   * the next waits: an image that no longer exists empties the pool instead of failing in a loop, and
   * `lastError` says why (cold creates go on meanwhile).
   */
  async refill(): Promise<void> {
    this.refilling ??= this.refillOnce().finally(() => (this.refilling = undefined));
    return this.refilling;
  }

  private async refillOnce(): Promise<void> {
    const { db, defaults } = this.options;
    // Members whose stack came up in another process, or before this one started, are checked here.
    await this.check();
    const target = this.enabled ? this.target() : 0;
    const drained = await db.transaction(async (tx) => {
      // Read without locks (claims go on meanwhile); only what is drained is locked, and a member a claim
      // holds is not (it is the claim's). A member being claimed counts as had until the claim commits: the
      // next pass, soon after the claim, makes its replacement.
      const rows = await unclaimedMembers(tx);
      const failed = rows.filter((r) => r.state === "error");
      const stale = rows.filter((r) => r.state !== "error" && r.class !== this.class);
      const current = rows.filter((r) => r.state !== "error" && r.class === this.class);
      // Newest first: the surplus drained is what was made last (the oldest are the most settled, and the
      // ones a claim takes first).
      const surplus = current.slice(0, Math.max(0, current.length - target));
      for (const member of failed)
        this.lastError = `pool member ${member.project_id} failed: ${member.last_error ?? "unknown error"}`;
      const candidates = [...failed, ...stale, ...surplus];
      const locked = await lockUnclaimed(
        tx,
        candidates.map((m) => m.project_id),
      );
      const drain = candidates.filter((m) => locked.has(m.project_id));
      for (const member of drain) {
        await removePoolMember(tx, member.project_id);
        await enqueueOperation(tx, member.project_id, "delete", undefined, undefined, { background: true });
      }
      return {
        drained: drain.length,
        failed: failed.filter((m) => locked.has(m.project_id)).length,
        have: current.length - surplus.length,
      };
    });
    if (drained.drained > 0)
      this.options.log?.("warm pool drained members", { drained: drained.drained, failed: drained.failed });
    // A pass that found failed members makes none: the next one (after the interval) tries again.
    if (drained.failed === 0 && drained.have >= target && drained.have > 0) this.lastError = null;
    if (drained.failed > 0 || drained.have >= target) return;
    if (this.options.imageAvailable && !(await this.options.imageAvailable(defaults.image))) {
      this.lastError = `the pool's image ${defaults.image} is not on the engine: no member is made, creates are cold`;
      this.options.log?.("warm pool cannot refill", { error: this.lastError });
      return;
    }
    for (let i = drained.have; i < target; i++) {
      const projectId = randomUUID();
      // A key nobody holds: no one can log in to a member until a claim writes its owner's.
      const keys = await generateSshKeyPair(`pool@${projectId}`);
      try {
        await db.transaction(async (tx) => {
          await requestCreateIn(tx, defaults, {
            projectId,
            ownerId: POOL_OWNER,
            sshPublicKey: keys.publicKey,
            // After every create a user waits on: a burst beyond the pool runs its own stacks first.
            background: true,
          });
          await addPoolMember(tx, projectId, this.class);
        });
      } catch (error) {
        this.lastError = `pool refill: ${(error as Error).message}`;
        this.options.log?.("warm pool refill failed", { error: (error as Error).message });
        return;
      }
    }
  }

  /**
   * Runs a first command in every member whose stack is up and which has not run one: it is ready when that
   * succeeds; when it fails (or outlasts {@link READY_CHECK_MS}), the member is deleted and the next refill
   * replaces it. Asked again while it runs, it runs once more after (a member that came up meanwhile).
   */
  async check(): Promise<void> {
    if (this.checking) {
      this.checkAgain = true;
      return this.checking;
    }
    this.checking = (async () => {
      do {
        this.checkAgain = false;
        const members = await uncheckedMembers(this.options.db, this.class, POOL_OWNER);
        await Promise.all(members.map((member) => this.checkMember(member)));
      } while (this.checkAgain);
    })().finally(() => (this.checking = undefined));
    return this.checking;
  }

  private async checkMember(projectId: string): Promise<void> {
    const started = Date.now();
    try {
      await inSpan(
        "pool check",
        { "sandbox.project_id": projectId },
        () => firstCommand(this.options.runners, projectId),
        { root: true },
      );
      await markMemberReady(this.options.db, projectId);
    } catch (error) {
      this.lastError = `pool member ${projectId} failed its readiness check (${READY_CHECK_ARGV.join(" ")} through the exec path) after ${Date.now() - started} ms: ${(error as Error).message}; it is deleted and replaced`;
      this.options.log?.("warm pool member not ready", { project: projectId, error: this.lastError });
      const drained = await this.options.db.transaction(async (tx) => {
        // Only while nobody holds it and it is still unchecked (another runtime's check may have passed it).
        if (!(await lockUncheckedMember(tx, projectId))) return false;
        await removePoolMember(tx, projectId);
        await enqueueOperation(tx, projectId, "delete", undefined, undefined, { background: true });
        return true;
      });
      if (drained) {
        operationsQueued();
        this.wake();
      }
    }
  }

  /** Refills every `intervalMs` (and soon after a claim) until {@link stop}. */
  start(intervalMs = 5_000): void {
    if (this.timer) return;
    // A member is checked as soon as its create finishes here, not at the next refill.
    this.stopListening = onAnyOperationFinished(() => {
      if (this.timer) void this.check().catch(() => undefined);
    });
    const loop = () => {
      this.timer = setTimeout(() => {
        this.refill()
          .catch((error: Error) => {
            this.lastError = `pool refill: ${error.message}`;
            this.options.log?.("warm pool refill failed", { error: error.message });
          })
          .finally(() => {
            if (this.timer) loop();
          });
      }, intervalMs);
      this.timer.unref();
    };
    this.interval = intervalMs;
    loop();
    void this.refill().catch(() => undefined);
  }

  /** After a claim: a refill shortly (after the claim's transaction commits), not at the next interval. */
  private wake(): void {
    if (!this.timer || this.wakeTimer) return;
    this.wakeTimer = setTimeout(
      () => {
        this.wakeTimer = undefined;
        void this.refill().catch(() => undefined);
      },
      Math.min(this.interval, 500),
    );
    this.wakeTimer.unref();
  }

  async stop(): Promise<void> {
    this.stopListening?.();
    this.stopListening = undefined;
    clearTimeout(this.timer);
    clearTimeout(this.wakeTimer);
    this.timer = undefined;
    this.wakeTimer = undefined;
    await this.refilling?.catch(() => undefined);
    await this.checking?.catch(() => undefined);
  }
}

/**
 * Runs {@link READY_CHECK_ARGV} in the project's sandbox as the exec API would (the same runner, the same
 * wrapper, as the agent); throws naming why when it does not exit 0 within {@link READY_CHECK_MS}.
 */
async function firstCommand(runners: SandboxRunners, projectId: string): Promise<void> {
  const runner = await runners(projectId);
  const id = `pool-check-${randomUUID()}`;
  const started = await runner.start(id, { argv: READY_CHECK_ARGV }, () => undefined);
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<"late">((resolve) => (timer = setTimeout(() => resolve("late"), READY_CHECK_MS)));
  try {
    const code = await Promise.race([started.exited, late]);
    if (code === "late") {
      started.detach();
      await runner.signal(id, "KILL").catch(() => undefined);
      throw new Error(`it did not finish within ${READY_CHECK_MS / 1000} s`);
    }
    if (code !== 0) throw new Error(`it exited ${code}`);
  } finally {
    clearTimeout(timer);
  }
}
