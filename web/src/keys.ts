// The terminal's touch key bar (a phone's keyboard has no Esc, Tab, Ctrl or arrows): what each key sends to
// the pty, and what the bar's sticky Ctrl does to the next key typed. No DOM here, so it is tested as it is.

/** The bar's keys, in the order shown. */
export const BAR_KEYS = ["Esc", "Tab", "Ctrl", "↑", "↓", "←", "→", "|", "~", "/", "-"] as const;
export type BarKey = (typeof BAR_KEYS)[number];

/** What a key is called to a screen reader, where its face is a symbol. */
export const BAR_KEY_LABELS: Readonly<Record<BarKey, string>> = {
  Esc: "Escape",
  Tab: "Tab",
  Ctrl: "Control (applies to the next key)",
  "↑": "Up arrow",
  "↓": "Down arrow",
  "←": "Left arrow",
  "→": "Right arrow",
  "|": "Pipe",
  "~": "Tilde",
  "/": "Slash",
  "-": "Dash",
};

const ARROWS: Readonly<Record<string, string>> = { "↑": "A", "↓": "B", "→": "C", "←": "D" };

/**
 * The bytes a key sends. Arrows follow the terminal's cursor-key mode, as a real keyboard's do: `ESC O A` when
 * the program asked for application cursor keys (vim, less, tmux's copy mode), `ESC [ A` otherwise. Ctrl sends
 * nothing itself: it arms the next key (`withCtrl`).
 */
export function barKeyBytes(key: Exclude<BarKey, "Ctrl">, applicationCursor: boolean): string {
  const arrow = ARROWS[key];
  if (arrow) return `\x1b${applicationCursor ? "O" : "["}${arrow}`;
  if (key === "Esc") return "\x1b";
  if (key === "Tab") return "\t";
  return key;
}

/**
 * `data` typed with Ctrl held, as a terminal sends it: a letter (either case) and `@ [ \ ] ^ _` become their
 * control codes (Ctrl-C is 0x03), space becomes NUL and `?` DEL; Ctrl with an arrow is xterm's modified arrow
 * (`ESC [ 1 ; 5 A`, a word left or right in readline). Anything else, and whatever follows the first key in a
 * chunk (a paste), goes as it is.
 */
export function withCtrl(data: string): string {
  const arrow = /^\x1b[[O]([ABCD])$/.exec(data);
  if (arrow) return `\x1b[1;5${arrow[1]}`;
  const first = data[0];
  if (first === undefined) return data;
  let control: string | undefined;
  if (/^[a-z]$/.test(first)) control = String.fromCharCode(first.charCodeAt(0) - 0x60);
  else if (/^[@A-Z[\\\]^_]$/.test(first)) control = String.fromCharCode(first.charCodeAt(0) - 0x40);
  else if (first === " ") control = "\x00";
  else if (first === "?") control = "\x7f";
  return control === undefined ? data : control + data.slice(1);
}
