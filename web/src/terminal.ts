// The browser terminal, without React. xterm.js + fit + web-links, the socket's output written by
// AttachAddon and the keys sent by this view (raw frames both ways), and the proxy's one control message,
// {"type":"resize","cols":N,"rows":M}, sent when the socket opens and whenever a fit changes the size.
// On a phone: a key bar for the keys its keyboard lacks (keys.ts), a smaller font on a narrow screen, and
// a session that comes back by itself when the network does (the same tmux session: the proxy attaches
// to it again).
import { AttachAddon } from "@xterm/addon-attach";
import { FitAddon } from "@xterm/addon-fit";
import { WebLinksAddon } from "@xterm/addon-web-links";
import { Terminal } from "@xterm/xterm";
import "@xterm/xterm/css/xterm.css";
import { h, replaceChildren } from "./dom.js";
import { BAR_KEYS, BAR_KEY_LABELS, barKeyBytes, withCtrl, type BarKey } from "./keys.js";

/** Close codes of a session lost on the way (not ended by the proxy or the sandbox): tried again. */
const LOST = new Set([1001, 1006, 1011]);
/** Waits before each try after a loss, then the last one again and again. */
const RETRY_MS = [1000, 2000, 4000, 8000, 15_000];
/** A page hidden this long (a phone asleep) may hold a socket that is dead without knowing it: reconnect. */
const ASLEEP_MS = 30_000;
/** Below this width the terminal's font is smaller, so a phone held upright still gets ~45 columns. */
const NARROW_PX = 600;

/** Why the terminal proxy (or the browser) closed a session, in words (close codes: docs/terminals.md). */
export function describeClose(code: number): string {
  switch (code) {
    case 1000:
      return "session ended";
    case 1001:
      return "the server is going away";
    case 1006:
      return "connection lost";
    case 1009:
      return "a frame was too large";
    case 1011:
      return "the terminal proxy failed";
    case 4401:
      return "not authorised (the ticket expired, was already used, or the project is not yours)";
    case 4408:
      return "the browser read the output too slowly";
    case 4409:
      return "the sandbox is not running";
    case 4410:
      return "the sandbox was stopped or deleted";
    case 4429:
      return "too much input too fast (rate limit)";
    default:
      return "closed";
  }
}

/** "; trying again in 4 s" for a status line, or nothing. */
function retrying(at: number | undefined): string {
  return at === undefined ? "" : `; trying again in ${Math.max(1, Math.round((at - Date.now()) / 1000))} s`;
}

export interface TerminalViewOptions {
  /**
   * A fresh `terminal_url`, fetched right before each connection: its ticket is single-use and lives
   * for under a minute. null when the project has no terminal (not running).
   */
  readonly terminalUrl: () => Promise<string | null>;
}

type State =
  | { kind: "idle"; note: string }
  | { kind: "connecting" }
  | { kind: "open" }
  | { kind: "closed"; code: number; reason: string; retryAt?: number }
  | { kind: "offline" }
  | { kind: "failed"; message: string; retryAt?: number };

export class TerminalView {
  readonly element: HTMLElement;
  private readonly term: Terminal;
  private readonly fitAddon = new FitAddon();
  private readonly screen: HTMLElement;
  private readonly statusLine: HTMLElement;
  private readonly keyBar: HTMLElement;
  private readonly ctrlKey: HTMLElement;
  private readonly observer: ResizeObserver;
  private socket: WebSocket | null = null;
  private attach: AttachAddon | null = null;
  /** The size last told to the proxy on the current socket. */
  private sentSize = "";
  /** Bumped by every connect/dispose, so a slow ticket fetch cannot attach a stale socket. */
  private generation = 0;
  private state: State = { kind: "idle", note: "not connected" };
  private disposed = false;
  /** The key bar's Ctrl: applied to the next key, typed or tapped. */
  private ctrlArmed = false;
  /** Tries since the last open session, for the wait before the next. */
  private retries = 0;
  private retryTimer: ReturnType<typeof setTimeout> | undefined;
  private hiddenAt: number | undefined;
  private readonly onWindowResize = () => this.fit();
  private readonly onOnline = () => {
    if (!this.connected) void this.connect();
  };
  private readonly onOffline = () => {
    // A phone that lost its network keeps a socket that will never speak again: say so, and start over
    // when the network is back.
    if (this.state.kind === "idle") return;
    this.generation++;
    this.closeSocket();
    this.setState({ kind: "offline" });
  };
  private readonly onVisibility = () => {
    if (document.hidden) {
      this.hiddenAt = Date.now();
      return;
    }
    const asleep = this.hiddenAt !== undefined && Date.now() - this.hiddenAt >= ASLEEP_MS;
    this.hiddenAt = undefined;
    const waiting = this.retryTimer !== undefined;
    if ((asleep && this.state.kind === "open") || waiting) void this.connect();
  };

