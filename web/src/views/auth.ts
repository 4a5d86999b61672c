// Sign in / create an account. Registration signs the new account in at once.
import { login, register } from "../api.js";
import { errorMessage } from "../actions.js";
import { h } from "../dom.js";
import type { View } from "../view.js";

export function authView(mode: "login" | "register", navigate: (hash: string) => void): View {
  const registering = mode === "register";
  const error = h("p.error", { role: "alert", hidden: true });
  const email = h("input", { type: "email", name: "email", autocomplete: "username", required: true });
  const password = h("input", {
    type: "password",
    name: "password",
    autocomplete: registering ? "new-password" : "current-password",
    required: true,
    minlength: registering ? 12 : undefined,
  });
  const submit = h("button.primary", { type: "submit" }, registering ? "Create account" : "Sign in");
  const form = h(
    "form.card.auth",
    {
      onsubmit: async (event: Event) => {
        event.preventDefault();
        submit.disabled = true;
        error.hidden = true;
        try {
          if (registering) await register(email.value, password.value);
          await login(email.value, password.value);
          const back = sessionStorage.getItem("agent-sandbox.return");
          sessionStorage.removeItem("agent-sandbox.return");
          navigate(back?.startsWith("#/projects/") ? back : "#/projects");
        } catch (caught) {
          error.textContent = errorMessage(caught);
          error.hidden = false;
          submit.disabled = false;
        }
      },
    },
    h("h1", {}, registering ? "Create an account" : "Sign in"),
    h("label", {}, "Email", email),
    h("label", {}, "Password", password, registering ? h("small.muted", {}, "at least 12 characters") : null),
    error,
    submit,
    h(
      "p.switch",
      {},
      registering ? "Have an account? " : "New here? ",
      h("a", { href: registering ? "#/login" : "#/register" }, registering ? "Sign in" : "Create an account"),
    ),
  );
  return {
    title: registering ? "Create an account" : "Sign in",
    element: form,
    mounted: () => email.focus(),
  };
}
