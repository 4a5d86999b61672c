import { randomUUID } from "node:crypto";
import { createServer, type IncomingMessage, type Server } from "node:http";
import {
  capConnectionsPerAddress,
  DEFAULT_HTTP_LIMITS,
  nodeServerOptions,
  type HttpLimits,
} from "../http-limits.js";
import * as path from "node:path";
import type { Duplex } from "node:stream";
import { WebSocketServer, type RawData, type WebSocket } from "ws";
import type { Database } from "../store/db.js";
import { projectAccess, recordProjectConnection } from "../store/projects.js";
import { recordTerminalSessionEnd, recordTerminalSessionStart } from "../store/terminal.js";
import { SandboxNotRunningError } from "../sandbox/exec.js";
import {
  TMUX_SESSION,
  TMUX_SESSION_NAME,
  type SandboxAttacher,
  type TerminalAttachment,
  type TerminalSize,
} from "./attach.js";
import { AuditLog, CastRecorder } from "./recording.js";
import { secretPatterns, secretsFingerprint, SecretMatchers, StreamRedactor } from "./redact.js";
import { redeemTicket, TicketError, type TicketIssuer } from "./tickets.js";

/** Close codes the clients see (4000-4999 are the application's; RFC 6455 §7.4.2). */
export const CLOSE = {
  ended: 1000,
  tooBig: 1009,
  internal: 1011,
  /** `?session=` is not a tmux session name a worktree can have. */
  badSession: 4400,
  unauthorized: 4401,
  slowClient: 4408,
  notRunning: 4409,
  gone: 4410,
  capReached: 4413,
  rateLimited: 4429,
} as const;

export interface TerminalProxyOptions {
  readonly db: Database;
  readonly tickets: TicketIssuer;
  readonly attacher: SandboxAttacher;
  /** Session recordings go to `<dir>/<project>/<session>.cast`. */
  readonly recordingsDir: string;
  /** Largest frame accepted from a client; a larger one closes the socket with 1009. */
  readonly maxFrameBytes?: number;
  /** Input rate per connection: a token bucket of `burstBytes`, refilled at `bytesPerSecond`. */
  readonly inputRate?: { readonly bytesPerSecond: number; readonly burstBytes: number };
  /** Output held for a client that does not read before the sandbox's output is paused. */
  readonly maxBufferedBytes?: number;
  /** A client that has not read for this long is disconnected (4408). */
  readonly slowClientMs?: number;
  /** How often a live session re-checks that its user, project and sandbox are still there. */
  readonly recheckMs?: number;
  /**
   * Bytes one session may put in its recording (output and input); at the cap it ends with 4413, and the
   * audit says where it was cut. Keeps one `yes` from filling the host's disk.
   */
  readonly maxSessionBytes?: number;
  /** Live sessions one user may hold on one project; one more is refused with 4429. */
  readonly maxSessionsPerUser?: number;
  /**
   * Origins a browser may open terminals from (the web console's). A request with another Origin is
   * refused at the upgrade (403), so a page elsewhere cannot use a ticket it got hold of; a client that
   * sends no Origin (the CLI, the SDK) is not a browser and is let through to the ticket check.
   */
  readonly allowedOrigins?: readonly string[];
  /**
   * The values of a project's secrets. The audit and the recording get a marker in place of each
   * one typed or printed (runtime/terminal/redact.ts); what goes to the sandbox and to the client is not
   * changed. Read when a session starts (a session whose values cannot be read is not started) and every
   * `secretsRefreshMs` after. Without it nothing is redacted.
   */
  readonly secretValues?: (projectId: string) => Promise<readonly string[]>;
  /**
   * Wakes a project the platform put to sleep (runtime/tenants/wake.ts): true once it runs, false when it
   * was not asleep; throws when its start failed or ran late. `gone` says the session ended meanwhile.
   * Without it, a stopped project's terminal is refused (4409).
   */
  readonly wake?: (projectId: string, gone: () => boolean) => Promise<boolean>;
  /** How often a live session re-reads its project's secret values: a value set meanwhile is redacted from then on. */
  readonly secretsRefreshMs?: number;
  /** Slow and greedy clients on the terminal's port (`runtime.http`), as on the API's. */
  readonly http?: HttpLimits;
  readonly log?: (message: string, fields?: Record<string, unknown>) => void;
}

