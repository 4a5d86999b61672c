// The caller's API keys: make one (shown once, like a project's SSH key), see which exist by their first
// characters and when each was last used, and revoke one (its next request is refused).
import { apiKeys, type ApiKey, type CreatedApiKey } from "../api.js";
import { errorMessage } from "../actions.js";
import { h, relativeTime, replaceChildren } from "../dom.js";
import type { View } from "../view.js";

function keyOnce(made: CreatedApiKey, close: () => void): HTMLElement {
  return h(
    "section.card.key-once",
    { "aria-label": "New API key", "data-testid": "api-key-panel" },
    h("h2", {}, `API key ${made.name}`),
    h("p", {}, h("strong", {}, "Shown once. "), "Only its hash is kept: copy it into a secret store now."),
    h("pre.key", { "data-testid": "api-key" }, made.key),
    h(
      "div.actions",
      {},
      navigator.clipboard
        ? h(
            "button.primary",
            {
              type: "button",
              onclick: () => void navigator.clipboard.writeText(made.key).catch(() => undefined),
            },
            "Copy",
          )
        : null,
      h("button", { type: "button", onclick: close }, "I saved it"),
    ),
    h(
      "p.muted",
      {},
      "Use it as ",
      h("code", {}, "X-API-Key"),
      ", as ",
      h("code", {}, "E2B_API_KEY"),
      " for E2B's SDKs, or as ",
      h("code", {}, "SBX_API_KEY"),
      ".",
    ),
  );
}

export function apiKeysView(): View {
  const error = h("p.error", { role: "alert", hidden: true });
  const report = (message: string | null) => {
    error.textContent = message ?? "";
    error.hidden = message === null;
  };
  const keySlot = h("div");
  const name = h("input", {
    name: "name",
    placeholder: "ci",
    required: true,
    maxlength: 100,
    "aria-label": "Key name",
  });
  const createButton = h("button.primary", { type: "submit" }, "Create key");
  const body = h("tbody");
  const empty = h("p.muted.empty", { hidden: true }, "No API keys.");
  const table = h(
    "table.projects",
    {},
    h(
      "thead",
      {},
      h("tr", {}, h("th", {}, "Key"), h("th", {}, "Created"), h("th", {}, "Last used"), h("th", {}, "")),
    ),
    body,
  );
  const listCard = h("section.card", { "data-testid": "api-key-list" }, table, empty);

  const row = (key: ApiKey) =>
    h(
      "tr",
      { "data-api-key-id": key.id },
      h("td", {}, key.name, h("br"), h("small.muted", {}, h("code", {}, `${key.prefix}…`))),
      h(
        "td",
        {},
        relativeTime(key.created_at),
        key.expires_at ? h("br") : null,
        key.expires_at ? h("small.muted", {}, `expires ${relativeTime(key.expires_at)}`) : null,
      ),
      h("td", {}, relativeTime(key.last_used_at)),
      h(
        "td.row-actions",
        {},
        h(
          "button.small.danger",
          {
            type: "button",
            onclick: async () => {
              if (!window.confirm(`Revoke ${key.name}? Programs using it stop working at once.`)) return;
              report(null);
              try {
                await apiKeys.revoke(key.id);
              } catch (caught) {
                report(`Revoke ${key.name}: ${errorMessage(caught)}`);
              }
              await refresh();
            },
          },
          "Revoke",
        ),
      ),
    );

  const refresh = async () => {
    try {
      const keys = await apiKeys.list();
      replaceChildren(body, ...keys.map(row));
      empty.hidden = keys.length > 0;
      table.hidden = keys.length === 0;
      listCard.dataset.loaded = "true";
    } catch (caught) {
      report(`Cannot load the API keys: ${errorMessage(caught)}`);
    }
  };

  const createForm = h(
    "form.create",
    {
      onsubmit: async (event: Event) => {
        event.preventDefault();
        createButton.disabled = true;
        report(null);
        try {
          const made = await apiKeys.create(name.value);
          name.value = "";
          replaceChildren(
            keySlot,
            keyOnce(made, () => replaceChildren(keySlot)),
          );
          await refresh();
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

  const element = h(
    "div.page",
    {},
    h(
      "section.card",
      {},
      h("h1", {}, "API keys"),
      h("p.muted", {}, "Long-lived credentials for programs: E2B's SDKs, MCP clients, CI."),
      createForm,
      keySlot,
      error,
    ),
    listCard,
  );
  return {
    title: "API keys",
    element,
    mounted() {
      void refresh();
      name.focus();
    },
  };
}
