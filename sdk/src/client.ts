// The SDK's authenticated HTTP layer, browser-safe (no node: modules): the CLI, the web console and programs
// all reach the API through `Client.call`, whose paths, parameters, bodies and answers are the types
// generated from the runtime's /openapi.json (./openapi.ts, `npm run sdk:types`). A field the API renames
// is a compile error in every caller, not a drift found at run time.
import type { paths } from "./openapi.js";

export type HttpMethod = "GET" | "PUT" | "POST" | "DELETE" | "PATCH";

/** The document's operation for `method` on `path` (never when there is none). */
export type Operation<P extends keyof paths, M extends HttpMethod> =
  Lowercase<M> extends keyof paths[P] ? NonNullable<paths[P][Lowercase<M>]> : never;

/** The paths that have a `method` operation. */
export type PathsWith<M extends HttpMethod> = {
  [P in keyof paths]: [Operation<P, M>] extends [never] ? never : P;
}[keyof paths];

type Parameters<O> = O extends { parameters: infer X } ? X : object;
/** The operation's parameters as `call` takes them: `params` (the path's), `query` and `headers`. */
type ParameterInit<O> = {
  [
    K in keyof Parameters<O> as K extends "path"
      ? "params"
      : K extends "header"
        ? "headers"
        : K extends "query"
          ? "query"
          : never
  ]: Parameters<O>[K];
};
/** A JSON body as the document types it; any other content type is bytes, named by `contentType`. */
type BodyOf<C> = C extends { "application/json": infer B }
  ? { body: B }
  : { body: Uint8Array; contentType: keyof C & string };
type BodyPart<O> = O extends { requestBody?: never }
  ? { body?: never }
  : O extends { requestBody: { content: infer C } }
    ? BodyOf<C>
    : O extends { requestBody?: { content: infer C } }
      ? Partial<BodyOf<C>>
      : { body?: never };

/** What `call` takes besides the method and path. */
export type CallInit<O> = ParameterInit<O> &
  BodyPart<O> & {
    signal?: AbortSignal;
    /** false: no bearer token and no refresh (login, register, refresh itself). */
    authenticate?: boolean;
  };
/** `call`'s init argument, optional when the operation needs nothing. */
export type CallArgs<O> = object extends CallInit<O> ? [init?: CallInit<O>] : [init: CallInit<O>];

type SuccessStatus = 200 | 201 | 202 | 203 | 204 | 206;
type JsonOf<R> = R extends { content: { "application/json": infer B } } ? B : undefined;
type Successes<R> = {
  [S in keyof R]: S extends SuccessStatus
    ? {
        status: S;
        /** The JSON answer; undefined for other content, whose body `response` still holds unread. */
        data: JsonOf<R[S]>;
        response: Response;
      }
    : never;
}[keyof R];

/** What `call` resolves to: one of the operation's 2xx statuses with its answer. */
export type Answer<P extends keyof paths, M extends HttpMethod> =
  Operation<P, M> extends { responses: infer R } ? Successes<R> : never;
/** The JSON of the operation's 2xx answers (of the one status `S`, when given). */
export type Data<
  P extends keyof paths,
  M extends HttpMethod,
  S extends SuccessStatus = SuccessStatus,
> = Extract<Answer<P, M>, { status: S }>["data"];
/** The operation's JSON request body. */
export type RequestBody<P extends keyof paths, M extends HttpMethod> =
  Operation<P, M> extends { requestBody?: { content: { "application/json": infer B } } } ? B : never;

export type ProjectView = Data<"/projects/{id}", "GET">;
export type Tokens = Data<"/auth/login", "POST">;

/** An answer of 400 and above: the API's status, its stable code, its message and details, and the request. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly details?: unknown,
    /** The request that was answered so (its path with the parameters in, without the query). */
    readonly request?: { readonly method: string; readonly path: string },
  ) {
    super(message);
    this.name = "ApiError";
  }
}
/** The access token was refused and no refresh token renewed it: the login is over. */
export class AuthError extends ApiError {
  constructor(message: string) {
    super(401, "unauthorized", message);
    this.name = "AuthError";
  }
}

/** Where tokens are kept between runs (the CLI: its config file; the console: localStorage). */
export interface TokenStore {
  load(): Promise<{ access_token?: string; refresh_token?: string }>;
  save(tokens: { access_token: string; refresh_token?: string }): Promise<void>;
  /** The refresh token was refused: the session is over (the console shows its login again). */
  clear?(): Promise<void>;
  /**
   * Runs a refresh so that no other holder of these tokens refreshes at the same time (a browser's Web
   * Lock across tabs): refresh tokens are single-use, and presenting a used one revokes the session.
   */
  exclusive?<T>(refresh: () => Promise<T>): Promise<T>;
}
/** Tokens kept in memory only. */
export function memoryTokens(initial: { access_token?: string; refresh_token?: string } = {}): TokenStore {
  let kept = { ...initial };
  return {
    load: async () => kept,
    save: async (tokens) => {
      kept = { ...kept, ...tokens };
    },
  };
}