const DEFAULT_SIZE: TerminalSize = { cols: 80, rows: 24 };
const MAX_COLS = 1000;
const MAX_ROWS = 500;
/** Frames a client may send before its session is attached (the seed's client sends a resize at once). */
const MAX_EARLY_FRAMES = 64;

type Frame = { data: Buffer; binary: boolean };

/** `{"type":"resize","cols":N,"rows":M}` → a size; `null` for a resize that is absurd; undefined: input. */
export function parseControl(frame: Frame): TerminalSize | null | undefined {
  if (frame.binary || frame.data[0] !== 0x7b /* { */) return undefined;
  let message: unknown;
  try {
    message = JSON.parse(frame.data.toString("utf8"));
  } catch {
    return undefined;
  }
  if (typeof message !== "object" || message === null || (message as { type?: unknown }).type !== "resize")
    return undefined;
  const { cols, rows } = message as { cols?: unknown; rows?: unknown };
  const valid = (n: unknown, max: number): n is number =>
    Number.isInteger(n) && (n as number) >= 1 && (n as number) <= max;
  return valid(cols, MAX_COLS) && valid(rows, MAX_ROWS) ? { cols, rows } : null;
}

/** A wake that takes longer than this is announced in the client's terminal. */
const WAKE_NOTICE_MS = 250;

/** What a live session needs re-checked: the user may be deleted, the project deleted or stopped. */
async function sessionStanding(
  db: Database,
  user: string,
  project: string,
): Promise<{ code: number; reason: string } | undefined> {
  const row = await projectAccess(db, user, project);
  if (!row.user_ok || !row.owned) return { code: CLOSE.unauthorized, reason: "access revoked" };
  if (row.state === null || row.state === "deleted" || row.state === "deleting")
    return { code: CLOSE.gone, reason: "the project was deleted" };
  if (row.state !== "running") return { code: CLOSE.notRunning, reason: `the sandbox is ${row.state}` };
  return undefined;
}

/**
 * The terminal proxy (port 9000): `ws://HOST:9000/terminal/{project_id}?token=TICKET`. The ticket and
 * the caller's standing are checked before the sandbox is touched; then the socket is joined to tmux
 * session `main` in the sandbox, every input frame is audited and the whole session recorded.
 */
export class TerminalProxy {
  private readonly server: Server;
  private readonly wss: WebSocketServer;
  private readonly sessions = new Set<TerminalSession>();
  /** Live sessions per `user:project`, for {@link TerminalProxyOptions.maxSessionsPerUser}. */
  private readonly holders = new Map<string, number>();
  private readonly options: Required<Omit<TerminalProxyOptions, "log" | "secretValues" | "wake">> &
    Pick<TerminalProxyOptions, "log" | "secretValues" | "wake">;
  private readonly matchers = new SecretMatchers();

  constructor(options: TerminalProxyOptions) {
    this.options = {
      maxFrameBytes: 64 * 1024,
      inputRate: { bytesPerSecond: 64 * 1024, burstBytes: 256 * 1024 },
      maxBufferedBytes: 1024 * 1024,
      slowClientMs: 30_000,
      recheckMs: 5_000,
      maxSessionBytes: 128 * 1024 * 1024,
      maxSessionsPerUser: 8,
      allowedOrigins: [],
      secretsRefreshMs: 30_000,
      http: DEFAULT_HTTP_LIMITS,
      ...options,
    };
    this.wss = new WebSocketServer({ noServer: true, maxPayload: this.options.maxFrameBytes });
    this.server = createServer(nodeServerOptions(this.options.http), (_request, response) => {
      response.writeHead(426, { "content-type": "text/plain" }).end("this port serves terminal WebSockets\n");
    });
    capConnectionsPerAddress(this.server, this.options.http, (address, open) =>
      this.options.log?.("connection refused: too many open connections from one address", { address, open }),
    );
    this.server.on("upgrade", (request: IncomingMessage, socket: Duplex, head: Buffer) => {
      const match = /^\/terminal\/([0-9a-f-]{36})(\?|$)/.exec(request.url ?? "");
      if (!match) {
        socket.end("HTTP/1.1 404 Not Found\r\nConnection: close\r\n\r\n");
        return;
      }
      const origin = request.headers.origin;
      if (origin !== undefined && !this.options.allowedOrigins.includes(origin)) {
        this.options.log?.("terminal upgrade refused: origin", { origin });
        socket.end("HTTP/1.1 403 Forbidden\r\nConnection: close\r\n\r\nthis origin may not open terminals\n");
        return;
      }
      this.wss.handleUpgrade(request, socket, head, (ws) => {
        const session = new TerminalSession(
          ws,
          request,
          match[1]!,
          this.options,
          this.holders,
          this.matchers,
        );
        this.sessions.add(session);
        void session.run();
        void session.finished.then(() => this.sessions.delete(session));
      });
    });
  }

