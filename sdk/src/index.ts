// @agent-sandbox/sdk: the platform's REST API for programs (docs/sdk.md). Every request and
// answer shape comes from ./openapi.ts, generated from the runtime's /openapi.json (npm run sdk:types).
import WebSocket from "ws";
import type { paths } from "./openapi.js";

type Json<T> = T extends { content: { "application/json": infer B } } ? B : never;
type Ok<P extends keyof paths, M extends keyof paths[P]> = paths[P][M] extends { responses: infer R }
  ? Json<R[Extract<keyof R, 200 | 201 | 202>]>
  : never;
type Body<P extends keyof paths, M extends keyof paths[P]> = paths[P][M] extends {
  requestBody: { content: { "application/json": infer B } };
}
  ? B
  : never;

export type ProjectView = Ok<"/projects/{id}", "get">;
export type CreateOptions = Body<"/projects", "post">;
export type ExecRequest = Body<"/projects/{id}/exec", "post">;
export type ExecResult = Json<paths["/projects/{id}/exec"]["post"]["responses"][200]>;
export type ExecStreamRequest = Body<"/projects/{id}/exec/stream", "post">;
export type ProcessView = Ok<"/projects/{id}/processes/{execId}", "get">;
export type FileList = Ok<"/projects/{id}/files", "get">;
export type FileWritten = Ok<"/projects/{id}/files/content", "put">;
export type Ports = Ok<"/projects/{id}/ports", "get">;
export type SyncSetting = Ok<"/projects/{id}/sync", "get">;
export type Tokens = Ok<"/auth/login", "post">;
/** One line of the streamed exec answer. */
export type ExecEvent =
  | { type: "start"; exec_id: string }
  | { type: "stdout" | "stderr"; data: string }
  | {
      type: "exit";
      exit_code: number;
      timed_out: boolean;
      duration_ms: number;
      stdout_bytes: number;
      stderr_bytes: number;
    }
  | { type: "error"; message: string };

/** An answer of 400 and above: the API's status, its stable code, its message and details. */
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
/** The access token was refused and no refresh token renewed it. */
export class AuthError extends ApiError {
  constructor(message: string) {
    super(401, "unauthorized", message);
    this.name = "AuthError";
  }
}
/** A wait that ran out of time. */
export class TimeoutError extends Error {
  override name = "TimeoutError";
}

/** Where tokens are kept between runs (the CLI keeps them in its config file). */
export interface TokenStore {
  load(): Promise<{ access_token?: string; refresh_token?: string }>;
  save(tokens: { access_token: string; refresh_token?: string }): Promise<void>;
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

export interface ClientOptions {
  /** The runtime's base URL, e.g. http://127.0.0.1:8000 */
  api: string;
  tokens?: TokenStore;
}

/** The authenticated HTTP layer: bearer token, one transparent refresh on 401, typed errors. */
export class Client {
  readonly api: string;
  readonly tokens: TokenStore;
  constructor(options: ClientOptions) {
    this.api = options.api.replace(/\/+$/, "");
    this.tokens = options.tokens ?? memoryTokens();
  }

  /** POST /auth/login; keeps the tokens. */
  static async login(api: string, email: string, password: string, tokens = memoryTokens()): Promise<Client> {
    const client = new Client({ api, tokens });
    const answer = await fetch(`${client.api}/auth/login`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ email, password }),
    });
    const body = (await readJson(answer)) as Tokens;
    await tokens.save({ access_token: body.access_token, refresh_token: body.refresh_token });
    return client;
  }

  private async refresh(): Promise<string> {
    const { refresh_token } = await this.tokens.load();
    if (!refresh_token) throw new AuthError("the access token was refused and there is no refresh token");
    const answer = await fetch(`${this.api}/auth/refresh`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ refresh_token }),
    });
    if (answer.status >= 400) {
      const error = await readJson(answer).catch((e: unknown) => e);
      throw new AuthError(`the login has expired: ${(error as Error).message}`);
    }
    const body = (await answer.json()) as { access_token: string; refresh_token?: string };
    await this.tokens.save(body);
    return body.access_token;
  }

  /** A request with the bearer token; a 401 refreshes once and sends again. Answers >= 400 throw ApiError. */
  async raw(
    method: string,
    path: string,
    init: { json?: unknown; body?: Uint8Array; headers?: Record<string, string>; signal?: AbortSignal } = {},
  ): Promise<Response> {
    const send = (token: string | undefined) =>
      fetch(`${this.api}${path}`, {
        method,
        headers: {
          ...init.headers,
          ...(init.json === undefined ? {} : { "content-type": "application/json" }),
          ...(token ? { authorization: `Bearer ${token}` } : {}),
        },
        body: init.json === undefined ? init.body : JSON.stringify(init.json),
        signal: init.signal,
      } as RequestInit);
    let answer = await send((await this.tokens.load()).access_token);
    if (answer.status === 401) {
      await answer.body?.cancel();
      answer = await send(await this.refresh());
    }
    if (answer.status >= 400) await readJson(answer);
    return answer;
  }

  async json<T>(method: string, path: string, json?: unknown, headers?: Record<string, string>): Promise<T> {
    return (await readJson(await this.raw(method, path, { json, headers }))) as T;
  }
}

