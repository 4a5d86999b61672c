// The GCP tenants' token renewal, a job under the scheduler's leader (runtime/jobs/tenant-tokens.ts): which
// sandboxes get their token renewed (their backup daemon runs inside and reads it) and which guests get it
// copied in, by each project's backend, and what a failure leaves as the run's detail.
import { describe, expect, it } from "vitest";
import type { TenantSpec } from "../../components/tenant/spec.js";
import { platformBackends } from "../../runtime/backends/registry.js";
import type { Database } from "../../runtime/store/db.js";
import { tenantTokensJob } from "../../runtime/jobs/tenant-tokens.js";

const backends = platformBackends({
  docker: () => {
    throw new Error("no engine here");
  },
});
const spec = (projectId: string, backend?: string) => ({ projectId, backend, running: true }) as TenantSpec;
const rows = [spec("box"), spec("pod", "kubernetes"), spec("vm", "microvm")].map((s) => ({
  project_id: s.projectId,
  spec: s,
}));
const db = {
  async query(sql: string) {
    expect(sql).toContain("where state = 'running'");
    return { rows };
  },
} as unknown as Database;

describe("the tenant-tokens job", () => {
  it("renews the tokens of sandboxes whose daemon reads one, and offers each guest its token", async () => {
    const renewed: string[][] = [];
    const offered: string[] = [];
    const job = tenantTokensJob(
      db,
      { renewDue: async (ids) => (renewed.push([...ids]), {}) },
      { deliver: async (s) => (offered.push(s.projectId), s.backend === "microvm") },
      backends,
    );
    expect(job).toMatchObject({ name: "tenant-tokens", intervalMs: 60_000 });
    expect(await job.run()).toEqual({});
    // A Pod is backed up from outside with a token minted per backup: none is renewed for it.
    expect(renewed).toEqual([["box", "vm"]]);
    expect(offered).toEqual(["box", "pod", "vm"]);
  });

  it("a failed renewal or delivery is the run's detail, and the others go on", async () => {
    const offered: string[] = [];
    const job = tenantTokensJob(
      db,
      { renewDue: async () => ({ box: "impersonation refused" }) },
      {
        deliver: async (s) => {
          offered.push(s.projectId);
          if (s.projectId === "vm") throw new Error("exit 1: no space");
          return false;
        },
      },
      backends,
    );
    expect(await job.run()).toEqual({ box: "impersonation refused", vm: "delivery: exit 1: no space" });
    expect(offered).toEqual(["box", "pod", "vm"]);
  });
});