/** The runtime could not be reached (or did not answer in time): no HTTP answer at all. */
export class NetworkError extends Error {
  constructor(
    /** The runtime's base URL. */
    readonly api: string,
    override readonly cause: unknown,
  ) {
    super(`cannot reach the runtime at ${api || "this page's origin"}: ${(cause as Error).message ?? cause}`);
    this.name = "NetworkError";
  }
}

export interface ClientOptions {
  /** The runtime's base URL, e.g. http://127.0.0.1:8000 ("" in a page the runtime serves). */
  api: string;
  tokens?: TokenStore;
  /** How long the runtime has to answer a request (its status and headers; a stream's body may take longer). */
  answerWithinMs?: number;
  /** Added to every request, e.g. `{ cache: "no-store" }` in a browser. */
  fetchOptions?: Omit<RequestInit, "method" | "headers" | "body" | "signal">;
  /**
   * An API key (`sbx_...`, POST /auth/api-keys) sent instead of the stored tokens: it is never refreshed, so
   * a refused key (revoked, expired) is an AuthError with the API's own message.
   */
  apiKey?: string;
  /** What sends the requests (default: the global fetch), e.g. one that hands them to a server in-process. */
  fetch?: typeof fetch;
}

/** The request as `call` handles it at run time, whatever the operation. */
interface LooseInit {
  params?: Record<string, string | number>;
  query?: Record<string, string | number | boolean | undefined>;
  headers?: Record<string, string | undefined>;
  body?: unknown;
  contentType?: string;
  signal?: AbortSignal;
  authenticate?: boolean;
}

/** The authenticated HTTP layer: bearer token, one transparent refresh on 401, typed errors. */
export class Client {
  readonly api: string;
  readonly tokens: TokenStore;
  private readonly answerWithinMs: number | undefined;
  private readonly fetchOptions: ClientOptions["fetchOptions"];
  private readonly apiKey: string | undefined;
  private readonly fetcher: typeof fetch;
  private refreshing: Promise<string> | undefined;

  constructor(options: ClientOptions) {
    this.api = options.api.replace(/\/+$/, "");
    this.tokens = options.tokens ?? memoryTokens();
    this.answerWithinMs = options.answerWithinMs;
    this.fetchOptions = options.fetchOptions;
    this.apiKey = options.apiKey;
    // Called unbound: a browser's fetch throws "Illegal invocation" when its `this` is not the window.
    this.fetcher = options.fetch ?? ((input, init) => fetch(input, init));
  }

  /** POST /auth/login; keeps the tokens. */
  static async login(api: string, email: string, password: string, tokens = memoryTokens()): Promise<Client> {
    const client = new Client({ api, tokens });
    await client.login(email, password);
    return client;
  }

  /** POST /auth/login with this client; keeps the tokens it answers. */
  async login(email: string, password: string): Promise<Tokens> {
    const { data } = await this.call("POST", "/auth/login", {
      body: { email, password },
      authenticate: false,
    });
    await this.tokens.save({ access_token: data.access_token, refresh_token: data.refresh_token });
    return data;
  }

  /**
   * One operation of the API: `path` is the document's (`/projects/{id}`), `params` fill it in. Answers of
   * 400 and above throw ApiError; a 401 refreshes the tokens once and sends again, and throws AuthError when
   * the login cannot be renewed.
   */
  call<M extends HttpMethod, P extends PathsWith<M>>(
    method: M,
    path: P,
    ...init: CallArgs<Operation<P, M>>
  ): Promise<Answer<P, M>> {
    return this.send(method, path, ...init);
  }

  /** `call`, which a subclass may wrap; the refresh goes through this one directly. */
  private async send<M extends HttpMethod, P extends PathsWith<M>>(
    method: M,
    path: P,
    ...[init]: CallArgs<Operation<P, M>>
  ): Promise<Answer<P, M>> {
    const request = (init ?? {}) as LooseInit;
    const filled = path.replace(/\{([^}]+)\}/g, (_, name: string) => {
      const value = request.params?.[name];
      if (value === undefined) throw new TypeError(`${method} ${path}: no value for {${name}}`);
      return encodeURIComponent(String(value));
    });
    const query = new URLSearchParams();
    for (const [name, value] of Object.entries(request.query ?? {}))
      if (value !== undefined) query.set(name, String(value));
    const search = query.toString();
    const url = `${this.api}${filled}${search ? `?${search}` : ""}`;
    const headers: Record<string, string> = {};
    for (const [name, value] of Object.entries(request.headers ?? {}))
      if (value !== undefined) headers[name] = value;
    let body: RequestInit["body"];
    if (request.contentType !== undefined) {
      headers["content-type"] = request.contentType;
      body = request.body as RequestInit["body"];
    } else if (request.body !== undefined) {
      headers["content-type"] = "application/json";
      body = JSON.stringify(request.body);
    }
    const attempt = (token: string | undefined) =>
      this.fetch(
        url,
        { method, headers: token ? { ...headers, authorization: `Bearer ${token}` } : headers, body },
        request.signal,
      );