async function readJson(answer: Response): Promise<unknown> {
  const text = await answer.text();
  let body: { error?: string; message?: string; details?: unknown } = {};
  try {
    body = text ? JSON.parse(text) : {};
  } catch {
    body = { message: text.slice(0, 500) };
  }
  if (answer.status === 401) throw new AuthError(body.message ?? "unauthorized");
  if (answer.status >= 400)
    throw new ApiError(
      answer.status,
      body.error ?? "error",
      body.message ?? `HTTP ${answer.status}`,
      body.details,
    );
  return body;
}

const q = (params: Record<string, string | undefined>) =>
  new URLSearchParams(
    Object.entries(params).filter((e): e is [string, string] => e[1] !== undefined),
  ).toString();

/** A sandbox (a project): exec, files, ports, terminal and its lifecycle. */
export class Sandbox {
  readonly files: Files;
  private constructor(
    readonly client: Client,
    public view: ProjectView,
  ) {
    this.files = new Files(client, view.project_id);
  }
  get id(): string {
    return this.view.project_id;
  }
  get status(): string {
    return this.view.status;
  }

  /** POST /projects; waits until it runs unless `wait: false`. */
  static async create(
    client: Client,
    options: CreateOptions,
    wait: { wait?: boolean; timeoutMs?: number } = {},
  ): Promise<Sandbox> {
    const view = await client.json<ProjectView>("POST", "/projects", options);
    const sandbox = new Sandbox(client, view);
    if (wait.wait !== false) await sandbox.waitFor("running", wait.timeoutMs);
    return sandbox;
  }
  static async get(client: Client, id: string): Promise<Sandbox> {
    return new Sandbox(client, await client.json<ProjectView>("GET", `/projects/${encodeURIComponent(id)}`));
  }
  static async list(client: Client): Promise<Sandbox[]> {
    const { projects } = await client.json<Ok<"/projects", "get">>("GET", "/projects");
    return projects.map((p) => new Sandbox(client, p as unknown as ProjectView));
  }

