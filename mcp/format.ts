// What the MCP tools answer, as text a model reads: a command's output within a bound that says what it
// left out, a directory's entries one per line, and a failure as the API worded it.
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import type { ExecResult, FileList, ProjectView } from "../sdk/src/index.js";

/** Characters of each output stream a run_command answer shows (the head and the tail of longer output). */
export const OUTPUT_CHARS = 20_000;

/** A successful tool answer: `text` for the model, `structured` for programs. */
export const answer = (text: string, structured?: Record<string, unknown>): CallToolResult => ({
  content: [{ type: "text", text }],
  ...(structured ? { structuredContent: structured } : {}),
});

/** A tool answer that failed: the message (the API's, with the request it answered and its details). */
export function failure(error: unknown): CallToolResult {
  const { message, status, details, request } = error as {
    message?: string;
    status?: number;
    details?: unknown;
    request?: { method: string; path: string };
  };
  const said = message ?? String(error);
  // An ApiError names neither the request nor the status in its message; the CLI's errors already do.
  const head = request && status ? `${request.method} ${request.path}: ${status} ${said}` : said;
  const text = details === undefined ? head : `${head}\n${JSON.stringify(details, null, 2)}`;
  return { isError: true, content: [{ type: "text", text }] };
}

/** `text` within `max` characters: its head and its tail, with a line saying how much was left out between. */
export function bounded(text: string, max = OUTPUT_CHARS): { text: string; omitted: number } {
  if (text.length <= max) return { text, omitted: 0 };
  const head = Math.ceil(max / 2);
  const omitted = text.length - max;
  return {
    text: `${text.slice(0, head)}\n[... ${omitted} characters left out here ...]\n${text.slice(text.length - (max - head))}`,
    omitted,
  };
}

/** A run_command answer: the exit, then each stream within the bound, every cut said. */
export function execText(result: ExecResult, timeoutS: number): string {
  const lines = [
    result.timed_out
      ? `killed after the ${timeoutS} s timeout (exit code ${result.exit_code})`
      : `exit code ${result.exit_code} after ${(result.duration_ms / 1000).toFixed(1)} s`,
  ];
  for (const stream of ["stdout", "stderr"] as const) {
    const written = result[`${stream}_bytes`];
    if (written === 0) continue;
    const shown = bounded(result[stream]);
    const notes = [
      ...(result.truncated && written > result.output_cap_bytes
        ? [`${written} bytes written, the runtime kept the first ${result.output_cap_bytes}`]
        : []),
      ...(shown.omitted > 0
        ? [`${shown.omitted} characters left out in the middle (${OUTPUT_CHARS} shown at most)`]
        : []),
    ];
    lines.push(`--- ${stream}${notes.length > 0 ? ` (${notes.join("; ")})` : ""} ---`, shown.text);
  }
  return lines.join("\n");
}

/** One sandbox as a line: its id, status and name. */
export const sandboxLine = (project: ProjectView) =>
  `${project.project_id}  ${project.status.padEnd(10)} ${project.name}`;

/** A directory's entries, one per line (`type size mode modified name`), and where a longer listing goes on. */
export function listingText(listing: FileList): string {
  const { entries } = listing;
  const lines = entries.map(
    (e) =>
      `${e.type.padEnd(9)} ${String(e.size).padStart(10)} ${e.mode} ${e.modified_at} ${e.name}${
        e.link_target === null ? "" : ` -> ${e.link_target}`
      }`,
  );
  if (entries.length === 0) lines.push("(empty)");
  if (listing.next_cursor) lines.push(`(more entries: call again with cursor "${listing.next_cursor}")`);
  return lines.join("\n");
}
