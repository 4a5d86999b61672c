// The backends by kind: the one place that tells them apart. The API, the terminal proxy and the reconciler
// resolve a project's backend here from the spec they hold (or read it once) and go through its seam.
import type Docker from "dockerode";
import type { TenantSpec } from "../../components/tenant/spec.js";
import type { Queryable } from "../db.js";
import type { MicroVmSupport } from "../host/microvm.js";
import type { KubernetesProjects } from "../kubernetes/sandbox.js";
import type { SandboxRunner, SandboxRunners } from "../sandbox/runner.js";
import { TMUX_SESSION, type SandboxAttacher } from "../terminal/attach.js";
import { getTenant } from "../tenants/service.js";
import type { BackendKind, BackendTarget, SandboxBackend } from "./backend.js";
import { containerBackend } from "./container.js";
import { kubernetesBackend } from "./kubernetes.js";
import { microVmBackend } from "./microvm.js";

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

/** What the platform's three backends reach their sandboxes with. */
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
}

/** The container, microVM and kubernetes backends. */
export function platformBackends(parts: BackendParts): SandboxBackends {
  return new SandboxBackends({
    container: containerBackend(parts.docker),
    microvm: microVmBackend(parts.microvm),
    kubernetes: kubernetesBackend(parts.kubernetes),
  });
}