  private path(rest = ""): string {
    return `/projects/${this.id}${rest}`;
  }
  async refresh(): Promise<ProjectView> {
    this.view = await this.client.json<ProjectView>("GET", this.path());
    return this.view;
  }
  /** Polls until the sandbox is in `status` with no operation under way; a failed operation throws. */
  async waitFor(status: string, timeoutMs = 300_000): Promise<ProjectView> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const view = await this.refresh();
      const op = view.operation;
      if (op?.state === "failed")
        throw new ApiError(409, "operation_failed", op.error ?? `${op.kind} failed`);
      if (view.status === status && (!op || ["succeeded", "cancelled", "failed"].includes(op.state)))
        return view;
      if (Date.now() > deadline)
        throw new TimeoutError(`sandbox ${this.id} is ${view.status}, not ${status}, after ${timeoutMs} ms`);
      await new Promise((r) => setTimeout(r, 500));
    }
  }
  private async lifecycle(kind: "start" | "stop" | "snapshot" | "restore", then: string, wait: boolean) {
    await this.client.json("POST", this.path(`/${kind}`), kind === "restore" ? {} : undefined);
    return wait ? this.waitFor(then) : this.refresh();
  }
  start(wait = true) {
    return this.lifecycle("start", "running", wait);
  }
  stop(wait = true) {
    return this.lifecycle("stop", "stopped", wait);
  }
  snapshot(wait = true) {
    return this.lifecycle("snapshot", "running", wait);
  }
  restore(wait = true) {
    return this.lifecycle("restore", "running", wait);
  }
  async delete(): Promise<void> {
    await this.client.raw("DELETE", this.path());
  }

  /** Buffered: the exit code and output (capped: see `truncated`). */
  exec(
    command: string | string[],
    options: Omit<ExecRequest, "command" | "background"> = {},
  ): Promise<ExecResult> {
    return this.client.json<ExecResult>("POST", this.path("/exec"), { ...options, command });
  }
  /** Streamed: every chunk in order, then the exit (NDJSON lines as an async iterator). */
  async *stream(
    command: string | string[],
    options: Omit<ExecStreamRequest, "command"> & { signal?: AbortSignal } = {},
  ): AsyncGenerator<ExecEvent> {
    const { signal, ...rest } = options;
    const answer = await this.client.raw("POST", this.path("/exec/stream"), {
      json: { ...rest, command },
      signal,
    });
    const decoder = new TextDecoder();
    let pending = "";
    for await (const chunk of answer.body as unknown as AsyncIterable<Uint8Array>) {
      pending += decoder.decode(chunk, { stream: true });
      let at: number;
      while ((at = pending.indexOf("\n")) >= 0) {
        const line = pending.slice(0, at);
        pending = pending.slice(at + 1);
        if (line) yield JSON.parse(line) as ExecEvent;
      }
    }
    if (pending.trim()) yield JSON.parse(pending) as ExecEvent;
  }
  /** Streamed with callbacks; resolves to the exit code (an `error` line throws). */
  async run(
    command: string | string[],
    callbacks: { onStdout?: (data: string) => void; onStderr?: (data: string) => void } = {},
    options: Omit<ExecStreamRequest, "command"> & { signal?: AbortSignal } = {},
  ): Promise<{ exit_code: number; timed_out: boolean; exec_id: string }> {
    let execId = "";
    for await (const event of this.stream(command, options)) {
      if (event.type === "start") execId = event.exec_id;
      else if (event.type === "stdout") callbacks.onStdout?.(event.data);
      else if (event.type === "stderr") callbacks.onStderr?.(event.data);
      else if (event.type === "exit")
        return { exit_code: event.exit_code, timed_out: event.timed_out, exec_id: execId };
      else throw new ApiError(502, "stream_error", (event as { message: string }).message);
    }
    throw new ApiError(502, "stream_error", "the exec stream ended without an exit line");
  }

  /** Background processes: start, list, read output since an offset, signal, kill. */
  readonly processes = {
    start: (command: string | string[], options: Omit<ExecRequest, "command" | "background"> = {}) =>
      this.client.json<{ exec_id: string }>("POST", this.path("/exec"), {
        ...options,
        command,
        background: true,
      }),
    list: () => this.client.json<Ok<"/projects/{id}/processes", "get">>("GET", this.path("/processes")),
    get: (execId: string, offset = 0, encoding: "utf8" | "base64" = "utf8") =>
      this.client.json<ProcessView>(
        "GET",
        this.path(`/processes/${execId}?${q({ offset: String(offset), encoding })}`),
      ),
    signal: (execId: string, signal: Body<"/projects/{id}/processes/{execId}/signal", "post">["signal"]) =>
      this.client.json("POST", this.path(`/processes/${execId}/signal`), { signal }),
    kill: (execId: string) => this.client.json("DELETE", this.path(`/processes/${execId}`)),
  };

  ports(): Promise<Ports> {
    return this.client.json<Ports>("GET", this.path("/ports"));
  }

  /** The sync mode the sandbox's daemon follows (manual, auto-commit, auto-idle), read or set. */
  readonly sync = {
    get: () => this.client.json<SyncSetting>("GET", this.path("/sync")),
    set: (setting: Body<"/projects/{id}/sync", "put">) =>
      this.client.json<SyncSetting>("PUT", this.path("/sync"), setting),
  };

  /** Attaches to the sandbox's terminal over `terminal_url`: a WebSocket carrying raw bytes both ways. */
  async terminal(): Promise<Terminal> {
    const view = await this.refresh();
    if (!view.terminal_url)
      throw new ApiError(409, "no_terminal", `sandbox ${this.id} has no terminal (${view.status})`);
    const ws = new WebSocket(view.terminal_url);
    await new Promise<void>((resolve, reject) => {
      ws.once("open", () => resolve());
      ws.once("error", reject);
      ws.once("unexpected-response", (_req, res) =>
        reject(
          new ApiError(res.statusCode ?? 502, "terminal_refused", `terminal refused: HTTP ${res.statusCode}`),
        ),
      );
    });
    return new Terminal(ws);
  }
}

