// The agent beside the terminal (issue 46; docs/terminals.md#the-agent-pane): a prompt to the project's agent,
// its answer streamed in, each command it runs shown here and in the terminal's `agent` window. The model key
// never reaches the browser: the runtime runs the agent in the sandbox, and the credential gateway adds the key
// on the way to the model. A stream lost mid-answer resumes where it stopped (the turn goes on in the sandbox);
// the prompt being typed is kept in this tab's storage, so a session that expires (back to the login) loses
// nothing.
import { ApiError, AuthError, client } from "./api.js";
import { errorMessage } from "./actions.js";
import { h } from "./dom.js";

/** The API's bound on a prompt; the text box refuses a longer paste. */
export const MAX_PROMPT_CHARS = 32_768;
/** Waits before each try to resume a lost answer; then it is said to be cut. */
const RESUME_MS = [1000, 2000, 4000, 8000, 15_000, 30_000];

type TurnEvent =
  | { seq: number; type: "turn"; turn_id: string; agent: string; prompt: string }
  | { seq: number; type: "session"; session_id: string; model: string }
  | { seq: number; type: "text"; text: string }
  | { seq: number; type: "command"; tool: string; command: string }
  | { seq: number; type: "output"; text: string; is_error: boolean }
  | { seq: number; type: "result"; text: string; is_error: boolean; duration_ms: number }
  | { seq: number; type: "notice"; text: string }
  | {
      seq: number;
      type: "end";
      exit_code: number | null;
      timed_out: boolean;
      killed_by: string | null;
      duration_ms: number;
    };

/** The NDJSON lines of a streamed answer, as they come. */
async function* lines(response: Response): AsyncGenerator<TurnEvent> {
  const reader = response.body!.getReader();
  const decoder = new TextDecoder();
  let pending = "";
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    pending += decoder.decode(value, { stream: true });
    let at: number;
    while ((at = pending.indexOf("\n")) >= 0) {
      const line = pending.slice(0, at);
      pending = pending.slice(at + 1);
      if (line.trim()) yield JSON.parse(line) as TurnEvent;
    }
  }
}

const draftKey = (projectId: string) => `agent-sandbox.prompt.${projectId}`;

export class AgentPane {
  readonly element: HTMLElement;
  private readonly log: HTMLElement;
  private readonly prompt: HTMLTextAreaElement;
  private readonly send: HTMLButtonElement;
  private readonly stop: HTMLButtonElement;
  private readonly status: HTMLElement;
  private readonly counter: HTMLElement;
  /** The turn shown now, and the last event of it read. */
  private turn: { id: string; seq: number; answer?: HTMLElement; ended: boolean } | undefined;
  private disposed = false;
  private reading = false;

  constructor(private readonly projectId: string) {
    this.log = h("div.agent-log", {
      role: "log",
      "aria-live": "polite",
      "aria-label": "The agent's answers",
      tabindex: 0,
    });
    this.prompt = h("textarea", {
      id: "agent-prompt",
      rows: 3,
      maxlength: MAX_PROMPT_CHARS,
      placeholder: "Ask the agent to do something in this project",
      oninput: () => this.keepDraft(),
      onkeydown: (event: Event) => {
        const key = event as KeyboardEvent;
        if (key.key === "Enter" && (key.ctrlKey || key.metaKey)) {
          key.preventDefault();
          void this.ask();
        }
      },
    });
    this.prompt.value = sessionStorage.getItem(draftKey(projectId)) ?? "";
    this.counter = h("span.muted.agent-counter", { "aria-live": "polite" });
    this.send = h("button.primary", { type: "submit" }, "Send");
    this.stop = h(
      "button.small",
      { type: "button", hidden: true, onclick: () => void this.stopTurn() },
      // Not "Stop": the project's own Stop (the sandbox's) is on the same page.
      "Stop the agent",
    );
    this.status = h("p.agent-status", { role: "status" });
    this.element = h(
      "section.agent-panel",
      { "aria-label": "Agent", id: "agent-panel" },
      h("div.agent-head", {}, h("h2", {}, "Agent"), this.stop),
      this.log,
      this.status,
      h(
        "form.agent-form",
        {
          onsubmit: (event: Event) => {
            event.preventDefault();
            void this.ask();
          },
        },
        h("label", { for: "agent-prompt" }, "Prompt to the agent"),
        this.prompt,
        h("div.agent-actions", {}, this.counter, this.send),
      ),
    );
    this.keepDraft();
  }

  /** Finds a turn still running (a reload, another tab) and follows it. */
  async mount(): Promise<void> {
    try {
      const { data } = await client.call("GET", "/projects/{id}/agent/turns", {
        params: { id: this.projectId },
      });
      const running = data.turns.find((t) => t.running);
      if (running && !this.turn) {
        this.turn = { id: running.turn_id, seq: -1, ended: false };
        await this.follow(-1);
      }
    } catch {
      // Nothing to follow: the pane waits for a prompt.
    }
  }

  dispose(): void {
    this.disposed = true;
  }

  private keepDraft(): void {
    const text = this.prompt.value;
    if (text) sessionStorage.setItem(draftKey(this.projectId), text);
    else sessionStorage.removeItem(draftKey(this.projectId));
    this.counter.textContent =
      text.length > MAX_PROMPT_CHARS * 0.9 ? `${text.length} / ${MAX_PROMPT_CHARS} characters` : "";
  }

