// The line `sbx` shows while it waits for a project's operation: its status, the operation's kind and
// state, and what the engine did last (the API's `operation.progress.last`, one of the reconciler's events:
// a resource step, a diagnostic or the summary).
import type { ProjectView } from "../sdk/src/index.js";

type Operation = NonNullable<ProjectView["operation"]>;
type ProgressEvent = Operation["progress"]["last"];

const text = (value: unknown): string | undefined => (typeof value === "string" && value ? value : undefined);

/** `docker:index/container:Container` → `Container`. */
const shortType = (type: string) => type.split(":").pop() || type;

/** An engine event in words: "create Container sandbox-1 ...", "warning: ...", "finished in 4 s"; "" when it has none. */
export function describeProgress(event: ProgressEvent): string {
  if (!event) return "";
  switch (event.type) {
    case "resource": {
      const resource = text(event.resource);
      const name = text(event.urn)?.split("::").pop();
      const status = event.status === "started" ? "..." : text(event.status);
      return [text(event.op), resource && shortType(resource), name, status].filter(Boolean).join(" ");
    }
    case "diagnostic":
      return `${text(event.severity) ?? "diagnostic"}: ${text(event.message)?.split("\n")[0] ?? ""}`.trim();
    case "summary":
      return typeof event.seconds === "number" ? `finished in ${event.seconds} s` : "finished";
    default:
      // An event kind this CLI does not know yet: its kind, never the object.
      return text(event.type) ?? "";
  }
}

/** "  creating: create running, 12 events (create Container sandbox-1 ...)". */
export function progressLine(project: {
  readonly status: string;
  readonly operation: Operation | null;
}): string {
  const op = project.operation;
  if (!op) return `  ${project.status}`;
  const last = describeProgress(op.progress.last);
  return `  ${project.status}: ${op.kind} ${op.state}, ${op.progress.events} events${last ? ` (${last})` : ""}`;
}
