// An operation's progress in words. The API's `operation.progress.last` is the engine event the reconciler
// kept last (a resource step, a diagnostic or the summary), which the document types only as an object:
// every field is checked here before it is shown, so a new or odd event reads as its kind, never as
// "[object Object]". Browser-safe: the CLI and the web console both show it.
import type { ProjectView } from "./client.js";

/** What the engine did last, as the API answers it. */
export type ProgressEvent = NonNullable<ProjectView["operation"]>["progress"]["last"];

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
      // An event kind not known here yet: its kind, never the object.
      return text(event.type) ?? "";
  }
}
