// The web console's entry: hash routes (#/login, #/register, #/projects, #/projects/<id>, #/api-keys), so any static
// server can serve it and the runtime needs only `/` and `/assets/*`.
import { logout, session, whenSignedOut } from "./api.js";
import { h, replaceChildren } from "./dom.js";
import "./style.css";
import type { View } from "./view.js";
import { apiKeysView } from "./views/api-keys.js";
import { authView } from "./views/auth.js";
import { projectView } from "./views/project.js";
import { projectsView } from "./views/projects.js";

const root = document.getElementById("app");
if (!root) throw new Error("index.html has no #app element");
const header = h("header.topbar");
const main = h("main");
root.replaceChildren(header, main);

let current: View | undefined;

function navigate(hash: string): void {
  if (location.hash === hash) route();
  else location.hash = hash;
}

function renderHeader(): void {
  const email = session.signedIn() ? session.email() : null;
  replaceChildren(
    header,
    h("a.brand", { href: "#/projects" }, h("span.logo", { "aria-hidden": "true" }, "▮"), "Agent Sandbox"),
    session.signedIn()
      ? h(
          "nav",
          {},
          h("a", { href: "#/projects" }, "Projects"),
          h("a", { href: "#/api-keys" }, "API keys"),
          email ? h("span.muted", { "data-testid": "signed-in-as" }, email) : null,
          h(
            "button.small",
            {
              type: "button",
              onclick: async () => {
                await logout();
                navigate("#/login");
              },
            },
            "Sign out",
          ),
        )
      : null,
  );
}

function viewFor(hash: string): View {
  const path = hash.replace(/^#/, "") || "/";
  if (path === "/register") return authView("register", navigate);
  if (path === "/login" || !session.signedIn()) return authView("login", navigate);
  const project = /^\/projects\/([0-9a-fA-F-]{36})$/.exec(path);
  if (project) return projectView(project[1]!, navigate);
  if (path === "/api-keys") return apiKeysView();
  return projectsView();
}

/** Where a login goes back to, when the session expired on a page. */
const RETURN_KEY = "agent-sandbox.return";

function route(): void {
  current?.dispose?.();
  const hash = location.hash;
  // Signed-in users have nothing to do on the login page; signed-out ones nothing elsewhere.
  if (!session.signedIn() && hash !== "#/login" && hash !== "#/register") {
    history.replaceState(null, "", "#/login");
  } else if (session.signedIn() && (hash === "" || hash === "#/" || hash === "#/login")) {
    history.replaceState(null, "", "#/projects");
  }
  current = viewFor(location.hash);
  document.title = `${current.title} · Agent Sandbox`;
  renderHeader();
  replaceChildren(main, current.element);
  current.mounted?.();
}

whenSignedOut(() => {
  if (location.hash === "#/login" || location.hash === "#/register") return;
  // A session that expired on a project's page comes back to it after the login (a prompt typed in its agent
  // pane is kept in this tab's storage).
  if (location.hash.startsWith("#/projects/")) sessionStorage.setItem(RETURN_KEY, location.hash);
  navigate("#/login");
});
window.addEventListener("hashchange", route);
// Another tab signing in or out changes what this one may show.
window.addEventListener("storage", (event) => {
  if (event.key === "agent-sandbox.tokens" && (event.oldValue === null) !== (event.newValue === null))
    route();
});
route();

// Installable, with an offline page (web/public/sw.js). A browser without service workers, or one that
// refuses this one, has the console as it was.
if ("serviceWorker" in navigator) void navigator.serviceWorker.register("/sw.js").catch(() => undefined);
