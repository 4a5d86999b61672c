import WebSocket from "ws";
import { waitFor } from "../../lib/process.js";

/** A terminal client as the seed's web client behaves: raw frames both ways, JSON resize messages. */
export interface TerminalClient {
  readonly ws: WebSocket;
  /** Everything received so far, as text. */
  output(): string;
  /** Resolves once the output contains `text` (received after `since`, an offset into the output). */
  waitFor(text: string | RegExp, timeoutMs?: number, since?: number): Promise<void>;
  type(text: string): void;
  resize(cols: number, rows: number): void;
  readonly closed: Promise<{ code: number; reason: string }>;
  close(): void;
}

export function connectTerminal(url: string, options: { origin?: string } = {}): TerminalClient {
  const ws = new WebSocket(url, options.origin ? { origin: options.origin } : {});
  const chunks: Buffer[] = [];
  ws.on("message", (data: Buffer) => chunks.push(Buffer.from(data)));
  ws.on("error", () => undefined); // the close event carries what the tests look at
  const opened = new Promise<void>((resolve) => ws.once("open", () => resolve()));
  const closed = new Promise<{ code: number; reason: string }>((resolve) =>
    ws.once("close", (code: number, reason: Buffer) => resolve({ code, reason: reason.toString("utf8") })),
  );
  const send = (data: string) => void opened.then(() => ws.send(data));
  const output = () => Buffer.concat(chunks).toString("utf8");
  return {
    ws,
    output,
    async waitFor(text, timeoutMs = 20_000, since = 0) {
      try {
        await waitFor(`terminal output ${String(text)}`, timeoutMs, async () => {
          const seen = output().slice(since);
          return (typeof text === "string" ? seen.includes(text) : text.test(seen)) ? true : undefined;
        });
      } catch (error) {
        // What the terminal did show says why (no prompt yet, the line typed and lost, an error).
        throw new Error(
          `${(error as Error).message}; it showed: ${JSON.stringify(output().slice(since).slice(-600))}`,
        );
      }
    },
    type: (text) => send(text),
    resize: (cols, rows) => send(JSON.stringify({ type: "resize", cols, rows })),
    closed,
    close: () => ws.close(),
  };
}
