// The web console's touch key bar (web/src/keys.ts): the bytes each key sends, as a terminal's keyboard
// sends them, and the sticky Ctrl applied to the next key.
import { describe, expect, it } from "vitest";
import { BAR_KEYS, BAR_KEY_LABELS, barKeyBytes, withCtrl } from "../../web/src/keys.js";

describe("the terminal's key bar", () => {
  it("has the keys a phone's keyboard lacks, each with a name a screen reader can say", () => {
    for (const key of ["Esc", "Tab", "Ctrl", "↑", "↓", "←", "→", "|", "~"] as const)
      expect(BAR_KEYS).toContain(key);
    for (const key of BAR_KEYS) expect(BAR_KEY_LABELS[key].length, key).toBeGreaterThan(2);
    expect(new Set(Object.values(BAR_KEY_LABELS)).size).toBe(BAR_KEYS.length);
  });

  it("sends Esc, Tab and the symbols as themselves", () => {
    expect(barKeyBytes("Esc", false)).toBe("\x1b");
    expect(barKeyBytes("Tab", false)).toBe("\t");
    expect(barKeyBytes("|", false)).toBe("|");
    expect(barKeyBytes("~", true)).toBe("~");
  });

  it("sends the arrows in the terminal's cursor-key mode", () => {
    expect(["↑", "↓", "→", "←"].map((k) => barKeyBytes(k as "↑", false))).toEqual([
      "\x1b[A",
      "\x1b[B",
      "\x1b[C",
      "\x1b[D",
    ]);
    // vim, less and tmux's copy mode ask for application cursor keys (DECCKM): ESC O.
    expect(barKeyBytes("↑", true)).toBe("\x1bOA");
    expect(barKeyBytes("←", true)).toBe("\x1bOD");
  });

  it("applies Ctrl as a keyboard does: letters in either case, the symbols of 0x40-0x5f, space and ?", () => {
    expect(withCtrl("c")).toBe("\x03");
    expect(withCtrl("C")).toBe("\x03");
    expect(withCtrl("a")).toBe("\x01");
    expect(withCtrl("z")).toBe("\x1a");
    expect(withCtrl("d")).toBe("\x04");
    expect(withCtrl("[")).toBe("\x1b");
    expect(withCtrl("\\")).toBe("\x1c");
    expect(withCtrl("]")).toBe("\x1d");
    expect(withCtrl("^")).toBe("\x1e");
    expect(withCtrl("_")).toBe("\x1f");
    expect(withCtrl("@")).toBe("\x00");
    expect(withCtrl(" ")).toBe("\x00");
    expect(withCtrl("?")).toBe("\x7f");
  });

  it("applies Ctrl to the first key of a chunk only, and leaves keys it has no meaning for as they are", () => {
    // A phone's keyboard may hand over a word at once (autocomplete): Ctrl takes its first letter.
    expect(withCtrl("cat")).toBe("\x03at");
    for (const other of ["1", "é", "ß", "`", "{", "\t", "\r", ""]) expect(withCtrl(other), other).toBe(other);
  });

  it("makes Ctrl with an arrow xterm's modified arrow, in either cursor-key mode", () => {
    expect(withCtrl(barKeyBytes("←", false))).toBe("\x1b[1;5D");
    expect(withCtrl(barKeyBytes("→", true))).toBe("\x1b[1;5C");
    expect(withCtrl("\x1b")).toBe("\x1b");
  });
});