  /** Live sessions (for tests and metrics). */
  get liveSessions(): number {
    return this.sessions.size;
  }

  /** Whether a session is open on the project (the idle shutdown leaves such a project running). */
  hasLiveSession(projectId: string): boolean {
    for (const holder of this.holders.keys()) if (holder.endsWith(`:${projectId}`)) return true;
    return false;
  }

  async listen(port: number, host: string): Promise<number> {
    await new Promise<void>((resolve, reject) => {
      this.server.once("error", reject);
      this.server.listen(port, host, () => resolve());
    });
    return (this.server.address() as { port: number }).port;
  }

  /** Ends every session (clients are told: 1001 going away) and stops listening. */
  async close(): Promise<void> {
    await Promise.all([...this.sessions].map((s) => s.end(1001, "the terminal proxy is shutting down")));
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
    this.wss.close();
  }
}

class TerminalSession {
  private readonly early: Frame[] = [];
  /**
   * Input waits until tmux has drawn (its first output): before that the pty is still in cooked
   * mode, where a Ctrl-C typed at connect would kill the attaching client instead of reaching the shell.
   */
  private live = false;
  private attachment: TerminalAttachment | undefined;
  private recorder: CastRecorder | undefined;
  private audit: AuditLog | undefined;
  private sessionId: string | undefined;
  private ending: Promise<void> | undefined;
  private resolveFinished!: () => void;
  /** Resolves when the session has ended (whatever ended it). */
  readonly finished = new Promise<void>((resolve) => (this.resolveFinished = resolve));
  private ended = false;
  private tokens: number;
  private lastRefill = Date.now();
  private pausedSince: number | undefined;
  private readonly timers: NodeJS.Timeout[] = [];
  private inputBytes = 0;
  /** Resizes in flight: input waits for them, so what is typed after a resize runs at the new size. */
  private resizing: Promise<void> = Promise.resolve();
  private resizesPending = 0;
  private outputBytes = 0;
  /** Why the attachment's output is paused: the client is not reading, or the recording's disk is behind. */
  private readonly pauses = new Set<"client" | "recording">();
  /** The `user:project` slot this session holds in the proxy's count, once it holds one. */
  private holder: string | undefined;
  /** The session row's insert, which {@link end} waits for before closing the row. */
  private recordingStart: Promise<void> | undefined;
  /** The audit's and the recording's copies of the input and the output pass through these. */
  private readonly redactInput = new StreamRedactor();
  private readonly redactOutput = new StreamRedactor();
  /** The secret values the redactors use, as {@link secretsFingerprint}. */
  private secretsRead: string | undefined;
  private readingSecrets = false;

  constructor(
    private readonly ws: WebSocket,
    private readonly request: IncomingMessage,
    private readonly project: string,
    private readonly options: TerminalProxy["options"],
    private readonly holders: Map<string, number>,
    private readonly matchers: SecretMatchers,
  ) {
    this.tokens = options.inputRate.burstBytes;
    ws.on("message", (data: RawData, binary: boolean) => this.onFrame(toBuffer(data), binary));
    ws.on("close", () => void this.end(CLOSE.ended, "client closed"));
    ws.on("error", (error) => {
      // ws reports a bad frame as an error and closes the socket itself (1009 for an oversize one).
      this.options.log?.("terminal client error", { project, error: error.message });
      const tooBig = (error as { code?: string }).code === "WS_ERR_UNSUPPORTED_MESSAGE_LENGTH";
      void this.end(tooBig ? CLOSE.tooBig : 1002, error.message.slice(0, 100));
    });
  }

  /**
   * Wakes the project when it is asleep (runtime/tenants/wake.ts), the client told in its terminal while
   * it starts. False when it was not asleep or the session ended meanwhile; a failed or late start ends
   * the session naming it.
   */
  private async wake(): Promise<boolean> {
    const { wake } = this.options;
    if (!wake) return false;
    const told = () => {
      if (this.ws.readyState === this.ws.OPEN) this.ws.send(Buffer.from("waking the sandbox...\r\n"));
    };
    try {
      const timer = setTimeout(told, WAKE_NOTICE_MS);
      const woken = await wake(this.project, () => this.ended).finally(() => clearTimeout(timer));
      return woken && !this.ended;
    } catch (error) {
      await this.end(CLOSE.notRunning, (error as Error).message.slice(0, 120));
      return false;
    }
  }

