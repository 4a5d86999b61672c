// The browser terminal, without React. xterm.js + fit + web-links, the
// socket attached with AttachAddon (raw frames both ways), and the proxy's one control message,
// {"type":"resize","cols":N,"rows":M}, sent when the socket opens and whenever a fit changes the size.
import { AttachAddon } from "@xterm/addon-attach";
import { FitAddon } from "@xterm/addon-fit";
import { WebLinksAddon } from "@xterm/addon-web-links";
import { Terminal } from "@xterm/xterm";
import "@xterm/xterm/css/xterm.css";
import { h, replaceChildren } from "./dom.js";

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
  | { kind: "closed"; code: number; reason: string }
  | { kind: "failed"; message: string };

export class TerminalView {
  readonly element: HTMLElement;
  private readonly term: Terminal;
  private readonly fitAddon = new FitAddon();
  private readonly screen: HTMLElement;
  private readonly statusLine: HTMLElement;
  private readonly observer: ResizeObserver;
  private socket: WebSocket | null = null;
  private attach: AttachAddon | null = null;
  /** The size last told to the proxy on the current socket. */
  private sentSize = "";
  /** Bumped by every connect/dispose, so a slow ticket fetch cannot attach a stale socket. */
  private generation = 0;
  private state: State = { kind: "idle", note: "not connected" };
  private disposed = false;
  private readonly onWindowResize = () => this.fit();

  constructor(private readonly options: TerminalViewOptions) {
    this.statusLine = h("div.terminal-status");
    this.screen = h("div.terminal-screen", { "data-testid": "terminal" });
    this.element = h("section.terminal-panel", {}, this.statusLine, this.screen);
    this.term = new Terminal({
      theme: { background: "#1e1e1e", foreground: "#d4d4d4", cursor: "#aeafad" },
      fontSize: 14,
      fontFamily: '"DejaVu Sans Mono", "Cascadia Mono", Menlo, Consolas, monospace',
      cursorBlink: true,
      scrollback: 5000,
    });
    this.term.loadAddon(this.fitAddon);
    this.term.loadAddon(new WebLinksAddon());
    this.observer = new ResizeObserver(() => this.fit());
    this.renderState();
  }

  /** Call once the element is in the document (xterm measures its cell size on open). */
  mount(): void {
    this.term.open(this.screen);
    this.fit();
    this.observer.observe(this.screen);
    window.addEventListener("resize", this.onWindowResize);
  }

  get connected(): boolean {
    return this.state.kind === "open" || this.state.kind === "connecting";
  }

  /** (Re)connects with a fresh ticket; an open session is closed first. */
  async connect(): Promise<void> {
    const generation = ++this.generation;
    this.closeSocket();
    this.setState({ kind: "connecting" });
    let url: string | null;
    try {
      url = await this.options.terminalUrl();
    } catch (error) {
      if (generation === this.generation)
        this.setState({ kind: "failed", message: (error as Error).message });
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
      // Attached on open (the seed attaches at once): a key typed before would throw in the addon.
      this.attach = new AttachAddon(socket);
      this.term.loadAddon(this.attach);
      this.sentSize = "";
      this.sendResize();
      this.setState({ kind: "open" });
      this.term.focus();
    });
    socket.addEventListener("close", (event) => {
      if (this.socket !== socket) return;
      this.attach?.dispose();
      this.attach = null;
      this.socket = null;
      this.setState({ kind: "closed", code: event.code, reason: event.reason });
    });
  }

  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    this.generation++;
    this.closeSocket();
    this.observer.disconnect();
    window.removeEventListener("resize", this.onWindowResize);
    this.term.dispose();
  }

  /** Shown when the project cannot have a terminal right now (stopped, creating...). */
  idle(note: string): void {
    // A closed session keeps showing why it closed (4410 when the project was stopped, say).
    if (this.state.kind !== "idle") return;
    this.setState({ kind: "idle", note });
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
            `disconnected: ${state.code} ${describeClose(state.code)}${state.reason ? ` — ${state.reason}` : ""}`,
          ),
          reconnect,
        );
        break;
      case "failed":
        replaceChildren(
          this.statusLine,
          h("span.dot"),
          h("span", {}, `cannot connect: ${state.message}`),
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
