// What `sbx` prints: the result on stdout (JSON with --json, else text), progress and notes on stderr
// (nothing with --json). Text that may come from the sandbox is shown without its control characters.
import { printable } from "./printable.js";

let jsonMode = false;

/** --json: results as JSON, no notes. Set once, from the command line, before any command runs. */
export function setJsonMode(on: boolean): void {
  jsonMode = on;
}
export function isJsonMode(): boolean {
  return jsonMode;
}

/** Progress and notes: stderr, and nothing at all with --json. */
export function note(line: string): void {
  if (!jsonMode) process.stderr.write(`${printable(line)}\n`);
}

/** The command's result: JSON with --json, else the text. */
export function emit(result: unknown, text: string | (() => string)): void {
  if (jsonMode) process.stdout.write(`${JSON.stringify(result, null, 2)}\n`);
  else {
    // Text in the result may come from the sandbox (a worktree's path, a branch): shown without its escapes.
    const shown = printable(typeof text === "function" ? text() : text);
    if (shown) process.stdout.write(shown.endsWith("\n") ? shown : `${shown}\n`);
  }
}
