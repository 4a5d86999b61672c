// The console's access to the runtime's REST API: the SDK's client (sdk/src/client.ts), whose paths, bodies
// and answers are the types generated from /openapi.json. The console is served by the runtime, so every
// path is same-origin. Tokens live in localStorage, shared by the tabs; a 401 triggers one refresh (which
// rotates both tokens), under a Web Lock so two tabs never present the same single-use refresh token.
import { Client, type Data, type TokenStore } from "../../sdk/src/client.js";

export { ApiError, AuthError, NetworkError } from "../../sdk/src/client.js";

export type Project = Data<"/projects/{id}", "GET">;
export type Operation = NonNullable<Project["operation"]>;
export type Snapshot = Data<"/projects/{id}/snapshots", "GET">["snapshots"][number];
export type ApiKey = Data<"/auth/api-keys", "GET">["api_keys"][number];
export type CreatedApiKey = Data<"/auth/api-keys", "POST">;

const TOKENS_KEY = "agent-sandbox.tokens";
const EMAIL_KEY = "agent-sandbox.email";

/** The pair the login and every refresh answer. */
type StoredTokens = Pick<Data<"/auth/login", "POST">, "access_token" | "refresh_token">;

/** Read from storage on every use, so that tabs share one session and see each other's rotations. */
function storedTokens(): StoredTokens | null {
  try {
    const value = JSON.parse(localStorage.getItem(TOKENS_KEY) ?? "null") as Partial<StoredTokens> | null;
    return typeof value?.access_token === "string" && typeof value.refresh_token === "string"
      ? { access_token: value.access_token, refresh_token: value.refresh_token }
      : null;
  } catch {
    return null;
  }
}

function storeTokens(tokens: StoredTokens | null): void {
  if (tokens)
    localStorage.setItem(
      TOKENS_KEY,
      JSON.stringify({ access_token: tokens.access_token, refresh_token: tokens.refresh_token }),
    );
  else localStorage.removeItem(TOKENS_KEY);
}

export const session = {
  signedIn: (): boolean => storedTokens() !== null,
  email: (): string | null => localStorage.getItem(EMAIL_KEY),
};

/** Called when the session is gone (refresh refused): the app shows the login screen. */
let onSignedOut: () => void = () => undefined;
export function whenSignedOut(listener: () => void): void {
  onSignedOut = listener;
}

/** The SDK's token store over localStorage: a refused refresh signs every tab out. */
const browserTokens: TokenStore = {
  load: async () => storedTokens() ?? {},
  save: async ({ access_token, refresh_token }) => {
    const kept = refresh_token ?? storedTokens()?.refresh_token;
    if (kept) storeTokens({ access_token, refresh_token: kept });
  },
  clear: async () => {
    storeTokens(null);
    onSignedOut();
  },
  exclusive<T>(refresh: () => Promise<T>): Promise<T> {
    // The lock's promise settles as the refresh's does (its type nests the promise once more).
    return typeof navigator !== "undefined" && navigator.locks
      ? (navigator.locks.request("agent-sandbox.refresh", refresh) as Promise<T>)
      : refresh();
  },
};

export const client = new Client({ api: "", tokens: browserTokens, fetchOptions: { cache: "no-store" } });

export async function register(email: string, password: string): Promise<void> {
  await client.call("POST", "/auth/register", { body: { email, password }, authenticate: false });
}

export async function login(email: string, password: string): Promise<void> {
  await client.login(email, password);
  localStorage.setItem(EMAIL_KEY, email);
}

export async function logout(): Promise<void> {
  const tokens = storedTokens();
  storeTokens(null);
  localStorage.removeItem(EMAIL_KEY);
  // Ends the session on the server too; the local sign-out happened whatever it answers.
  if (tokens)
    await client
      .call("POST", "/auth/logout", { body: { refresh_token: tokens.refresh_token }, authenticate: false })
      .catch(() => undefined);
}

const byId = (id: string) => ({ params: { id } });

export const projects = {
  list: () => client.call("GET", "/projects").then(({ data }) => data.projects),
  get: (id: string) => client.call("GET", "/projects/{id}", byId(id)).then(({ data }) => data),
  // At once (202): the list shows the create's progress, which waiting for the sandbox would hide.
  create: (name: string) =>
    client
      .call("POST", "/projects", { body: { name }, headers: { Prefer: "respond-async" } })
      .then(({ data }) => data),
  start: (id: string) => client.call("POST", "/projects/{id}/start", byId(id)),
  stop: (id: string) => client.call("POST", "/projects/{id}/stop", byId(id)),
  snapshot: (id: string) => client.call("POST", "/projects/{id}/snapshot", { ...byId(id), body: {} }),
  restore: (id: string, snapshot?: string) =>
    client.call("POST", "/projects/{id}/restore", { ...byId(id), body: snapshot ? { snapshot } : {} }),
  remove: (id: string) => client.call("DELETE", "/projects/{id}", byId(id)),
  snapshots: (id: string) =>
    client.call("GET", "/projects/{id}/snapshots", byId(id)).then(({ data }) => data.snapshots),
  backupStatus: (id: string) =>
    client.call("GET", "/projects/{id}/backup-status", byId(id)).then(({ data }) => data),
};

export const apiKeys = {
  list: () => client.call("GET", "/auth/api-keys").then(({ data }) => data.api_keys),
  create: (name: string) =>
    client.call("POST", "/auth/api-keys", { body: { name } }).then(({ data }) => data),
  revoke: (keyId: string) => client.call("DELETE", "/auth/api-keys/{keyId}", { params: { keyId } }),
};
