// QEMU's machine protocol (QMP) on a VM's unix socket: one command per connection, its answer returned.
import * as net from "node:net";

/**
 * Runs `command` (with `args`) on the QMP socket and returns what it answered (`return`); an `error` answer,
 * a closed socket or no answer within `timeoutMs` throws naming the command.
 */
export async function qmpExecute(
  socket: string,
  command: string,
  args?: Record<string, unknown>,
  timeoutMs = 5_000,
): Promise<unknown> {
  return await new Promise<unknown>((resolve, reject) => {
    const conn = net.createConnection(socket);
    let buffer = "";
    let step: "greeting" | "capabilities" | "command" = "greeting";
    conn.setTimeout(timeoutMs, () => conn.destroy(new Error(`QMP ${command} timed out`)));
    conn.on("error", reject);
    conn.on("close", () => reject(new Error(`QMP ${command}: the socket closed before an answer`)));
    conn.on("data", (chunk) => {
      buffer += chunk.toString();
      const lines = buffer.split("\n");
      buffer = lines.pop()!;
      for (const line of lines) {
        if (!line.trim()) continue;
        const message = JSON.parse(line) as { QMP?: unknown; return?: unknown; error?: { desc?: string } };
        if (message.error) {
          conn.destroy();
          reject(new Error(`QMP ${command}: ${message.error.desc ?? line}`));
        } else if (step === "greeting" && message.QMP) {
          conn.write('{"execute":"qmp_capabilities"}\n');
          step = "capabilities";
        } else if (step === "capabilities" && "return" in message) {
          conn.write(`${JSON.stringify({ execute: command, ...(args ? { arguments: args } : {}) })}\n`);
          step = "command";
        } else if (step === "command" && "return" in message) {
          conn.end();
          resolve(message.return);
        }
        // Anything else (an event) is not an answer.
      }
    });
  });
}
