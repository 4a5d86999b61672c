// The caller's projects, polled every 2 s: status and the current operation's progress, the actions, and
// the create form, which shows the new project's SSH private key once (the API keeps only a sealed copy).
import { projects, type Project } from "../api.js";
import {
  actionButtons,
  actionsKey,
  errorMessage,
  operationSummary,
  sshCommand,
  statusBadge,
} from "../actions.js";
import { download, h, relativeTime, replaceChildren } from "../dom.js";
import { poll, type Poller, type View } from "../view.js";

const POLL_MS = 2000;

function keyPanel(project: Project, close: () => void): HTMLElement {
  const key = project.ssh.private_key ?? "";
  const filename = `agent-sandbox-${project.project_id.slice(0, 8)}.key`;
  const ssh = sshCommand(project);
  return h(
    "section.card.key-once",
    { "aria-label": "SSH private key", "data-testid": "private-key-panel" },
    h("h2", {}, `SSH key for ${project.name}`),
    h(
      "p",
      {},
      h("strong", {}, "Shown once. "),
      "The service keeps no copy it will show again: download it now.",
    ),
    h("pre.key", { "data-testid": "private-key" }, key),
    h(
      "div.actions",
      {},
      h("button.primary", { type: "button", onclick: () => download(filename, key) }, "Download key"),
      navigator.clipboard
        ? h(
            "button",
            { type: "button", onclick: () => void navigator.clipboard.writeText(key).catch(() => undefined) },
            "Copy",
          )
        : null,
      h("button", { type: "button", onclick: close }, "I saved it"),
    ),
    ssh ? h("p.muted", {}, "Then: ", h("code", {}, `chmod 600 ${filename} && ${ssh} -i ${filename}`)) : null,
  );
}

interface Row {
  readonly element: HTMLTableRowElement;
  /** What its buttons were built for (actionsKey). */
  actionsFor: string;
  update(project: Project): void;
}

export function projectsView(): View {
  const error = h("p.error", { role: "alert", hidden: true });
  const report = (message: string | null) => {
    error.textContent = message ?? "";
    error.hidden = message === null;
  };
  const keySlot = h("div");
  const name = h("input", {
    name: "name",
    placeholder: "my-service",
    required: true,
    maxlength: 100,
    "aria-label": "Project name",
  });
  const createButton = h("button.primary", { type: "submit" }, "Create project");
  const createForm = h(
    "form.create",
    {
      onsubmit: async (event: Event) => {
        event.preventDefault();
        createButton.disabled = true;
        report(null);
        try {
          const created = await projects.create(name.value);
          name.value = "";
          replaceChildren(
            keySlot,
            keyPanel(created, () => replaceChildren(keySlot)),
          );
          poller?.now();
        } catch (caught) {
          report(`Create: ${errorMessage(caught)}`);
        } finally {
          createButton.disabled = false;
        }
      },
    },
    name,
    createButton,
  );

  const body = h("tbody");
  const empty = h("p.muted.empty", { hidden: true }, "No projects yet: create one above.");
  const table = h(
    "table.projects",
    {},
    h(
      "thead",
      {},
      h("tr", {}, h("th", {}, "Project"), h("th", {}, "Status"), h("th", {}, "Operation"), h("th", {}, "")),
    ),
    body,
  );
  const rows = new Map<string, Row>();

  const makeRow = (project: Project): Row => {
    const link = h("a", { href: `#/projects/${project.project_id}` });
    const created = h("small.muted");
    const status = h("td");
    const operation = h("td");
    const actions = h("td.row-actions");
    const element = h(
      "tr",
      { "data-project-id": project.project_id },
      h("td", {}, link, h("br"), created),
      status,
      operation,
      actions,
    );
    const row: Row = {
      element,
      actionsFor: "",
      update(current) {
        link.textContent = current.name;
        created.textContent = `created ${relativeTime(current.created_at)}`;
        replaceChildren(status, statusBadge(current));
        replaceChildren(operation, operationSummary(current.operation));
        if (current.status === "error" && current.error)
          operation.append(h("div.op-error", {}, current.error));
        // Buttons are rebuilt only when the status or the operation changes (actionsKey).
        if (row.actionsFor !== actionsKey(current)) {
          row.actionsFor = actionsKey(current);
          replaceChildren(actions, actionButtons(current, { report, changed: () => poller?.now() }));
        }
      },
    };
    return row;
  };

  const refresh = async () => {
    let list: Project[];
    try {
      list = await projects.list();
    } catch (caught) {
      report(`Cannot load the projects: ${errorMessage(caught)}`);
      return;
    }
    if (error.textContent?.startsWith("Cannot load")) report(null);
    const seen = new Set<string>();
    for (const project of list) {
      seen.add(project.project_id);
      let row = rows.get(project.project_id);
      if (!row) {
        row = makeRow(project);
        rows.set(project.project_id, row);
      }
      row.update(project);
      body.appendChild(row.element); // keeps the API's order
    }
    for (const [id, row] of rows) {
      if (!seen.has(id)) {
        row.element.remove();
        rows.delete(id);
      }
    }
    empty.hidden = list.length > 0;
    table.hidden = list.length === 0;
    listCard.dataset.loaded = "true";
  };

  let poller: Poller | undefined;
  // data-loaded: the list shows what the API said at least once (before that, "no rows" means nothing).
  const listCard = h("section.card", { "data-testid": "project-list" }, table, empty);
  const element = h(
    "div.page",
    {},
    h("section.card", {}, h("h1", {}, "Projects"), createForm, keySlot, error),
    listCard,
  );
  return {
    title: "Projects",
    element,
    mounted() {
      poller = poll(refresh, POLL_MS);
      name.focus();
    },
    dispose: () => poller?.stop(),
  };
}
