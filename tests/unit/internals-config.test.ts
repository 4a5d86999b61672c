// Issue 15's settings: how long a create waits (runtime.createWaitSeconds, and a request's Prefer), and
// the metrics token (from the environment, or generated root-only in the data directory).
import { mkdtempSync, statSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { createWaitOf } from "../../runtime/api/projects/schemas.js";
import { metricsToken } from "../../runtime/metrics.js";
import { inSpan, startTelemetry, tracing } from "../../lib/telemetry.js";
import { parseStackConfig, StackConfigError } from "../../stacks/config.js";

const runtimeProblems = (runtime: Record<string, unknown>): readonly string[] => {
  try {
    parseStackConfig(
      { "agent-sandbox:target": "local", "agent-sandbox:runtime": runtime },
      "Pulumi.test.yaml",
    );
  } catch (error) {
    expect(error).toBeInstanceOf(StackConfigError);
    return (error as StackConfigError).problems;
  }
  throw new Error("expected the config to be rejected");
};

describe("runtime.createWaitSeconds", () => {
  it("waits 30 s by default (a cold create here takes about 4 s, ten at once 25 s); 0 answers at once", () => {
    const defaults = parseStackConfig({ "agent-sandbox:target": "local" }, "Pulumi.test.yaml");
    expect(defaults.runtime.createWaitSeconds).toBe(30);
    const none = parseStackConfig(
      { "agent-sandbox:target": "local", "agent-sandbox:runtime": { createWaitSeconds: 0 } },
      "Pulumi.test.yaml",
    );
    expect(none.runtime.createWaitSeconds).toBe(0);
  });

  it.each([
    [-1, "must be 0 (answer at once) or more seconds"],
    [301, "must be at most 300 seconds"],
    [1.5, "must be a whole number of seconds"],
    ["30", "must be a number of seconds"],
  ])("refuses %j, naming the key", (value, message) => {
    const problems = runtimeProblems({ createWaitSeconds: value });
    expect(problems).toHaveLength(1);
    expect(problems[0]).toMatch(/^agent-sandbox:runtime\.createWaitSeconds: /);
    expect(problems[0]).toContain(message);
  });
});

describe("runtime.telemetry", () => {
  it("is off by default: no endpoint, and then no exporter starts", async () => {
    const defaults = parseStackConfig({ "agent-sandbox:target": "local" }, "Pulumi.test.yaml");
    expect(defaults.runtime.telemetry).toEqual({
      serviceName: "agent-sandbox-runtime",
      exportDelayMillis: 2_000,
    });
    expect(startTelemetry(defaults.runtime.telemetry)).toBeUndefined();
    // Off, a span is a call and nothing more: the work runs with a span that records nothing.
    expect(tracing()).toBe(false);
    expect(await inSpan("off", {}, async (span) => span.isRecording())).toBe(false);
  });

  it.each([
    [{ otlpEndpoint: "grpc://collector:4317" }, "otlpEndpoint", "must be an http:// or https:// URL"],
    [{ otlpEndpoint: "collector:4318" }, "otlpEndpoint", "must be an http:// or https:// URL"],
    [{ serviceName: "" }, "serviceName", ""],
    [{ exportDelayMillis: 10 }, "exportDelayMillis", ""],
    [{ sampler: "always" }, "", "sampler"],
  ])("refuses %j, naming the key", (telemetry, key, message) => {
    const problems = runtimeProblems({ telemetry });
    expect(problems).toHaveLength(1);
    expect(problems[0]).toMatch(new RegExp(`^agent-sandbox:runtime\\.telemetry${key ? `\\.${key}` : ""}`));
    expect(problems[0]).toContain(message);
  });
});

describe("a create's wait, by the request's Prefer header (RFC 7240)", () => {
  it.each([
    [undefined, 30, { ms: 30_000 }],
    ["respond-async", 30, { ms: 0, applied: "respond-async" }],
    ["Respond-Async", 30, { ms: 0, applied: "respond-async" }],
    ["wait=5", 30, { ms: 5_000, applied: "wait=5" }],
    ["wait=500", 30, { ms: 30_000, applied: "wait=30" }],
    ["wait=10, respond-async", 30, { ms: 0, applied: "respond-async" }],
    [["handling=lenient", "wait=3"], 30, { ms: 3_000, applied: "wait=3" }],
    ["return=minimal; foo=bar, wait=2", 30, { ms: 2_000, applied: "wait=2" }],
    ["wait=soon", 30, { ms: 30_000 }],
    ["wait=-1", 30, { ms: 30_000 }],
    ["not-a-uuid", 30, { ms: 30_000 }],
    ["wait=10", 0, { ms: 0, applied: "wait=0" }],
  ])("%j with %i s configured", (prefer, configured, expected) => {
    expect(createWaitOf(prefer, configured)).toEqual(expected);
  });
});

describe("the metrics token", () => {
  it("is generated once, root-only, in the data directory, and read back the same", () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), "metrics-token-"));
    const token = metricsToken(dir, {});
    expect(token).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(statSync(path.join(dir, "metrics.token")).mode & 0o777).toBe(0o600);
    expect(metricsToken(dir, {})).toBe(token);
  });

  it("comes from AGENT_SANDBOX_METRICS_TOKEN when set; a short or non-bearer one stops the start", () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), "metrics-token-"));
    const given = "x".repeat(40);
    expect(metricsToken(dir, { AGENT_SANDBOX_METRICS_TOKEN: given })).toBe(given);
    for (const bad of ["short", `${"x".repeat(40)} space`, `${"x".repeat(40)}\n`])
      expect(() => metricsToken(dir, { AGENT_SANDBOX_METRICS_TOKEN: bad })).toThrow(
        /^AGENT_SANDBOX_METRICS_TOKEN must be at least 32 characters/,
      );
  });
});