  async run(): Promise<void> {
    const { db, tickets } = this.options;
    const url = new URL(this.request.url ?? "/", "http://terminal");
    const origin = this.request.headers.origin;
    // `?session=B`: a worktree's tmux session; audited and recorded like `main`.
    const tmuxSession = url.searchParams.get("session") ?? TMUX_SESSION;
    if (!TMUX_SESSION_NAME.test(tmuxSession))
      return this.end(CLOSE.badSession, "session must be a tmux session name: letters, digits, _ and -");
    let claims;
    try {
      claims = tickets.verify(url.searchParams.get("token") ?? "", this.project, origin);
      if (!(await redeemTicket(db, claims))) throw new TicketError("ticket already used");
    } catch (error) {
      const reason = error instanceof TicketError ? error.message : "invalid ticket";
      return this.end(CLOSE.unauthorized, reason);
    }
    const standingNow = () =>
      sessionStanding(db, claims.user, this.project).catch(() => ({
        code: CLOSE.internal,
        reason: "the database is unavailable",
      }));
    let standing = await standingNow();
    // A sandbox the platform put to sleep is woken for the terminal: the client is told, then attached.
    if (standing?.code === CLOSE.notRunning && (await this.wake())) standing = await standingNow();
    if (standing) return this.end(standing.code, standing.reason);
    if (this.ended) return;
    const holder = `${claims.user}:${this.project}`;
    const held = this.holders.get(holder) ?? 0;
    if (held >= this.options.maxSessionsPerUser)
      return this.end(
        CLOSE.rateLimited,
        `at most ${this.options.maxSessionsPerUser} terminal sessions per user and project`,
      );
    this.holders.set(holder, held + 1);
    this.holder = holder;
    // Fail closed: a session whose secrets could not be read would audit them as typed.
    try {
      await this.readSecrets();
    } catch (error) {
      this.options.log?.("terminal secrets unreadable", {
        project: this.project,
        error: (error as Error).message,
      });
      return this.end(CLOSE.internal, "the project's secrets could not be read for the audit");
    }
    if (this.ended) return;

    try {
      this.attachment = await this.options.attacher.attach(this.project, tmuxSession);
    } catch (error) {
      if (error instanceof SandboxNotRunningError)
        // A close reason is at most 123 bytes.
        return this.end(CLOSE.notRunning, (error.reason ?? "the sandbox is not running").slice(0, 120));
      this.options.log?.("terminal attach failed", {
        project: this.project,
        error: (error as Error).message,
      });
      return this.end(CLOSE.internal, "could not attach to the sandbox");
    }
    if (this.ended) {
      this.attachment.detach();
      return;
    }
    const sessionId = randomUUID();
    this.sessionId = sessionId;
    const castPath = path.join(this.options.recordingsDir, this.project, `${sessionId}.cast`);
    this.recordingStart = (async () => {
      await recordTerminalSessionStart(db, {
        id: sessionId,
        projectId: this.project,
        userId: claims.user,
        castPath,
      });
      await recordProjectConnection(db, this.project);
    })();
    try {
      await this.recordingStart;
    } catch {
      return this.end(CLOSE.internal, "the database is unavailable");
    }
    // A client that left during those awaits has been ended (end() waited for the row): start nothing.
    if (this.ended) return;
    this.audit = new AuditLog(db, { session: sessionId, project: this.project, user: claims.user });
    this.recorder = new CastRecorder(castPath, DEFAULT_SIZE, {
      title: `project ${this.project} session ${tmuxSession}`,
    });
    this.options.log?.("terminal session started", {
      session: sessionId,
      project: this.project,
      tmux: tmuxSession,
      user: claims.user,
    });

    const { stream } = this.attachment;
    stream.on("data", (chunk: Buffer) => this.onOutput(chunk));
    void this.attachment.ended.then(({ sandboxRunning }) =>
      sandboxRunning ? this.end(CLOSE.ended, "session ended") : this.end(CLOSE.gone, "the sandbox stopped"),
    );
    this.timers.push(
      setInterval(() => {
        void sessionStanding(db, claims.user, this.project).then(
          (why) => why && this.end(why.code, why.reason),
          () => undefined, // a database hiccup does not end a live session; the next check decides
        );
      }, this.options.recheckMs),
      setInterval(() => {
        if (this.pausedSince !== undefined && Date.now() - this.pausedSince > this.options.slowClientMs)
          void this.end(CLOSE.slowClient, "the client is not reading its output");
        if (this.audit?.error) void this.end(CLOSE.internal, "the session can no longer be audited");
      }, 250),
    );
    if (this.options.secretValues)
      this.timers.push(
        setInterval(() => {
          if (this.readingSecrets) return;
          this.readingSecrets = true;
          void this.readSecrets()
            .catch((error: Error) =>
              // The values read last stay in use; the next read may succeed.
              this.options.log?.("terminal secrets refresh failed", {
                project: this.project,
                error: error.message,
              }),
            )
            .finally(() => (this.readingSecrets = false));
        }, this.options.secretsRefreshMs),
      );
    // tmux draws at once; should it not, input is not held back for long.
    this.timers.push(setTimeout(() => this.goLive(), 2_000));
  }