  constructor(private readonly options: TerminalViewOptions) {
    this.statusLine = h("div.terminal-status");
    this.screen = h("div.terminal-screen", { "data-testid": "terminal" });
    const keys = BAR_KEYS.map((key) =>
      h(
        "button.key",
        {
          type: "button",
          "data-key": key,
          "aria-label": BAR_KEY_LABELS[key],
          "aria-pressed": key === "Ctrl" ? "false" : undefined,
          // The terminal keeps the focus (and a phone its keyboard) while a key is tapped.
          onpointerdown: (event: Event) => event.preventDefault(),
          onmousedown: (event: Event) => event.preventDefault(),
          onclick: () => this.barKey(key),
        },
        key,
      ),
    );
    this.ctrlKey = keys[BAR_KEYS.indexOf("Ctrl")]!;
    this.keyBar = h(
      "div.key-bar",
      { role: "toolbar", "aria-label": "Terminal keys", "data-testid": "key-bar" },
      ...keys,
    );
    this.element = h("section.terminal-panel", {}, this.statusLine, this.screen, this.keyBar);
    this.term = new Terminal({
      theme: { background: "#1e1e1e", foreground: "#d4d4d4", cursor: "#aeafad" },
      fontSize: this.fontSize(),
      fontFamily: '"DejaVu Sans Mono", "Cascadia Mono", Menlo, Consolas, monospace',
      cursorBlink: true,
      scrollback: 5000,
    });
    this.term.loadAddon(this.fitAddon);
    this.term.loadAddon(new WebLinksAddon());
    this.term.onData((data) => this.send(data));
    // Binary input (some mouse reports) is bytes as characters: sent as a binary frame, as AttachAddon does.
    this.term.onBinary((data) => {
      const socket = this.socket;
      if (socket?.readyState !== WebSocket.OPEN) return;
      const bytes = new Uint8Array(data.length);
      for (let i = 0; i < data.length; i++) bytes[i] = data.charCodeAt(i) & 255;
      socket.send(bytes);
    });
    this.observer = new ResizeObserver(() => this.fit());
    this.renderState();
  }

  /** Call once the element is in the document (xterm measures its cell size on open). */
  mount(): void {
    this.term.open(this.screen);
    this.fit();
    this.observer.observe(this.screen);
    window.addEventListener("resize", this.onWindowResize);
    window.addEventListener("online", this.onOnline);
    window.addEventListener("offline", this.onOffline);
    document.addEventListener("visibilitychange", this.onVisibility);
  }

  get connected(): boolean {
    return this.state.kind === "open" || this.state.kind === "connecting";
  }

