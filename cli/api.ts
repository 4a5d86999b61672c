// The runtime's REST API as the CLI uses it (docs/api.md). An expired access token is refreshed once with
// POST /auth/refresh and the request sent again; a refresh that fails is a login that has expired.
import type { ProjectView as SdkProjectView } from "../sdk/src/index.js";
import { CliError, EXIT } from "./errors.js";
import type { ConfigStore } from "./config.js";

export const DEFAULT_API = "http://127.0.0.1:8000";

export interface ProjectView {
  project_id: string;
  name: string;
  status: string;
  error: string | null;
  /** `host_key`: a kubernetes project's SSH gateway key (the Pod has no sshd to ask). */
  ssh: { host: string; port: number; user: string; private_key?: string; host_key?: string };
  backend?: string;
  terminal_url: string | null;
  /** The SDK's type, generated from the API's document (its `progress.last` is an engine event, an object). */
  operation: SdkProjectView["operation"];
  [key: string]: unknown;
}

interface ErrorBody {
  error?: string;
  message?: string;
  details?: unknown;
}

export class ApiClient {
  constructor(
    readonly base: string,
    private readonly store: ConfigStore,
  ) {}

  /** A request with the saved access token; `expect` are the statuses that are not errors. */
  async request<T>(
    method: string,
    path: string,
    body?: unknown,
    headers: Record<string, string> = {},
  ): Promise<{ status: number; body: T }> {
    let answer = await this.send(method, path, body, headers, (await this.store.load()).access_token);
    if (answer.status === 401) {
      const token = await this.refresh();
      answer = await this.send(method, path, body, headers, token);
      if (answer.status === 401) throw loginExpired();
    }
    if (answer.status >= 400) throw apiError(method, path, answer.status, answer.body as ErrorBody);
    return answer as { status: number; body: T };
  }

  /** Unauthenticated: login. */
  async login(email: string, password: string): Promise<void> {
    const answer = await this.send("POST", "/auth/login", { email, password }, {}, undefined);
    if (answer.status !== 200) throw apiError("POST", "/auth/login", answer.status, answer.body as ErrorBody);
    const tokens = answer.body as { access_token: string; refresh_token: string };
    await this.store.update((config) => {
      config.api = this.base;
      config.email = email;
      config.access_token = tokens.access_token;
      config.refresh_token = tokens.refresh_token;
    });
  }

  private async refresh(): Promise<string> {
    const { refresh_token } = await this.store.load();
    if (!refresh_token) throw loginExpired();
    const answer = await this.send("POST", "/auth/refresh", { refresh_token }, {}, undefined);
    if (answer.status !== 200) throw loginExpired();
    const tokens = answer.body as { access_token: string; refresh_token?: string };
    await this.store.update((config) => {
      config.access_token = tokens.access_token;
      // The runtime rotates: keep the newest refresh token it gave (docs/security.md#refresh-tokens-kept-or-rotated).
      if (tokens.refresh_token) config.refresh_token = tokens.refresh_token;
    });
    return tokens.access_token;
  }

  private async send(
    method: string,
    path: string,
    body: unknown,
    headers: Record<string, string>,
    token: string | undefined,
  ): Promise<{ status: number; body: unknown }> {
    let response: Response;
    try {
      response = await fetch(`${this.base}${path}`, {
        method,
        headers: {
          ...headers,
          ...(body === undefined ? {} : { "content-type": "application/json" }),
          ...(token ? { authorization: `Bearer ${token}` } : {}),
        },
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: AbortSignal.timeout(120_000),
      });
    } catch (error) {
      throw new CliError(
        EXIT.failure,
        `cannot reach the runtime at ${this.base}: ${(error as Error).message} (is it running? sbx login --api URL)`,
      );
    }
    const text = await response.text();
    let parsed: unknown = {};
    try {
      parsed = text ? JSON.parse(text) : {};
    } catch {
      parsed = { message: text.slice(0, 200) };
    }
    return { status: response.status, body: parsed };
  }

  getProject(id: string): Promise<ProjectView> {
    return this.request<ProjectView>("GET", `/projects/${id}`).then((a) => a.body);
  }
}

const loginExpired = () =>
  new CliError(EXIT.auth, "your login has expired or was revoked: run `sbx login` again");

function apiError(method: string, path: string, status: number, body: ErrorBody): CliError {
  const what = body.message ?? body.error ?? `HTTP ${status}`;
  const code =
    // An image the engine lacks is the input's fault (a devcontainer's `image`), whatever status says so.
    body.error === "image_not_found"
      ? EXIT.badInput
      : status === 401
        ? EXIT.auth
        : status === 404
          ? EXIT.notFound
          : status === 409
            ? EXIT.conflict
            : status === 400 || status === 403 || status === 413
              ? EXIT.badInput
              : EXIT.failure;
  const message =
    status === 404 && path.startsWith("/projects/")
      ? `project not found (it was deleted, or it is not yours): ${method} ${path}`
      : `${method} ${path}: ${status} ${what}`;
  return new CliError(code, message, body.details);
}