  private onFrame(data: Buffer, binary: boolean): void {
    if (this.ended) return;
    // Input rate limit: a token bucket per connection.
    const now = Date.now();
    const { bytesPerSecond, burstBytes } = this.options.inputRate;
    this.tokens = Math.min(burstBytes, this.tokens + ((now - this.lastRefill) / 1000) * bytesPerSecond);
    this.lastRefill = now;
    this.tokens -= data.length;
    if (this.tokens < 0) {
      void this.end(CLOSE.rateLimited, "input rate limit exceeded");
      return;
    }
    const frame = { data, binary };
    if (!this.live) {
      if (this.early.length >= MAX_EARLY_FRAMES)
        void this.end(CLOSE.rateLimited, "too much input before the session was ready");
      else this.early.push(frame);
      return;
    }
    this.deliver(frame);
  }

  private deliver(frame: Frame): void {
    if (this.ended || !this.attachment) return;
    const control = parseControl(frame);
    if (control === null) return; // an absurd size is ignored; the terminal keeps its own
    if (control) {
      this.audit!.record("resize", Buffer.from(`${control.cols}x${control.rows}`));
      this.recorder!.resize(control);
      const attachment = this.attachment;
      this.resizesPending += 1;
      this.resizing = this.resizing
        .then(() => attachment.resize(control))
        .catch(() => undefined)
        .finally(() => (this.resizesPending -= 1));
      return;
    }
    if (this.overCap(this.redactInput.holding + frame.data.length)) return;
    // The sandbox gets the frame as it is, now; only the kept copy is redacted (and may lag a few frames).
    this.recordInput(this.redactInput.push(frame.data));
    this.inputBytes += frame.data.length;
    const { stream } = this.attachment;
    if (this.resizesPending === 0) stream.write(frame.data);
    else this.resizing = this.resizing.then(() => void stream.write(frame.data));
  }

  private goLive(): void {
    if (this.live || this.ended) return;
    this.live = true;
    for (const frame of this.early.splice(0)) this.deliver(frame);
  }

  private onOutput(chunk: Buffer): void {
    if (this.ended) return;
    if (!this.live) setImmediate(() => this.goLive());
    if (this.overCap(this.redactOutput.holding + chunk.length)) return;
    this.outputBytes += chunk.length;
    this.recordOutput(this.redactOutput.push(chunk));
    this.ws.send(chunk, { binary: true }, () => this.maybeResume());
    // Back-pressure: a client that does not read gets no more than maxBufferedBytes held for it.
    if (this.ws.bufferedAmount > this.options.maxBufferedBytes && this.pausedSince === undefined) {
      this.pausedSince = Date.now();
      this.pause("client");
    }
  }

  /**
   * Whether `bytes` more bytes fit in the recording under its cap: recorded as JSON, a byte takes up to six
   * (`\u001b`), so the cap holds whatever the bytes are (a redaction marker takes less than the bytes it
   * replaces would).
   */
  private fitsRecording(bytes: number): boolean {
    return this.recorder!.bytes + bytes * 6 + 64 <= this.options.maxSessionBytes;
  }

  /** True (and the session ending) when `more` bytes could take the recording past its cap. */
  private overCap(more: number): boolean {
    if (this.fitsRecording(more)) return false;
    const mib = Math.round(this.options.maxSessionBytes / (1024 * 1024));
    const why = `the session reached its recording cap of ${mib} MiB`;
    // Input held back by the redaction was typed before the cut (and is in the sandbox): it is audited first.
    const typed = this.redactInput.flush();
    if (typed.length > 0) this.audit!.record("input", typed);
    this.redactOutput.flush();
    this.audit!.record("truncated", Buffer.from(why));
    void this.end(CLOSE.capReached, why);
    return true;
  }

