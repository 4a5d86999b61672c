// The backends by kind: the one place that tells them apart. The API, the terminal proxy, the jobs and the
// reconciler resolve a project's backend here from the spec they hold (or read it once) and go through its
// seam. A runtime may register a backend of its own beside the platform's (`register`): nothing else in
// the runtime names one.
import type { FoundDevServer } from "../../lib/dev-server-names.js";
import type { PulumiFn } from "@pulumi/pulumi/automation/index.js";
import { PLATFORM_BACKENDS, type TenantSpec, type TenantSpecInput } from "../../components/tenant/spec.js";
import type { Queryable } from "../store/db.js";
import type { SandboxObservation } from "../kubernetes/sandbox.js";
import { SandboxNotRunningError } from "../sandbox/exec.js";
import type { SandboxRunner, SandboxRunners } from "../sandbox/runner.js";
import { TMUX_SESSION, type SandboxAttacher } from "../terminal/attach.js";
import {
  TenantRequestError,
  type AdmitRequest,
  type BackendFields,
  type TenantDefaults,
} from "../tenants/service.js";
import type { TenantStackOptions } from "../tenants/stack.js";
import type { BackendKind, BackendParts, BackendTarget, BackendTraits, SandboxBackend } from "./backend.js";
import { containerBackend } from "./container.js";
import { kubernetesBackend } from "./kubernetes.js";
import { microVmBackend } from "./microvm.js";
import { getTenant } from "../store/tenants.js";

/**
 * Bandwidth caps asked of a backend whose traits have none: a 400 at a create (the body chose the backend, or
 * the platform's default did), a 409 at a PATCH (the request is sound; the project's sandbox cannot).
 */
export const bandwidthRefused = (kind: BackendKind, status: 400 | 409 = 400) =>
  new TenantRequestError(
    status,
    `bandwidth is shaped by tc on a container's bridge: a ${kind} project's sandbox is no container of this host's engine, and takes no caps yet`,
  );

/** The backend an absent `backend` names: every spec recorded before there were two. */
const DEFAULT_KIND = "container";

/** A backend's name as a runtime may register it (a spec's `backend`, a create's `backend`). */
const KIND_NAME = /^[a-z][a-z0-9-]{0,30}$/;

export class SandboxBackends {
  private readonly byKind = new Map<BackendKind, SandboxBackend>();

  constructor(backends: Iterable<SandboxBackend>) {
    for (const backend of backends) this.register(backend);
  }

  /** Adds `backend` under its kind, which no other backend here has. */
  register(backend: SandboxBackend): this {
    if (!KIND_NAME.test(backend.kind))
      throw new Error(`a backend's kind must be ${KIND_NAME.source}, not ${JSON.stringify(backend.kind)}`);
    if (this.byKind.has(backend.kind)) throw new Error(`a ${backend.kind} backend is already registered`);
    this.byKind.set(backend.kind, backend);
    return this;
  }

  /** The kinds registered, in order. */
  kinds(): BackendKind[] {
    return [...this.byKind.keys()];
  }

  /** The backend of `kind` (absent: a container's); one not registered here is an error naming those that are. */
  get(kind: BackendKind | null | undefined): SandboxBackend {
    const backend = this.byKind.get(kind ?? DEFAULT_KIND);
    if (!backend)
      throw new Error(`backend ${kind} is not one this runtime runs (${this.kinds().join(", ")})`);
    return backend;
  }

  /** The backend a recorded spec names; a project with no spec recorded yet is a container's. */
  of(spec: Pick<TenantSpecInput, "backend"> | undefined): SandboxBackend {
    return this.get(spec?.backend);
  }

  /** What the backend of `kind` is (the API asks before it queues work). */
  traits(kind: BackendKind | null | undefined): BackendTraits {
    return this.get(kind).traits;
  }