/** A terminal session: write() keys, on("data") output, resize(), close(). */
export class Terminal {
  constructor(readonly ws: WebSocket) {}
  write(data: string | Uint8Array): void {
    this.ws.send(typeof data === "string" ? Buffer.from(data) : data, { binary: true });
  }
  resize(cols: number, rows: number): void {
    this.ws.send(JSON.stringify({ type: "resize", cols, rows }));
  }
  on(event: "data", listener: (data: Buffer) => void): this;
  on(event: "close", listener: (code: number, reason: string) => void): this;
  on(event: "data" | "close", listener: (...args: never[]) => void): this {
    if (event === "data")
      this.ws.on(
        "message",
        (data: Buffer, binary: boolean) => binary && (listener as (d: Buffer) => void)(data),
      );
    else
      this.ws.on("close", (code, reason) =>
        (listener as (c: number, r: string) => void)(code, reason.toString()),
      );
    return this;
  }
  close(): void {
    this.ws.close(1000, "client closed");
  }
}

/** Files inside the sandbox, confined to the agent's home and /workspace. */
export class Files {
  constructor(
    private readonly client: Client,
    private readonly projectId: string,
  ) {}
  private path(rest: string): string {
    return `/projects/${this.projectId}${rest}`;
  }
  async read(path: string): Promise<Buffer> {
    const answer = await this.client.raw("GET", this.path(`/files/content?${q({ path })}`));
    return Buffer.from(await answer.arrayBuffer());
  }
  async readText(path: string): Promise<string> {
    return (await this.read(path)).toString("utf8");
  }
  async write(path: string, data: string | Uint8Array, mode?: string): Promise<FileWritten> {
    const answer = await this.client.raw("PUT", this.path(`/files/content?${q({ path, mode })}`), {
      body: typeof data === "string" ? Buffer.from(data) : data,
      headers: { "content-type": "application/octet-stream" },
    });
    return (await answer.json()) as FileWritten;
  }
  /**
   * A directory's entries (a file: itself), at most `limit` of them (and the runtime's
   * `files.maxListEntries`); a longer directory's answer has `next_cursor`, which `cursor` goes on from.
   */
  list(path?: string, page: { cursor?: string; limit?: number } = {}): Promise<FileList> {
    const { cursor, limit } = page;
    return this.client.json<FileList>(
      "GET",
      this.path(`/files?${q({ path, cursor, limit: limit === undefined ? undefined : String(limit) })}`),
    );
  }
  async delete(path: string, recursive = false): Promise<void> {
    await this.client.json("DELETE", this.path(`/files?${q({ path, recursive: String(recursive) })}`));
  }
  /** Unpacks a tar archive into the directory `path`. */
  async upload(path: string, tar: Uint8Array): Promise<Ok<"/projects/{id}/files/archive", "put">> {
    const answer = await this.client.raw("PUT", this.path(`/files/archive?${q({ path })}`), {
      body: tar,
      headers: { "content-type": "application/x-tar" },
    });
    return (await answer.json()) as Ok<"/projects/{id}/files/archive", "put">;
  }
  /** The directory `path` as a tar archive. */
  async download(path: string): Promise<Buffer> {
    const answer = await this.client.raw("GET", this.path(`/files/archive?${q({ path })}`));
    return Buffer.from(await answer.arrayBuffer());
  }
}
