import type { EngineEvent } from "@pulumi/pulumi/automation/index.js";
import type { DriftedResource } from "../store/drift.js";

/** What the platform does about drift: tell the owner, or put the stack's resources back. */
export type DriftRemediation = "report" | "repair";

/** Top-level output names whose values differ (values are not kept: they may be secrets). */
function differingProperties(old: Record<string, unknown>, now: Record<string, unknown>): string[] {
  return [...new Set([...Object.keys(old), ...Object.keys(now)])]
    .filter((key) => JSON.stringify(old[key]) !== JSON.stringify(now[key]))
    .sort();
}

/**
 * The drifted resources in a refresh preview's engine events: a refresh step reports a resource read as
 * changed as `update` (old and new outputs) and one that no longer exists as `delete`.
 */
export function driftedResources(events: readonly EngineEvent[]): DriftedResource[] {
  const found: DriftedResource[] = [];
  for (const event of events) {
    const step = event.resOutputsEvent?.metadata;
    if (!step || (step.op !== "update" && step.op !== "delete")) continue;
    found.push(
      step.op === "delete"
        ? { type: step.type, urn: step.urn, change: "deleted", properties: [] }
        : {
            type: step.type,
            urn: step.urn,
            change: "changed",
            properties: differingProperties(step.old?.outputs ?? {}, step.new?.outputs ?? {}),
          },
    );
  }
  return found;
}