  /**
   * A create's backend (absent: a container), admitted: the spec fields it adds, or the backend's
   * TenantRequestError (409) naming why this platform cannot make one now. The API's create body admits
   * only the kinds registered here.
   */
  admit(kind: BackendKind | undefined, defaults: TenantDefaults, asked: AdmitRequest = {}): BackendFields {
    const backend = this.get(kind);
    if (asked.isolation !== undefined && !backend.traits.isolation)
      throw new TenantRequestError(
        400,
        `isolation is a container's choice of runtime: a ${backend.kind} project's sandbox is no container of this host's engine, and takes none`,
      );
    if (asked.nestedVirtualization && !backend.traits.nestedVirtualization)
      throw new TenantRequestError(
        400,
        `nested_virtualization is a microVM's: a ${backend.kind} project's sandbox has no kernel of its own to run KVM in`,
      );
    if (asked.bandwidth && !backend.traits.bandwidth) throw bandwidthRefused(backend.kind);
    return backend.admit(defaults, asked);
  }

  /** The stack program of each spec, by its backend (TenantStackOptions.program). */
  program(spec: TenantSpecInput, options: TenantStackOptions): Promise<PulumiFn> {
    return this.of(spec).program(spec, options);
  }

  /** The runner of the target's backend; a sandbox it cannot reach is named as the backend names it. */
  async runner(target: BackendTarget): Promise<SandboxRunner> {
    const backend = this.of(target.spec);
    const named = <T>(call: () => Promise<T>) => namingSandbox(call, backend.traits.sandboxNoun);
    const runner = await named(() => backend.runner(target));
    return {
      start: (id, command, onOutput) => named(() => runner.start(id, command, onOutput)),
      signal: (id, signal) => named(() => runner.signal(id, signal)),
      run: (argv, options) => named(() => runner.run(argv, options)),
    };
  }

  /** Each project's runner, its spec read once from `db`. */
  runners(db: Queryable): SandboxRunners {
    return async (projectId) => this.runner({ projectId, spec: (await getTenant(db, projectId))?.spec });
  }

  /** The live sandbox of a project whose recorded backend is `kind`, where that backend observes one. */
  observe(projectId: string, kind: BackendKind): Promise<SandboxObservation> | undefined {
    return this.byKind.get(kind)?.observe?.(projectId);
  }

  /**
   * The allowlist of `after` in force at once where its backend can do that ahead of the stack's update
   * (SandboxBackend.applyAllowlist); nothing where the update alone will.
   */
  async applyAllowlist(before: TenantSpec, after: TenantSpec): Promise<void> {
    await this.of(after).applyAllowlist?.(before, after);
  }

  /**
   * Each project's dev servers (SandboxBackend.devServers: read at most `maxAgeMs` ago, default now), its spec
   * read from `db`: undefined while its sandbox does not run, null where its backend does not find them (its
   * ports are declared).
   */
  devServers(
    db: Queryable,
  ): (projectId: string, maxAgeMs?: number) => Promise<FoundDevServer[] | undefined | null> {
    return async (projectId, maxAgeMs) => {
      const spec: TenantSpec | undefined = (await getTenant(db, projectId))?.spec;
      const find = this.of(spec).devServers;
      return find ? find({ projectId, spec }, maxAgeMs) : null;
    };
  }

  /** Each project's terminal, its spec read once from `db`. */
  attacher(db: Queryable): SandboxAttacher {
    return {
      attach: async (projectId, session = TMUX_SESSION) => {
        const spec: TenantSpec | undefined = (await getTenant(db, projectId))?.spec;
        return this.of(spec).attach({ projectId, spec }, session);
      },
    };
  }
}

/** `call`, its SandboxNotRunningError given the sandbox's noun (the API says "its Pod is down"). */
async function namingSandbox<T>(call: () => Promise<T>, noun: string): Promise<T> {
  try {
    return await call();
  } catch (error) {
    if (error instanceof SandboxNotRunningError) error.sandboxNoun ??= noun;
    throw error;
  }
}

/** The kinds `backends` runs, for a schema's enum (the platform's when none is given). */
export function backendKinds(backends: SandboxBackends | undefined): readonly [string, ...string[]] {
  const kinds = backends?.kinds() ?? [];
  return kinds.length > 0 ? (kinds as [string, ...string[]]) : PLATFORM_BACKENDS;
}

/** The container, microVM and kubernetes backends. */
export function platformBackends(parts: BackendParts): SandboxBackends {
  return new SandboxBackends([containerBackend(parts), microVmBackend(parts), kubernetesBackend(parts)]);
}
