// The backend registry (runtime/backends/registry.ts): the one place that picks a project's backend, from
// the spec it is given or reads once. Backends of the test's own record what they were asked.
import { describe, expect, it } from "vitest";
import type { TenantSpec } from "../../components/tenant/spec.js";
import type { Queryable } from "../../runtime/db.js";
import type { BackendKind, BackendTarget, SandboxBackend } from "../../runtime/backends/backend.js";
import { platformBackends, SandboxBackends } from "../../runtime/backends/registry.js";
import type { SandboxRunner } from "../../runtime/sandbox/runner.js";
import type { TerminalAttachment } from "../../runtime/terminal/attach.js";

const asked: string[] = [];
const recording = (kind: BackendKind): SandboxBackend => ({
  kind,
  runner: async ({ projectId, spec }: BackendTarget) => {
    asked.push(`${kind} runner ${projectId} ${spec?.backend ?? "-"}`);
    return { kind } as unknown as SandboxRunner;
  },
  attach: async ({ projectId }: BackendTarget, session: string) => {
    asked.push(`${kind} attach ${projectId} ${session}`);
    return { kind } as unknown as TerminalAttachment;
  },
});
const registry = () =>
  new SandboxBackends({
    container: recording("container"),
    microvm: recording("microvm"),
    kubernetes: recording("kubernetes"),
  });

/** A database holding one tenant row per project, counting its queries. */
function tenants(specs: Record<string, Partial<TenantSpec>>) {
  const queries: string[] = [];
  const db: Queryable = {
    async query<Row>(sql: string, params?: unknown[]) {
      queries.push(sql);
      const spec = specs[params?.[0] as string];
      return { rows: (spec ? [{ project_id: params?.[0], spec }] : []) as Row[] };
    },
  };
  return { db, queries };
}

describe("the backend registry", () => {
  it("picks the backend the recorded spec names; an absent backend, or no spec yet, is a container", async () => {
    asked.length = 0;
    const backends = registry();
    const spec = (backend?: BackendKind) => ({ projectId: "p", backend }) as TenantSpec;
    expect(backends.of(spec("microvm")).kind).toBe("microvm");
    expect(backends.of(spec("kubernetes")).kind).toBe("kubernetes");
    expect(backends.of(spec("container")).kind).toBe("container");
    expect(backends.of(spec()).kind).toBe("container");
    expect(backends.of(undefined).kind).toBe("container");
    await backends.runner({ projectId: "p", spec: spec("microvm") });
    expect(asked).toEqual(["microvm runner p microvm"]);
  });

  it("reads a project's spec once for its runner or terminal, and passes it on", async () => {
    asked.length = 0;
    const { db, queries } = tenants({ vm: { backend: "microvm" }, pod: { backend: "kubernetes" }, old: {} });
    const backends = registry();
    await backends.runners(db)("vm");
    await backends.runners(db)("pod");
    await backends.runners(db)("old");
    await backends.runners(db)("creating");
    expect(queries).toHaveLength(4);
    await backends.attacher(db).attach("vm");
    await backends.attacher(db).attach("pod", "second");
    expect(queries).toHaveLength(6);
    expect(asked).toEqual([
      "microvm runner vm microvm",
      "kubernetes runner pod kubernetes",
      "container runner old -",
      "container runner creating -",
      "microvm attach vm main",
      "kubernetes attach pod second",
    ]);
  });

  it("refuses, naming why, a kubernetes project where no cluster is configured, and a microVM while the host is probed", async () => {
    const none = platformBackends({
      docker: () => {
        throw new Error("no engine here");
      },
      microvm: () => undefined,
    });
    const target = (backend: BackendKind) => ({
      projectId: "p1",
      spec: { projectId: "p1", backend, subnet: "10.0.0.0/24" } as TenantSpec,
    });
    await expect(none.runner(target("kubernetes"))).rejects.toThrow(
      "project p1 runs on a kubernetes cluster, and this runtime has none configured",
    );
    await expect(none.runner(target("microvm"))).rejects.toThrow(
      "this runtime cannot reach microVMs (still probing the host; try again in seconds)",
    );
    const unavailable = platformBackends({
      docker: () => {
        throw new Error("no engine here");
      },
      microvm: () => ({ available: false, reason: "no KVM and no QEMU" }),
    });
    await expect(
      unavailable.attacher(tenants({ p1: target("microvm").spec }).db).attach("p1"),
    ).rejects.toThrow("this runtime cannot reach microVMs (no KVM and no QEMU)");
  });
});
