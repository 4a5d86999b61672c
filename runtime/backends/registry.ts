// The backends by kind: the one place that tells them apart. The API, the terminal proxy and the reconciler
// resolve a project's backend here from the spec they hold (or read it once) and go through its seam.
import type { TenantSpec } from "../../components/tenant/spec.js";
import type { Queryable } from "../db.js";
import type { SandboxObservation } from "../kubernetes/sandbox.js";
import type { SandboxRunner, SandboxRunners } from "../sandbox/runner.js";
import { TMUX_SESSION, type SandboxAttacher } from "../terminal/attach.js";
import { getTenant } from "../tenants/service.js";
import type { BackendKind, BackendParts, BackendTarget, BackendTraits, SandboxBackend } from "./backend.js";
import { containerBackend, CONTAINER_TRAITS } from "./container.js";
import { kubernetesBackend, KUBERNETES_TRAITS } from "./kubernetes.js";
import { microVmBackend, MICROVM_TRAITS } from "./microvm.js";

export type SandboxObserver = (
  projectId: string,
  kind: BackendKind,
) => Promise<SandboxObservation> | undefined;

export class SandboxBackends {
  constructor(private readonly byKind: { readonly [kind in BackendKind]: SandboxBackend }) {}

  /** The backend a recorded spec names; a project with no spec recorded yet is a container's. */
  of(spec: TenantSpec | undefined): SandboxBackend {
    return this.byKind[spec?.backend ?? "container"];
  }

  runner(target: BackendTarget): Promise<SandboxRunner> {
    return this.of(target.spec).runner(target);
  }

  /** Each project's runner, its spec read once from `db`. */
  runners(db: Queryable): SandboxRunners {
    return async (projectId) => this.runner({ projectId, spec: (await getTenant(db, projectId))?.spec });
  }

  /** The live sandbox of a project whose recorded backend is `kind`, where that backend observes one. */
  observer(): SandboxObserver {
    return (projectId, kind) => this.byKind[kind].observe?.(projectId);
  }

  /** Each project's terminal, its spec read once from `db`. */
  attacher(db: Queryable): SandboxAttacher {
    return {
      attach: async (projectId, session = TMUX_SESSION) => {
        const spec = (await getTenant(db, projectId))?.spec;
        return this.of(spec).attach({ projectId, spec }, session);
      },
    };
  }
}

/** What each kind of backend is, whatever a runtime configured for it (the API asks before it queues work). */
export function backendTraits(kind: BackendKind | undefined): BackendTraits {
  return { container: CONTAINER_TRAITS, microvm: MICROVM_TRAITS, kubernetes: KUBERNETES_TRAITS }[
    kind ?? "container"
  ];
}

/** The container, microVM and kubernetes backends. */
export function platformBackends(parts: BackendParts): SandboxBackends {
  return new SandboxBackends({
    container: containerBackend(parts),
    microvm: microVmBackend(parts),
    kubernetes: kubernetesBackend(parts),
  });
}
