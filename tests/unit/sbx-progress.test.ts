// The progress line `sbx start` (and every command that waits for an operation) shows: the API's
// `operation.progress.last` is an engine event, an object, shown in words, never as "[object Object]".
import { describe, expect, it } from "vitest";
import { progressLine } from "../../cli/progress.js";
import { describeProgress } from "../../sdk/src/progress.js";

const operation = (last: Record<string, unknown> | null, events = 12) => ({
  id: "op-1",
  kind: "create" as const,
  state: "running" as const,
  error: null,
  progress: { events, last },
});

describe("the progress line", () => {
  it.each([
    [
      // As the reconciler records a resource step (runtime/reconciler/reconciler.ts progressOf).
      {
        type: "resource",
        op: "create",
        resource: "docker:index/container:Container",
        urn: "urn:pulumi:tenant-1::agent-sandbox-tenant::sandbox:tenant:Sandbox$docker:index/container:Container::sandbox-1",
        status: "started",
      },
      "  creating: create running, 12 events (create Container sandbox-1 ...)",
    ],
    [
      {
        type: "resource",
        op: "update",
        resource: "docker:index/network:Network",
        urn: "urn:x::y::net",
        status: "done",
      },
      "  creating: create running, 12 events (update Network net done)",
    ],
    [
      { type: "diagnostic", severity: "warning", message: "the image is old\nsecond line" },
      "  creating: create running, 12 events (warning: the image is old)",
    ],
    [
      { type: "summary", changes: { create: 3 }, seconds: 4 },
      "  creating: create running, 12 events (finished in 4 s)",
    ],
    [
      { type: "a-kind-not-known-yet", detail: { x: 1 } },
      "  creating: create running, 12 events (a-kind-not-known-yet)",
    ],
    [{ no: "type" }, "  creating: create running, 12 events"],
    [null, "  creating: create running, 12 events"],
  ])("%j → %s", (last, line) => {
    const shown = progressLine({ status: "creating", operation: operation(last) });
    expect(shown).toBe(line);
    expect(shown).not.toContain("[object Object]");
  });

  it("is the status alone without an operation", () => {
    expect(progressLine({ status: "running", operation: null })).toBe("  running");
  });

  it("never shows an object, whatever the event's fields hold", () => {
    for (const value of [{ nested: 1 }, [1, 2], 42, null, undefined, true])
      for (const key of ["type", "op", "resource", "urn", "status", "severity", "message", "seconds"]) {
        const event = { type: "resource", op: "create", [key]: value };
        expect(describeProgress(event)).not.toMatch(/\[object|undefined|null/);
      }
  });
});
