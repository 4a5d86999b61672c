// `sbx attach`: the project's terminal in this TTY over `terminal_url` (docs/terminals.md). Input goes as
// binary frames (never mistaken for a control message), the size as `{"type":"resize",...}` at open and on
// SIGWINCH; the detach key closes the socket and leaves the tmux session running.
import WebSocket from "ws";

/** What each close code means (runtime/terminal/proxy.ts CLOSE). */
export const CLOSE_CODES: Record<number, string> = {
  1000: "the session ended",
  1001: "the terminal proxy is shutting down",
  1006: "the connection was lost",
  1009: "a frame was over 64 KiB",
  1011: "the terminal proxy failed",
  4401: "access refused: the ticket expired or was used, or your access was revoked",
  4408: "this client stopped reading its output",
  4409: "the sandbox is not running (sbx start)",
  4410: "the sandbox stopped or the project was deleted",
  4413: "the session reached its recording cap",
  4429: "too many sessions or too much input",
};

export interface AttachResult {
  readonly code: number;
  readonly reason: string;
  readonly detached: boolean;
}

export function explainClose(code: number, reason: string): string {
  const meaning = CLOSE_CODES[code] ?? "closed";
  return `${code} ${meaning}${reason && reason !== meaning ? ` (${reason})` : ""}`;
}

export function attachTerminal(url: string, detachKey: number): Promise<AttachResult> {
  const input = process.stdin;
  const output = process.stdout;
  const ws = new WebSocket(url);
  let detached = false;
  const size = () => ({ cols: output.columns || 80, rows: output.rows || 24 });
  const sendSize = () => {
    if (ws.readyState === ws.OPEN) ws.send(JSON.stringify({ type: "resize", ...size() }));
  };
  const onInput = (chunk: Buffer) => {
    const at = chunk.indexOf(detachKey);
    if (at >= 0) {
      if (at > 0 && ws.readyState === ws.OPEN) ws.send(chunk.subarray(0, at), { binary: true });
      detached = true;
      ws.close(1000, "client detached");
      return;
    }
    if (ws.readyState === ws.OPEN) ws.send(chunk, { binary: true });
  };
  const raw = input.isTTY === true;
  return new Promise((resolve) => {
    let reason = "";
    ws.on("open", () => {
      if (raw) input.setRawMode(true);
      input.on("data", onInput);
      input.resume();
      sendSize();
      process.on("SIGWINCH", sendSize);
    });
    ws.on("message", (data: Buffer) => output.write(data));
    ws.on("error", (error) => (reason = error.message));
    ws.on("close", (code: number, why: Buffer) => {
      process.off("SIGWINCH", sendSize);
      input.off("data", onInput);
      if (raw) input.setRawMode(false);
      input.pause();
      resolve({ code, reason: why.toString("utf8") || reason, detached });
    });
  });
}