  /** The kept copy of input, redacted: the audit and the recording. */
  private recordInput(redacted: Buffer): void {
    if (redacted.length === 0) return;
    this.audit!.record("input", redacted);
    this.recorder!.input(redacted);
  }

  /** The kept copy of output, redacted: the recording. */
  private recordOutput(redacted: Buffer): void {
    // Back-pressure from the disk: a fast sandbox waits for its recording to be written.
    if (redacted.length > 0 && !this.recorder!.output(redacted)) {
      this.pause("recording");
      this.recorder!.onDrain(() => this.resume("recording"));
    }
  }

  /** Reads the project's secret values; when they changed, the redactors switch to them. */
  private async readSecrets(): Promise<void> {
    if (!this.options.secretValues) return;
    const values = await this.options.secretValues(this.project);
    const fingerprint = secretsFingerprint(values);
    if (this.ended || fingerprint === this.secretsRead) return;
    this.secretsRead = fingerprint;
    const input = this.redactInput.use(this.matchers.get(secretPatterns(values, "input")));
    const output = this.redactOutput.use(this.matchers.get(secretPatterns(values, "output")));
    if (!this.audit) return;
    if (this.fitsRecording(input.length + output.length)) {
      this.recordInput(input);
      this.recordOutput(output);
    } else {
      if (input.length > 0) this.audit.record("input", input);
      this.overCap(input.length + output.length);
    }
  }

  private pause(reason: "client" | "recording"): void {
    if (this.pauses.size === 0) this.attachment?.stream.pause();
    this.pauses.add(reason);
  }

  private resume(reason: "client" | "recording"): void {
    if (!this.pauses.delete(reason) || this.pauses.size > 0 || this.ended) return;
    this.attachment?.stream.resume();
  }

  private maybeResume(): void {
    if (this.pausedSince !== undefined && this.ws.bufferedAmount < this.options.maxBufferedBytes / 2) {
      this.pausedSince = undefined;
      this.resume("client");
    }
  }

  /** Ends the session once: detach, flush the audit, close the recording, tell the client why. */
  end(code: number, reason: string): Promise<void> {
    this.ending ??= (async () => {
      this.ended = true;
      for (const timer of this.timers) clearTimeout(timer);
      this.attachment?.detach();
      if (this.ws.readyState === this.ws.OPEN || this.ws.readyState === this.ws.CONNECTING) {
        this.ws.close(code, reason);
        // A client that never reads never completes the closing handshake: drop it after a grace time.
        setTimeout(() => this.ws.terminate(), 2_000).unref();
      }
      if (this.holder) {
        const left = (this.holders.get(this.holder) ?? 1) - 1;
        if (left > 0) this.holders.set(this.holder, left);
        else this.holders.delete(this.holder);
      }
      if (this.sessionId) {
        await this.recordingStart?.catch(() => undefined);
        await this.recordEnd(this.sessionId, code, reason);
      }
      this.resolveFinished();
    })();
    return this.ending;
  }

  /** Flushes the audit, closes the recording and marks the session row ended. */
  private async recordEnd(sessionId: string, code: number, reason: string): Promise<void> {
    // What the redactors still hold: a value's beginning that never completed, as it is.
    const typed = this.redactInput.flush();
    const printed = this.redactOutput.flush();
    if (this.audit && typed.length > 0) this.audit.record("input", typed);
    if (this.recorder && this.fitsRecording(typed.length + printed.length)) {
      if (typed.length > 0) this.recorder.input(typed);
      if (printed.length > 0) this.recorder.output(printed);
    }
    await this.audit?.flush();
    await this.recorder?.close();
    await recordTerminalSessionEnd(this.options.db, sessionId, {
      code,
      reason,
      inputBytes: this.inputBytes,
      outputBytes: this.outputBytes,
    }).catch(() => undefined);
    this.options.log?.("terminal session ended", {
      session: this.sessionId,
      project: this.project,
      code,
      reason,
    });
  }
}

function toBuffer(data: RawData): Buffer {
  if (Buffer.isBuffer(data)) return data;
  if (Array.isArray(data)) return Buffer.concat(data);
  return Buffer.from(data);
}
