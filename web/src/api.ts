// A typed client of the runtime's REST API (README "The API"). The console is served by the runtime,
// so every path is same-origin. Tokens live in localStorage; a 401 triggers one refresh (which rotates
// both tokens) and one retry.

export type ProjectStatus =
  "creating" | "running" | "stopped" | "snapshotting" | "restoring" | "deleting" | "error";

export interface Operation {
  readonly id: string;
  readonly kind: string;
  readonly state: "pending" | "running" | "succeeded" | "failed" | "cancelled";
  readonly error: string | null;
  readonly progress: { readonly events: number; readonly last: ProgressEvent | null };
}

/** The engine event the reconciler kept last (runtime/reconciler/reconciler.ts `progressOf`). */
export type ProgressEvent =
  | { type: "resource"; op: string; resource: string; urn: string; status: "started" | "done" | "failed" }
  | { type: "diagnostic"; severity: string; message: string }
  | { type: "summary"; changes?: Record<string, number>; seconds?: number }
  | { type?: undefined; [key: string]: unknown };

export interface Project {
  readonly project_id: string;
  readonly name: string;
  readonly status: ProjectStatus;
  readonly error: string | null;
  readonly created_at: string;
  readonly ssh: { host: string; port: number | null; user: string; private_key?: string };
  readonly terminal_url: string | null;
  readonly operation: Operation | null;
  readonly last_snapshot: { tag: string; created_at: string } | null;
  readonly last_backup_at: string | null;
}

export interface Snapshot {
  readonly tag: string;
  readonly image: string;
  readonly digest: string | null;
  readonly created_at: string;
}

export interface BackupStatus {
  readonly last_backup_at: string | null;
  readonly last_attempt_at: string | null;
  readonly last_result: string | null;
  readonly last_error: string | null;
  readonly state: string;
  readonly interval_seconds: number | null;
}

interface Tokens {
  readonly access_token: string;
  readonly refresh_token: string;
}

/** An answer of the API that is not a success: `message` is written for people. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly details?: unknown,
  ) {
    super(message);
    this.name = "ApiError";
  }
}

const TOKENS_KEY = "agent-sandbox.tokens";
const EMAIL_KEY = "agent-sandbox.email";

/** Read from storage on every use, so that tabs share one session and see each other's rotations. */
function storedTokens(): Tokens | null {
  try {
    const value = JSON.parse(localStorage.getItem(TOKENS_KEY) ?? "null") as Partial<Tokens> | null;
    return typeof value?.access_token === "string" && typeof value.refresh_token === "string"
      ? { access_token: value.access_token, refresh_token: value.refresh_token }
      : null;
  } catch {
    return null;
  }
}

function storeTokens(tokens: Tokens | null): void {
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

async function send(
  method: string,
  path: string,
  body: unknown,
  accessToken?: string,
  extraHeaders: Record<string, string> = {},
): Promise<Response> {
  const headers: Record<string, string> = { accept: "application/json", ...extraHeaders };
  if (body !== undefined) headers["content-type"] = "application/json";
  if (accessToken) headers.authorization = `Bearer ${accessToken}`;
  return fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    cache: "no-store",
  });
}

async function parse<T>(response: Response): Promise<T> {
  const text = await response.text();
  let body: unknown;
  try {
    body = text ? JSON.parse(text) : undefined;
  } catch {
    body = undefined;
  }
  if (response.ok) return body as T;
  const error = (body ?? {}) as { error?: string; message?: string; details?: unknown };
  throw new ApiError(
    response.status,
    error.error ?? "http_error",
    error.message ?? `${response.status} ${response.statusText || "error"}`,
    error.details,
  );
}

let refreshing: Promise<boolean> | null = null;

/**
 * Trades the refresh token for a new pair. Refresh tokens are single-use and presenting a used one
 * revokes the whole session, so only one refresh may be in flight: one per page (the shared promise)
 * and one per browser (a Web Lock, where the browser has them); a tab that waited finds the pair
 * another tab stored and uses it.
 */
function refreshTokens(rejectedAccessToken: string): Promise<boolean> {
  const attempt = async (): Promise<boolean> => {
    const current = storedTokens();
    if (!current) return false;
    if (current.access_token !== rejectedAccessToken) return true; // someone refreshed meanwhile
    const response = await send("POST", "/auth/refresh", { refresh_token: current.refresh_token });
    if (!response.ok) {
      // Only a refusal ends the session; a network error or a 503 is worth another try later.
      if (response.status === 401 || response.status === 400) storeTokens(null);
      return false;
    }
    storeTokens(await parse<Tokens>(response));
    return true;
  };
  if (!refreshing) {
    const run: Promise<boolean> =
      typeof navigator !== "undefined" && navigator.locks
        ? navigator.locks.request("agent-sandbox.refresh", attempt).then((granted) => granted)
        : attempt();
    const shared = run.finally(() => {
      refreshing = null;
    });
    refreshing = shared;
    return shared;
  }
  return refreshing;
}

/** One API call with the session's token; a 401 refreshes the tokens once and repeats the call. */
export async function call<T>(
  method: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<T> {
  const tokens = storedTokens();
  if (!tokens) {
    onSignedOut();
    throw new ApiError(401, "unauthorized", "signed out");
  }
  let response = await send(method, path, body, tokens.access_token, headers);
  if (response.status === 401) {
    if (await refreshTokens(tokens.access_token)) {
      response = await send(method, path, body, storedTokens()?.access_token, headers);
    }
    // Refused (the tokens are gone): sign in again. A refresh that failed otherwise keeps the session.
    if (response.status === 401 && !storedTokens()) onSignedOut();
  }
  return parse<T>(response);
}

export async function register(email: string, password: string): Promise<void> {
  await parse(await send("POST", "/auth/register", { email, password }));
}

export async function login(email: string, password: string): Promise<void> {
  storeTokens(await parse<Tokens>(await send("POST", "/auth/login", { email, password })));
  localStorage.setItem(EMAIL_KEY, email);
}

export async function logout(): Promise<void> {
  const tokens = storedTokens();
  storeTokens(null);
  localStorage.removeItem(EMAIL_KEY);
  // Ends the session on the server too; the local sign-out happened whatever it answers.
  if (tokens)
    await send("POST", "/auth/logout", { refresh_token: tokens.refresh_token }).catch(() => undefined);
}

const projectPath = (id: string) => `/projects/${encodeURIComponent(id)}`;

export const projects = {
  list: () => call<{ projects: Project[] }>("GET", "/projects").then((r) => r.projects),
  get: (id: string) => call<Project>("GET", projectPath(id)),
  // At once (202): the list shows the create's progress, which waiting for the sandbox would hide.
  create: (name: string) => call<Project>("POST", "/projects", { name }, { prefer: "respond-async" }),
  start: (id: string) => call<Project>("POST", `${projectPath(id)}/start`),
  stop: (id: string) => call<Project>("POST", `${projectPath(id)}/stop`),
  snapshot: (id: string) => call<Project>("POST", `${projectPath(id)}/snapshot`, {}),
  restore: (id: string, snapshot?: string) =>
    call<Project>("POST", `${projectPath(id)}/restore`, snapshot ? { snapshot } : {}),
  remove: (id: string) => call<Project>("DELETE", projectPath(id)),
  snapshots: (id: string) =>
    call<{ snapshots: Snapshot[] }>("GET", `${projectPath(id)}/snapshots`).then((r) => r.snapshots),
  backupStatus: (id: string) => call<BackupStatus>("GET", `${projectPath(id)}/backup-status`),
};
