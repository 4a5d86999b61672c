// One turn of the agent pane: the events it has said so far (kept, bounded, so that a client that lost its
// stream resumes where it stopped), whoever is reading them now, and the lines of the sandbox's side read
// into events (each checked: a hostile sandbox gets a notice, never an event it made up the shape of).
import { StringDecoder } from "node:string_decoder";
import { SandboxTurnEvent, type TurnEvent } from "./schemas.js";

/** A line from the sandbox longer than this is not read (its start is said in a notice). */
export const MAX_LINE_BYTES = 256 * 1024;
/** Events a turn keeps, in JSON bytes: past it, text, output and notices are dropped and one notice says so. */
export const MAX_KEPT_BYTES = 4 * 1024 * 1024;

/** An event before its number: what a turn is told. */
export type UnnumberedEvent = TurnEvent extends infer E
  ? E extends unknown
    ? Omit<E, "seq">
    : never
  : never;

/**
 * Splits the sandbox's stdout into lines and each line into an event: JSON of a known shape, else a notice
 * quoting its start. Holds at most {@link MAX_LINE_BYTES} of an unfinished line.
 */
export class SandboxLines {
  private readonly decoder = new StringDecoder("utf8");
  private pending = "";
  private skipping = false;

  constructor(private readonly onEvent: (event: SandboxTurnEvent) => void) {}

  push(chunk: Buffer): void {
    let text = this.pending + this.decoder.write(chunk);
    let at: number;
    while ((at = text.indexOf("\n")) >= 0) {
      const line = text.slice(0, at);
      text = text.slice(at + 1);
      if (this.skipping) this.skipping = false;
      else this.line(line);
    }
    if (!this.skipping && Buffer.byteLength(text) > MAX_LINE_BYTES) {
      this.onEvent({
        type: "notice",
        text: `a line of over ${MAX_LINE_BYTES} bytes from the sandbox was not read; it began: ${text.slice(0, 200)}`,
      });
      this.skipping = true;
    }
    this.pending = this.skipping ? "" : text;
  }

  end(): void {
    const rest = this.pending + this.decoder.end();
    this.pending = "";
    if (rest.trim() && !this.skipping) this.line(rest);
  }

  private line(line: string): void {
    if (!line.trim()) return;
    let parsed: unknown;
    try {
      parsed = JSON.parse(line);
    } catch {
      this.onEvent({ type: "notice", text: line.slice(0, 8192) });
      return;
    }
    const event = SandboxTurnEvent.safeParse(parsed);
    if (event.success) this.onEvent(event.data);
    else
      this.onEvent({
        type: "notice",
        text: `the sandbox said something that is not a turn's event (${event.error.issues[0]?.message ?? "invalid"}): ${line.slice(0, 200)}`,
      });
  }
}

/** A turn's events in order, kept for readers that come (back) later; each reader gets every event after its own. */
export class TurnLog {
  readonly events: TurnEvent[] = [];
  private keptBytes = 0;
  private dropping = false;
  private readonly readers = new Set<() => void>();
  ended = false;

  /** Numbers and keeps `event` (unless the turn is past its bound, see {@link MAX_KEPT_BYTES}), and wakes readers. */
  add(event: UnnumberedEvent): void {
    if (this.ended) return;
    const droppable = event.type === "text" || event.type === "output" || event.type === "notice";
    const size = JSON.stringify(event).length;
    if (this.keptBytes + size > MAX_KEPT_BYTES && event.type !== "end") {
      if (droppable || event.type === "command") {
        if (!this.dropping) {
          this.dropping = true;
          this.push({
            type: "notice",
            text: `this turn has said over ${MAX_KEPT_BYTES / 1024 / 1024} MiB: the rest of its text, output and commands is not kept (its end is)`,
          });
        }
        return;
      }
    }
    this.keptBytes += size;
    this.push(event);
    if (event.type === "end") this.ended = true;
  }

  private push(event: UnnumberedEvent): void {
    this.events.push({ ...event, seq: this.events.length } as TurnEvent);
    for (const wake of this.readers) wake();
  }

  /**
   * Every event after `after`, as they come, until the end (or until `closed` says the reader has gone).
   */
  async *read(after: number, closed: () => boolean): AsyncGenerator<TurnEvent> {
    let next = Math.max(0, after + 1);
    for (;;) {
      while (next < this.events.length) {
        const event = this.events[next++]!;
        yield event;
        if (event.type === "end") return;
      }
      if (this.ended || closed()) return;
      await new Promise<void>((resolve) => {
        const wake = () => {
          this.readers.delete(wake);
          resolve();
        };
        this.readers.add(wake);
        // A reader that has gone stops waiting within a second.
        setTimeout(wake, 1000).unref();
      });
    }
  }
}

/** What the store keeps of a turn: whose it is, and when it ended (undefined while it runs). */
export interface StoredTurn {
  readonly id: string;
  readonly projectId: string;
  readonly log: TurnLog;
  endedAt?: number;
}

/**
 * This runtime's turns, running and ended. An ended turn is kept `keepEndedMs` (an hour) for a client to read
 * back, at most `perProject` (10) of a project's and `total` (200) of all projects', the oldest ended going
 * first: what the runtime holds is bounded (a turn's events are, by {@link MAX_KEPT_BYTES}) however many
 * projects ask and never come back. A project has one running turn at most (the routes refuse a second).
 */
export class TurnStore<T extends StoredTurn> {
  private readonly turns = new Map<string, T>();

  constructor(
    private readonly limits: { keepEndedMs: number; perProject: number; total: number },
    private readonly now: () => number = Date.now,
  ) {}

  add(turn: T): void {
    this.forget();
    this.turns.set(turn.id, turn);
  }

  delete(id: string): void {
    this.turns.delete(id);
  }

  /** The project's running turn, if any. */
  running(projectId: string): T | undefined {
    return [...this.turns.values()].find((t) => t.projectId === projectId && t.endedAt === undefined);
  }

  /** The project's turn `id`; undefined when there is none (or it was another project's, or is forgotten). */
  get(projectId: string, id: string): T | undefined {
    this.forget();
    const turn = this.turns.get(id);
    return turn?.projectId === projectId ? turn : undefined;
  }

  /** The project's turns, newest first. */
  list(projectId: string): T[] {
    this.forget();
    return [...this.turns.values()].filter((t) => t.projectId === projectId).reverse();
  }

  get size(): number {
    return this.turns.size;
  }

  /** Forgets what is past the bounds above (ended turns only; in the order they were added, oldest first). */
  forget(): void {
    const now = this.now();
    const ended = [...this.turns.values()].filter((t) => t.endedAt !== undefined);
    const perProject = new Map<string, number>();
    for (const turn of ended) perProject.set(turn.projectId, (perProject.get(turn.projectId) ?? 0) + 1);
    let over = ended.length - this.limits.total;
    for (const turn of ended) {
      const ofProject = perProject.get(turn.projectId)!;
      if (now - turn.endedAt! > this.limits.keepEndedMs || ofProject > this.limits.perProject || over > 0) {
        this.turns.delete(turn.id);
        perProject.set(turn.projectId, ofProject - 1);
        over -= 1;
      }
    }
  }
}