  private say(message: string, kind: "info" | "error" = "info"): void {
    this.status.textContent = message;
    this.status.dataset.kind = kind;
  }

  private busy(running: boolean): void {
    this.send.disabled = running;
    this.stop.hidden = !running;
  }

  private async ask(): Promise<void> {
    const prompt = this.prompt.value;
    if (!prompt.trim()) {
      this.say("Type a prompt first.", "error");
      this.prompt.focus();
      return;
    }
    if (this.reading) return;
    this.busy(true);
    this.say("Sending…");
    let response: Response;
    try {
      ({ response } = await client.call("POST", "/projects/{id}/agent/turns", {
        params: { id: this.projectId },
        body: { prompt },
      }));
    } catch (error) {
      this.busy(false);
      // An expired session goes to the login (api.ts); the prompt stays in this tab's storage for afterwards.
      if (error instanceof AuthError) return;
      const message =
        error instanceof ApiError && error.code === "sandbox_not_running"
          ? `${error.message}. Start the project to ask its agent.`
          : errorMessage(error);
      this.say(message, "error");
      return;
    }
    this.prompt.value = "";
    this.keepDraft();
    this.turn = undefined;
    await this.read(response);
  }

  /** Reads a turn's answer; a stream that stops before the turn's end is resumed from its last event. */
  private async read(response: Response): Promise<void> {
    this.reading = true;
    this.busy(true);
    this.say("The agent is working…");
    try {
      for await (const event of lines(response)) this.show(event);
    } catch {
      // The connection went in the middle: resumed below.
    }
    this.reading = false;
    if (this.turn && !this.turn.ended && !this.disposed) await this.resume();
    else this.busy(false);
  }

  private async follow(after: number): Promise<void> {
    const { response } = await client.call("GET", "/projects/{id}/agent/turns/{turnId}/events", {
      params: { id: this.projectId, turnId: this.turn!.id },
      query: { after },
    });
    await this.read(response);
  }

  private async resume(): Promise<void> {
    for (const wait of RESUME_MS) {
      this.say(`The connection was lost mid-answer; resuming in ${wait / 1000} s…`, "error");
      await new Promise((resolve) => setTimeout(resolve, wait));
      if (this.disposed || !this.turn) return;
      try {
        await this.follow(this.turn.seq);
        return;
      } catch (error) {
        if (error instanceof ApiError && error.status === 404) break;
        if (error instanceof AuthError) return;
      }
    }
    this.busy(false);
    this.say("The answer was cut: the connection did not come back, or the turn is no longer kept.", "error");
  }

  private show(event: TurnEvent): void {
    if (event.type === "turn") {
      // A turn's first event: its prompt in the log (a resumed stream starts after it, and shows it no more).
      if (this.turn?.id !== event.turn_id) this.turn = { id: event.turn_id, seq: -1, ended: false };
      if (this.turn.seq < event.seq) {
        this.turn.seq = event.seq;
        this.log.append(h("div.agent-prompt", {}, h("span.agent-who", {}, "You"), event.prompt));
      }
      return;
    }
    const turn = this.turn;
    if (!turn || event.seq <= turn.seq) return; // an event already shown (a resumed stream starts after it)
    turn.seq = event.seq;
    switch (event.type) {
      case "text":
        if (!turn.answer) {
          turn.answer = h("div.agent-answer");
          this.log.append(turn.answer);
        }
        turn.answer.append(event.text);
        break;
      case "command":
        turn.answer = undefined;
        this.log.append(
          h(
            "div.agent-command",
            {},
            h("span.agent-tool", {}, event.tool === "Bash" ? "$" : event.tool),
            h("code", {}, event.command),
          ),
        );
        break;
      case "output": {
        const lines = event.text.replace(/\n$/, "").split("\n");
        const shown =
          lines.slice(0, 12).join("\n") + (lines.length > 12 ? `\n… ${lines.length - 12} more lines` : "");
        this.log.append(h(`pre.agent-output${event.is_error ? ".error" : ""}`, {}, shown));
        break;
      }
      case "notice":
        this.log.append(h("div.agent-notice.muted", {}, event.text));
        break;
      case "result":
        this.log.append(
          h(
            `div.agent-result${event.is_error ? ".error" : ""}`,
            {},
            `${event.is_error ? "Failed" : "Done"} in ${(event.duration_ms / 1000).toFixed(1)} s`,
          ),
        );
        break;
      case "end":
        turn.ended = true;
        this.busy(false);
        if (event.killed_by === "stopped") this.say("Stopped.");
        else if (event.timed_out) this.say("The turn ran past its time and was stopped.", "error");
        else if (event.exit_code !== 0)
          this.say(`The agent ended with exit code ${event.exit_code ?? "unknown"}.`, "error");
        else this.say("");
        break;
      case "session":
        break;
    }
    this.log.scrollTop = this.log.scrollHeight;
  }

  private async stopTurn(): Promise<void> {
    if (!this.turn) return;
    try {
      await client.call("DELETE", "/projects/{id}/agent/turns/{turnId}", {
        params: { id: this.projectId, turnId: this.turn.id },
      });
    } catch (error) {
      this.say(`Stop: ${errorMessage(error)}`, "error");
    }
  }
}
