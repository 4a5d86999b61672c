// Text that came from a sandbox (a script's stderr, a worktree's path, an operation's message) is shown on
// the developer's terminal only with its control characters written out: an escape sequence the agent
// planted must not retitle the window, write the clipboard (OSC 52), move the cursor over earlier lines or
// reorder what is shown (bidirectional overrides).

/** C0 controls but newline and tab, DEL, C1 controls, and the bidirectional overrides and isolates. */
const UNPRINTABLE = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;

/** `text` with every character a terminal would act on written as `\xNN` or `\uNNNN`; newlines and tabs kept. */
export function printable(text: string): string {
  return text.replace(UNPRINTABLE, (c) => {
    const code = c.charCodeAt(0);
    return code <= 0xff
      ? `\\x${code.toString(16).padStart(2, "0")}`
      : `\\u${code.toString(16).padStart(4, "0")}`;
  });
}

/** {@link printable}, on one line: a name shown in a list. */
export function printableName(text: string): string {
  return printable(text).replace(/\n/g, "\\n").replace(/\t/g, "\\t");
}
