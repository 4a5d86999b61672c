// What a project's buttons do, shared by the list and the detail page, plus how its state reads.
import { describeProgress } from "../../sdk/src/progress.js";
import { ApiError, NetworkError, projects, type Operation, type Project } from "./api.js";
import { h } from "./dom.js";

export interface ActionContext {
  /** Shows an error (or clears it with null). */
  readonly report: (message: string | null) => void;
  /** Called after an action was accepted, to poll at once. */
  readonly changed: () => void;
  /** After a delete, e.g. leave the detail page. */
  readonly deleted?: () => void;
}

export function errorMessage(error: unknown): string {
  if (error instanceof ApiError) return error.message;
  if (error instanceof NetworkError) return "the service cannot be reached";
  return (error as Error).message ?? String(error);
}

/**
 * When a project's buttons are rebuilt: its status, or its current operation, changed. Not at every poll (a
 * button is never swapped out under a click), but an action's own operation re-enables the group it disabled
 * even when it ran between two polls and the status never showed it (a snapshot pushed in 2 s: its Delete
 * button stayed disabled).
 */
export function actionsKey(project: Project): string {
  return `${project.status} ${project.operation?.id ?? "-"} ${project.operation?.state ?? "-"}`;
}

/** The buttons that make sense in `project`'s status; each disables the whole group while it runs. */
export function actionButtons(project: Project, context: ActionContext): HTMLElement {
  const group = h("div.actions", { role: "group", "aria-label": `actions for ${project.name}` });
  const run = (label: string, action: () => Promise<unknown>, confirmText?: string) =>
    h(
      `button.small${label === "Delete" ? ".danger" : ""}`,
      {
        type: "button",
        onclick: async () => {
          if (confirmText && !window.confirm(confirmText)) return;
          for (const button of group.querySelectorAll("button")) button.disabled = true;
          context.report(null);
          try {
            await action();
            if (label === "Delete") context.deleted?.();
            context.changed();
          } catch (error) {
            context.report(`${label} ${project.name}: ${errorMessage(error)}`);
            for (const button of group.querySelectorAll("button")) button.disabled = false;
          }
        },
      },
      label,
    );
  const id = project.project_id;
  const start = run("Start", () => projects.start(id));
  const stop = run("Stop", () => projects.stop(id));
  const snapshot = run("Snapshot", () => projects.snapshot(id));
  const restore = run(
    "Restore",
    () => projects.restore(id),
    `Restore ${project.name} from its newest snapshot? The sandbox is replaced by one started from it; /home/agent is kept.`,
  );
  const remove = run(
    "Delete",
    () => projects.remove(id),
    `Delete ${project.name}? Its sandbox, network, volume and stack are destroyed.`,
  );
  switch (project.status) {
    case "running":
      group.append(stop, snapshot, remove);
      break;
    case "stopped":
      group.append(start, snapshot, restore, remove);
      break;
    case "error":
      group.append(start, stop, remove);
      break;
    case "creating":
    case "snapshotting":
    case "restoring":
      group.append(remove);
      break;
    case "deleting":
      break;
    default: {
      const never: never = project.status;
      throw new Error(`unknown status ${String(never)}`);
    }
  }
  return group;
}

export function statusBadge(project: Project): HTMLElement {
  return h(`span.badge.status-${project.status}`, { "data-testid": "status" }, project.status);
}

/** "create running · 12 steps · create Container sandbox …", or the failure. */
export function operationSummary(operation: Operation | null): HTMLElement {
  if (!operation) return h("span.muted", {}, "—");
  const active = operation.state === "pending" || operation.state === "running";
  const element = h(
    `span.operation.op-${operation.state}`,
    { "data-testid": "operation" },
    h("strong", {}, `${operation.kind} ${operation.state}`),
  );
  if (active || operation.state === "failed") {
    if (operation.progress.events > 0) element.append(` · ${operation.progress.events} events`);
    const last = describeProgress(operation.progress.last);
    if (active && last) element.append(h("span.progress-last", {}, ` · ${last}`));
  }
  if (active) element.prepend(h("span.spinner", { "aria-hidden": "true" }));
  if (operation.state === "failed" && operation.error)
    element.append(h("span.op-error", {}, ` · ${operation.error}`));
  return element;
}

export function sshCommand(project: Project): string | null {
  if (project.ssh.port === null) return null;
  return `ssh -p ${project.ssh.port} ${project.ssh.user}@${project.ssh.host}`;
}
