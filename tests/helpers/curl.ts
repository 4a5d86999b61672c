// curl from the host, as a developer's browser reaches the front door (`*.sandbox.localhost` is loopback to
// curl): the status and the body, whatever the status.
import { execFile } from "node:child_process";
import { promisify } from "node:util";

const run = promisify(execFile);

/** `curl -sS -m 10 ...args url`: its status and body; a connection that fails throws (curl's own error). */
export async function curl(url: string, ...args: string[]): Promise<{ status: number; body: string }> {
  const { stdout } = await run("curl", ["-sS", "-m", "10", "-w", "\n%{http_code}", ...args, url]);
  const at = stdout.lastIndexOf("\n");
  return { status: Number(stdout.slice(at + 1)), body: stdout.slice(0, at) };
}
