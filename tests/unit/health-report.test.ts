// /healthz's report (runtime/health.ts): every prerequisite probed at once, each under its own deadline. A
// part that answers slowly on a busy host (an engine ping, a database query taking a few hundred
// milliseconds) is ready; one that hangs is named, and cannot hold the answer past the deadline.
import { describe, expect, it } from "vitest";
import { HEALTH_PROBE_DEADLINE_MS, healthReport, type Prerequisite } from "../../runtime/health.js";

const after = (name: string, ms: number): Prerequisite => ({
  name,
  probe: () =>
    new Promise((resolve) => setTimeout(() => resolve({ name, ready: true, detail: `${ms} ms` }), ms)),
});

const hangs: Prerequisite = { name: "hung", probe: () => new Promise(() => undefined) };

describe("the health report", () => {
  it("a part answering in 300 ms is ready: a busy host's answer, not a hang", async () => {
    const report = await healthReport([after("engine", 300), after("database", 5)]);
    expect(report.status).toBe("ready");
    expect(report.checks.map((c) => [c.name, c.ready])).toEqual([
      ["engine", true],
      ["database", true],
    ]);
  });

  it("a part that hangs is named, and the answer comes at the deadline with the others' checks", async () => {
    const asked = Date.now();
    const report = await healthReport([hangs, after("engine", 10)]);
    const took = Date.now() - asked;
    expect(report.status).toBe("not ready");
    expect(report.checks).toEqual([
      { name: "hung", ready: false, detail: `no answer within ${HEALTH_PROBE_DEADLINE_MS} ms` },
      { name: "engine", ready: true, detail: "10 ms" },
    ]);
    expect(took).toBeGreaterThanOrEqual(HEALTH_PROBE_DEADLINE_MS - 5);
    expect(took).toBeLessThan(HEALTH_PROBE_DEADLINE_MS + 2_000);
  });
});