    let response: Response;
    if (request.authenticate === false) response = await attempt(undefined);
    else if (this.apiKey !== undefined) {
      response = await attempt(this.apiKey);
      if (response.status === 401)
        throw new AuthError((await errorOf(response, { method, path: filled })).message);
    } else {
      const token = (await this.tokens.load()).access_token;
      response = await attempt(token);
      if (response.status === 401) {
        await response.body?.cancel();
        response = await attempt(await this.refresh(token));
        if (response.status === 401) {
          const refused = await errorOf(response, { method, path: filled });
          throw new AuthError(refused.message);
        }
      }
    }
    if (response.status >= 400) throw await errorOf(response, { method, path: filled });
    const json = (response.headers.get("content-type") ?? "").startsWith("application/json");
    const text = json ? await response.text() : "";
    const data: unknown = text ? JSON.parse(text) : undefined;
    return { status: response.status, data, response } as Answer<P, M>;
  }

  /** fetch, within the client's deadline for an answer; a request that got none is a NetworkError. */
  private async fetch(url: string, init: RequestInit, signal: AbortSignal | undefined): Promise<Response> {
    const deadline = this.answerWithinMs === undefined ? undefined : new AbortController();
    const timer =
      deadline &&
      setTimeout(
        () => deadline.abort(new Error(`no answer within ${this.answerWithinMs! / 1000} s`)),
        this.answerWithinMs,
      );
    const signals = [signal, deadline?.signal].filter((s): s is AbortSignal => s !== undefined);
    try {
      return await this.fetcher(url, {
        ...this.fetchOptions,
        ...init,
        ...(signals.length > 0 ? { signal: signals.length > 1 ? AbortSignal.any(signals) : signals[0] } : {}),
      });
    } catch (error) {
      // The caller's own abort is theirs, not the network's.
      if (signal?.aborted) throw error;
      throw new NetworkError(this.api, error);
    } finally {
      clearTimeout(timer);
    }
  }

  /** One refresh at a time per client (and per store, where it can lock); the new access token. */
  private refresh(rejected: string | undefined): Promise<string> {
    if (!this.refreshing) {
      const renew = () => this.renew(rejected);
      this.refreshing = (this.tokens.exclusive ? this.tokens.exclusive(renew) : renew()).finally(() => {
        this.refreshing = undefined;
      });
    }
    return this.refreshing;
  }

  private async renew(rejected: string | undefined): Promise<string> {
    const current = await this.tokens.load();
    // Another holder of these tokens refreshed meanwhile: its new access token is the one to send.
    if (current.access_token && current.access_token !== rejected) return current.access_token;
    if (!current.refresh_token) {
      await this.tokens.clear?.();
      throw new AuthError("the access token was refused and there is no refresh token");
    }
    const answer = await this.send("POST", "/auth/refresh", {
      body: { refresh_token: current.refresh_token },
      authenticate: false,
    }).catch(async (error: unknown) => {
      if (!(error instanceof ApiError)) throw error;
      // Only a refusal ends the session; a 503 is worth another try later.
      if (error.status === 400 || error.status === 401) await this.tokens.clear?.();
      throw new AuthError(`the login has expired: ${error.message}`);
    });
    // The runtime rotates: the newest refresh token it gave is kept (docs/security.md).
    const { access_token, refresh_token } = answer.data;
    await this.tokens.save({ access_token, refresh_token });
    return access_token;
  }
}

/** The ApiError an answer of 400 and above stands for. */
async function errorOf(response: Response, request: { method: string; path: string }): Promise<ApiError> {
  const text = await response.text();
  let body: { error?: string; message?: string; details?: unknown } = {};
  try {
    body = text ? (JSON.parse(text) as typeof body) : {};
  } catch {
    body = { message: text.slice(0, 500) };
  }
  return new ApiError(
    response.status,
    body.error ?? "error",
    body.message ?? body.error ?? `HTTP ${response.status}`,
    body.details,
    request,
  );
}
