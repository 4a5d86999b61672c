// The line `sbx` shows while it waits for a project's operation: its status, the operation's kind and
// state, and what the engine did last (the SDK's describeProgress of `operation.progress.last`).
import { describeProgress, type ProjectView } from "../sdk/src/index.js";

/** "  creating: create running, 12 events (create Container sandbox-1 ...)". */
export function progressLine(project: Pick<ProjectView, "status" | "operation">): string {
  const op = project.operation;
  if (!op) return `  ${project.status}`;
  const last = describeProgress(op.progress.last);
  return `  ${project.status}: ${op.kind} ${op.state}, ${op.progress.events} events${last ? ` (${last})` : ""}`;
}
