// One project: status and progress (polled), SSH command, last backup, snapshots, and the terminal.
import { projects, type Project, type Snapshot } from "../api.js";
import {
  actionButtons,
  actionsKey,
  errorMessage,
  operationSummary,
  sshCommand,
  statusBadge,
} from "../actions.js";
import { h, relativeTime, replaceChildren } from "../dom.js";
import { AgentPane } from "../agent.js";
import { TerminalView } from "../terminal.js";
import { poll, type Poller, type View } from "../view.js";

const POLL_MS = 2000;
/** Reading the backup status execs into the sandbox: not every poll. */
const BACKUP_POLL_MS = 60_000;

function copyButton(text: () => string): HTMLElement | null {
  if (!navigator.clipboard) return null;
  return h(
    "button.small",
    { type: "button", onclick: () => void navigator.clipboard.writeText(text()).catch(() => undefined) },
    "Copy",
  );
}

export function projectView(id: string, navigate: (hash: string) => void): View {
  const error = h("p.error", { role: "alert", hidden: true });
  const report = (message: string | null) => {
    error.textContent = message ?? "";
    error.hidden = message === null;
  };
  const title = h("h1", {}, "…");
  const status = h("span");
  const operation = h("div.detail-operation");
  const actions = h("div");
  const ssh = h("code", { "data-testid": "ssh-command" }, "—");
  const backup = h("span", { "data-testid": "last-backup" }, "—");
  const lastSnapshot = h("span", {}, "—");
  const snapshotList = h("tbody");
  const snapshotEmpty = h("p.muted", {}, "No snapshots yet.");
  const snapshotTable = h(
    "table.snapshots",
    { hidden: true },
    h("thead", {}, h("tr", {}, h("th", {}, "Snapshot"), h("th", {}, "Taken"), h("th", {}, ""))),
    snapshotList,
  );
  const terminal = new TerminalView({ terminalUrl: async () => (await projects.get(id)).terminal_url });
  const agent = new AgentPane(id);
  // The terminal and the agent side by side on a wide screen; on a narrower one (a phone), two tabs.
  const tabs = (["terminal", "agent"] as const).map((name) =>
    h(
      "button.tab",
      {
        type: "button",
        role: "tab",
        id: `tab-${name}`,
        "aria-controls": name === "terminal" ? "terminal-panel" : "agent-panel",
        "aria-selected": name === "terminal" ? "true" : "false",
        onclick: () => select(name),
      },
      name === "terminal" ? "Terminal" : "Agent",
    ),
  );
  const workspace = h(
    "div.workspace",
    { "data-tab": "terminal" },
    h("div.tabs", { role: "tablist", "aria-label": "Terminal or agent" }, ...tabs),
    terminal.element,
    agent.element,
  );
  terminal.element.id = "terminal-panel";
  const select = (name: "terminal" | "agent") => {
    workspace.dataset.tab = name;
    for (const tab of tabs) tab.setAttribute("aria-selected", String(tab.id === `tab-${name}`));
    // The terminal fits itself when shown again (its size was 0 while hidden).
    if (name === "terminal") window.dispatchEvent(new Event("resize"));
  };

  let current: Project | undefined;
  /** What the buttons were built for (actionsKey). */
  let shownActions = "";
  let operationKey = "";
  let poller: Poller | undefined;
  let backupPoller: Poller | undefined;

  const refreshBackup = async () => {
    try {
      const status = await projects.backupStatus(id);
      backup.textContent = status.last_backup_at
        ? relativeTime(status.last_backup_at)
        : status.last_error
          ? `never (last attempt failed: ${status.last_error})`
          : "never";
      backup.title = status.last_backup_at ?? "";
    } catch (caught) {
      backup.textContent = `unknown (${errorMessage(caught)})`;
    }
  };

  const refreshSnapshots = async () => {
    let list: Snapshot[];
    try {
      list = await projects.snapshots(id);
    } catch {
      return;
    }
    snapshotTable.hidden = list.length === 0;
    snapshotEmpty.hidden = list.length > 0;
    replaceChildren(
      snapshotList,
      ...list.map((snapshot) =>
        h(
          "tr",
          {},
          h("td", {}, h("code", {}, snapshot.tag)),
          h("td", { title: snapshot.created_at }, relativeTime(snapshot.created_at)),
          h(
            "td",
            {},
            h(
              "button.small",
              {
                type: "button",
                onclick: async () => {
                  if (!window.confirm(`Restore ${current?.name ?? "the project"} from ${snapshot.tag}?`))
                    return;
                  report(null);
                  try {
                    await projects.restore(id, snapshot.tag);
                    poller?.now();
                  } catch (caught) {
                    report(`Restore: ${errorMessage(caught)}`);
                  }
                },
              },
              "Restore",
            ),
          ),
        ),
      ),
    );
  };

  const gone = () => {
    poller?.stop();
    backupPoller?.stop();
    terminal.dispose();
    agent.dispose();
    replaceChildren(
      element,
      h(
        "section.card",
        {},
        h("h1", {}, "Project not found"),
        h("p", {}, "It was deleted, or it is not yours."),
        h("a", { href: "#/projects" }, "Back to the projects"),
      ),
    );
  };

  const show = (project: Project) => {
    const previous = current;
    current = project;
    title.textContent = project.name;
    document.title = `${project.name} · Agent Sandbox`;
    replaceChildren(status, statusBadge(project));
    replaceChildren(operation, operationSummary(project.operation));
    if (project.status === "error" && project.error) operation.append(h("div.op-error", {}, project.error));
    if (shownActions !== actionsKey(project)) {
      shownActions = actionsKey(project);
      replaceChildren(
        actions,
        actionButtons(project, {
          report,
          changed: () => poller?.now(),
          deleted: () => navigate("#/projects"),
        }),
      );
    }
    ssh.textContent = sshCommand(project) ?? "—";
    lastSnapshot.textContent = project.last_snapshot
      ? `${project.last_snapshot.tag} (${relativeTime(project.last_snapshot.created_at)})`
      : "none";
    const key = `${project.operation?.id}:${project.operation?.state}`;
    if (key !== operationKey) {
      operationKey = key;
      void refreshSnapshots();
    }
    // Connects when the project is (or becomes) running; a session that closed stays closed until the
    // user reconnects, showing why it ended.
    if (project.status === "running" && previous?.status !== "running") {
      if (!terminal.connected) void terminal.connect();
      if (previous) void refreshBackup(); // a sandbox that just started may have restored a backup
    } else if (project.status !== "running") {
      terminal.idle(`the terminal opens when the project is running (it is ${project.status})`);
    }
  };

  const refresh = async () => {
    // The list, not GET /projects/{id}: that one issues a terminal ticket, wanted only to connect.
    let list: Project[];
    try {
      list = await projects.list();
    } catch (caught) {
      report(`Cannot load the project: ${errorMessage(caught)}`);
      return;
    }
    const project = list.find((p) => p.project_id === id);
    if (!project) return gone();
    if (error.textContent?.startsWith("Cannot load")) report(null);
    show(project);
  };

  const element = h(
    "div.page",
    {},
    h("a.back", { href: "#/projects" }, "← Projects"),
    h(
      "section.card.detail",
      {},
      h("div.detail-head", {}, title, status, actions),
      operation,
      error,
      h(
        "dl.facts",
        {},
        h("dt", {}, "SSH"),
        h(
          "dd",
          {},
          ssh,
          " ",
          copyButton(() => ssh.textContent ?? ""),
        ),
        h("dt", {}, "Last backup"),
        h(
          "dd",
          {},
          backup,
          " ",
          h("button.small.link", { type: "button", onclick: () => void refreshBackup() }, "refresh"),
        ),
        h("dt", {}, "Last snapshot"),
        h("dd", {}, lastSnapshot),
        h("dt", {}, "Project id"),
        h("dd", {}, h("code", {}, id)),
      ),
    ),
    workspace,
    h("section.card", {}, h("h2", {}, "Snapshots"), snapshotTable, snapshotEmpty),
  );

  return {
    title: "Project",
    element,
    mounted() {
      terminal.mount();
      void agent.mount();
      poller = poll(refresh, POLL_MS);
      backupPoller = poll(refreshBackup, BACKUP_POLL_MS);
    },
    dispose() {
      poller?.stop();
      backupPoller?.stop();
      terminal.dispose();
      agent.dispose();
    },
  };
}
