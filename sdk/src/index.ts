// @agent-sandbox/sdk: the platform's REST API for programs (docs/sdk.md). Every request and
// answer shape comes from ./openapi.ts, generated from the runtime's /openapi.json (npm run sdk:types);
// every request goes through `Client.call` (./client.ts, browser-safe). This module adds the sandbox
// surface for Node: exec, files, processes, ports and the terminal.
import WebSocket from "ws";
import { ApiError, type Client, type Data, type ProjectView, type RequestBody } from "./client.js";

export * from "./client.js";
export { describeProgress } from "./progress.js";

export type CreateOptions = RequestBody<"/projects", "POST">;
export type ExecRequest = RequestBody<"/projects/{id}/exec", "POST">;
export type ExecResult = Data<"/projects/{id}/exec", "POST", 200>;
export type ExecStreamRequest = RequestBody<"/projects/{id}/exec/stream", "POST">;
export type ProcessView = Data<"/projects/{id}/processes/{execId}", "GET">;
export type FileList = Data<"/projects/{id}/files", "GET">;
export type FileWritten = Data<"/projects/{id}/files/content", "PUT">;
export type Ports = Data<"/projects/{id}/ports", "GET">;
export type SyncSetting = Data<"/projects/{id}/sync", "GET">;
/** One line of the streamed exec answer (NDJSON, which the document does not type line by line). */
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

/** A wait that ran out of time. */
export class TimeoutError extends Error {
  override name = "TimeoutError";
}

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
    const { data } = await client.call("POST", "/projects", { body: options });
    const sandbox = new Sandbox(client, data);
    if (wait.wait !== false) await sandbox.waitFor("running", wait.timeoutMs);
    return sandbox;
  }
  static async get(client: Client, id: string): Promise<Sandbox> {
    const { data } = await client.call("GET", "/projects/{id}", { params: { id } });
    return new Sandbox(client, data);
  }
  static async list(client: Client): Promise<Sandbox[]> {
    const { data } = await client.call("GET", "/projects");
    return data.projects.map((p) => new Sandbox(client, p));
  }

  private get params() {
    return { id: this.id };
  }
  async refresh(): Promise<ProjectView> {
    this.view = (await this.client.call("GET", "/projects/{id}", { params: this.params })).data;
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
    if (kind === "restore")
      await this.client.call("POST", "/projects/{id}/restore", { params: this.params, body: {} });
    else await this.client.call("POST", `/projects/{id}/${kind}`, { params: this.params });
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
    await this.client.call("DELETE", "/projects/{id}", { params: this.params });
  }

  /** Buffered: the exit code and output (capped: see `truncated`). */
  exec(
    command: string | string[],
    options: Omit<ExecRequest, "command" | "background"> = {},
  ): Promise<ExecResult> {
    return this.client
      .call("POST", "/projects/{id}/exec", { params: this.params, body: { ...options, command } })
      .then((answer) => {
        // 202 is a background process's answer, which this call never asks for.
        if (answer.status !== 200)
          throw new ApiError(502, "unexpected_answer", `exec answered ${answer.status}, not its result`);
        return answer.data;
      });
  }
  /** Streamed: every chunk in order, then the exit (NDJSON lines as an async iterator). */
  async *stream(
    command: string | string[],
    options: Omit<ExecStreamRequest, "command"> & { signal?: AbortSignal } = {},
  ): AsyncGenerator<ExecEvent> {
    const { signal, ...rest } = options;
    const { response } = await this.client.call("POST", "/projects/{id}/exec/stream", {
      params: this.params,
      body: { ...rest, command },
      ...(signal ? { signal } : {}),
    });
    const decoder = new TextDecoder();
    let pending = "";
    for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
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
      this.client
        .call("POST", "/projects/{id}/exec", {
          params: this.params,
          body: { ...options, command, background: true },
        })
        .then(({ data }) => ({ exec_id: data.exec_id })),
    list: () =>
      this.client.call("GET", "/projects/{id}/processes", { params: this.params }).then(({ data }) => data),
    get: (execId: string, offset = 0, encoding: "utf8" | "base64" = "utf8") =>
      this.client
        .call("GET", "/projects/{id}/processes/{execId}", {
          params: { ...this.params, execId },
          query: { offset, encoding },
        })
        .then(({ data }) => data),
    signal: (
      execId: string,
      signal: RequestBody<"/projects/{id}/processes/{execId}/signal", "POST">["signal"],
    ) =>
      this.client
        .call("POST", "/projects/{id}/processes/{execId}/signal", {
          params: { ...this.params, execId },
          body: { signal },
        })
        .then(({ data }) => data),
    kill: (execId: string) =>
      this.client
        .call("DELETE", "/projects/{id}/processes/{execId}", { params: { ...this.params, execId } })
        .then(({ data }) => data),
  };

  ports(): Promise<Ports> {
    return this.client.call("GET", "/projects/{id}/ports", { params: this.params }).then(({ data }) => data);
  }

  /** The sync mode the sandbox's daemon follows (manual, auto-commit, auto-idle), read or set. */
  readonly sync = {
    get: () =>
      this.client.call("GET", "/projects/{id}/sync", { params: this.params }).then(({ data }) => data),
    set: (setting: RequestBody<"/projects/{id}/sync", "PUT">) =>
      this.client
        .call("PUT", "/projects/{id}/sync", { params: this.params, body: setting })
        .then(({ data }) => data),
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
  private get params() {
    return { id: this.projectId };
  }
  async read(path: string): Promise<Buffer> {
    const { response } = await this.client.call("GET", "/projects/{id}/files/content", {
      params: this.params,
      query: { path },
    });
    return Buffer.from(await response.arrayBuffer());
  }
  async readText(path: string): Promise<string> {
    return (await this.read(path)).toString("utf8");
  }
  async write(path: string, data: string | Uint8Array, mode?: string): Promise<FileWritten> {
    const answer = await this.client.call("PUT", "/projects/{id}/files/content", {
      params: this.params,
      query: { path, ...(mode === undefined ? {} : { mode }) },
      body: typeof data === "string" ? Buffer.from(data) : data,
      contentType: "application/octet-stream",
    });
    return answer.data;
  }
  /**
   * A directory's entries (a file: itself), at most `limit` of them (and the runtime's
   * `files.maxListEntries`); a longer directory's answer has `next_cursor`, which `cursor` goes on from.
   */
  list(path?: string, page: { cursor?: string; limit?: number } = {}): Promise<FileList> {
    const { cursor, limit } = page;
    return this.client
      .call("GET", "/projects/{id}/files", { params: this.params, query: { path, cursor, limit } })
      .then(({ data }) => data);
  }
  async delete(path: string, recursive = false): Promise<void> {
    await this.client.call("DELETE", "/projects/{id}/files", {
      params: this.params,
      query: { path, recursive: recursive ? "true" : "false" },
    });
  }
  /** Unpacks a tar archive into the directory `path`. */
  async upload(path: string, tar: Uint8Array): Promise<Data<"/projects/{id}/files/archive", "PUT">> {
    const answer = await this.client.call("PUT", "/projects/{id}/files/archive", {
      params: this.params,
      query: { path },
      body: tar,
      contentType: "application/x-tar",
    });
    return answer.data;
  }
  /** The directory `path` as a tar archive. */
  async download(path: string): Promise<Buffer> {
    const { response } = await this.client.call("GET", "/projects/{id}/files/archive", {
      params: this.params,
      query: { path },
    });
    return Buffer.from(await response.arrayBuffer());
  }
}