  /** (Re)connects with a fresh ticket; an open session is closed first. */
  async connect(): Promise<void> {
    if (this.disposed) return;
    const generation = ++this.generation;
    this.cancelRetry();
    this.closeSocket();
    if (!navigator.onLine) {
      this.setState({ kind: "offline" });
      return;
    }
    this.setState({ kind: "connecting" });
    let url: string | null;
    try {
      url = await this.options.terminalUrl();
    } catch (error) {
      if (generation === this.generation)
        this.setState({ kind: "failed", message: (error as Error).message, retryAt: this.retryLater() });
      return;
    }
    if (generation !== this.generation) return;
    if (!url) {
      this.setState({ kind: "idle", note: "the project has no terminal while it is not running" });
      return;
    }
    const socket = new WebSocket(url);
    this.socket = socket;
    socket.addEventListener("open", () => {
      if (this.socket !== socket) return;
      // The tmux session redraws its screen on attach; what an earlier session left would only confuse.
      this.term.reset();
      // Output only: the keys go through send(), where the key bar's Ctrl applies.
      this.attach = new AttachAddon(socket, { bidirectional: false });
      this.term.loadAddon(this.attach);
      this.sentSize = "";
      this.retries = 0;
      this.sendResize();
      this.setState({ kind: "open" });
      this.term.focus();
    });
    socket.addEventListener("close", (event) => {
      if (this.socket !== socket) return;
      this.attach?.dispose();
      this.attach = null;
      this.socket = null;
      // Lost on the way: tried again (while offline, when the network is back). Ended on purpose (the
      // sandbox stopped, a ticket refused): it stays closed, saying why, until the user reconnects.
      const retryAt = LOST.has(event.code) && navigator.onLine ? this.retryLater() : undefined;
      this.setState({ kind: "closed", code: event.code, reason: event.reason, retryAt });
    });
  }

  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    this.generation++;
    this.cancelRetry();
    this.closeSocket();
    this.observer.disconnect();
    window.removeEventListener("resize", this.onWindowResize);
    window.removeEventListener("online", this.onOnline);
    window.removeEventListener("offline", this.onOffline);
    document.removeEventListener("visibilitychange", this.onVisibility);
    this.term.dispose();
  }

  /** Shown when the project cannot have a terminal right now (stopped, creating...). */
  idle(note: string): void {
    // A closed session keeps showing why it closed (4410 when the project was stopped, say).
    if (this.state.kind !== "idle") return;
    this.setState({ kind: "idle", note });
  }

  /** Keys typed or tapped, to the pty; the armed Ctrl applies to the first. */
  private send(data: string): void {
    if (this.ctrlArmed) {
      data = withCtrl(data);
      this.armCtrl(false);
    }
    const socket = this.socket;
    if (socket?.readyState === WebSocket.OPEN) socket.send(data);
  }

  private barKey(key: BarKey): void {
    if (key === "Ctrl") this.armCtrl(!this.ctrlArmed);
    else this.send(barKeyBytes(key, this.term.modes.applicationCursorKeysMode));
  }

  private armCtrl(armed: boolean): void {
    this.ctrlArmed = armed;
    this.ctrlKey.setAttribute("aria-pressed", String(armed));
  }

  /** Schedules the next try after a loss; its time, for the status line. */
  private retryLater(): number {
    this.cancelRetry();
    const wait = RETRY_MS[Math.min(this.retries, RETRY_MS.length - 1)]!;
    this.retries++;
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined;
      void this.connect();
    }, wait);
    return Date.now() + wait;
  }

  private cancelRetry(): void {
    if (this.retryTimer !== undefined) clearTimeout(this.retryTimer);
    this.retryTimer = undefined;
  }

  private fontSize(): number {
    return window.innerWidth < NARROW_PX ? 12 : 14;
  }

  private closeSocket(): void {
    const socket = this.socket;
    this.socket = null;
    this.attach?.dispose();
    this.attach = null;
    if (socket && socket.readyState <= WebSocket.OPEN) socket.close(1000, "closed by the user");
  }

  private fit(): void {
    // A hidden or zero-sized element has no dimensions to fit to.
    if (!this.screen.isConnected || this.screen.clientWidth === 0 || this.screen.clientHeight === 0) return;
    const fontSize = this.fontSize();
    if (this.term.options.fontSize !== fontSize) this.term.options.fontSize = fontSize;
    this.fitAddon.fit();
    this.sendResize();
  }

  private sendResize(): void {
    const socket = this.socket;
    if (!socket || socket.readyState !== WebSocket.OPEN) return;
    const size = `${this.term.cols}x${this.term.rows}`;
    if (size === this.sentSize) return;
    this.sentSize = size;
    socket.send(JSON.stringify({ type: "resize", cols: this.term.cols, rows: this.term.rows }));
  }

  private setState(state: State): void {
    this.state = state;
    this.renderState();
  }

  private renderState(): void {
    const state = this.state;
    const reconnect = h(
      "button.small",
      { type: "button", onclick: () => void this.connect() },
      state.kind === "idle" ? "Connect" : "Reconnect",
    );
    this.statusLine.dataset.state = state.kind;
    switch (state.kind) {
      case "idle":
        replaceChildren(this.statusLine, h("span.dot"), h("span", {}, state.note), reconnect);
        break;
      case "connecting":
        replaceChildren(this.statusLine, h("span.dot"), h("span", {}, "connecting…"));
        break;
      case "open":
        replaceChildren(
          this.statusLine,
          h("span.dot"),
          h("span", {}, "connected to tmux session "),
          h("code", {}, "main"),
        );
        break;
      case "closed":
        replaceChildren(
          this.statusLine,
          h("span.dot"),
          h(
            "span",
            { "data-testid": "terminal-closed" },
            `disconnected: ${state.code} ${describeClose(state.code)}${state.reason ? ` — ${state.reason}` : ""}${retrying(state.retryAt)}`,
          ),
          reconnect,
        );
        break;
      case "offline":
        replaceChildren(
          this.statusLine,
          h("span.dot"),
          h("span", {}, "offline: the session reconnects when the network is back"),
          reconnect,
        );
        break;
      case "failed":
        replaceChildren(
          this.statusLine,
          h("span.dot"),
          h("span", {}, `cannot connect: ${state.message}${retrying(state.retryAt)}`),
          reconnect,
        );
        break;
      default: {
        const never: never = state;
        throw new Error(`unknown terminal state ${JSON.stringify(never)}`);
      }
    }
  }
}
