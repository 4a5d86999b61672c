// shellWord (runtime/sandbox/ssh.ts) quotes each argument of a command line that a microVM guest's login
// shell runs (issue 19: exec, files and the final backup over SSH): every string must come back as itself.
import { execFileSync } from "node:child_process";
import { describe, expect, it } from "vitest";
import { shellWord } from "../../runtime/sandbox/ssh.js";

const WORDS = [
  "plain",
  "/usr/local/sbin/sandbox-backup",
  "KEY=value",
  "it's",
  "'",
  "''",
  "two words",
  "$HOME",
  "`id`",
  "$(id)",
  "a\nb",
  "tab\there",
  "*",
  "~",
  "!bang",
  "back\\slash",
  '"double"',
  "-n",
  "",
  ";id",
  "ünïcödé",
];

describe("shellWord", () => {
  it("every word comes back as itself through sh, one argument each", () => {
    const line = `printf '%s\\0' ${WORDS.map(shellWord).join(" ")}`;
    const out = execFileSync("sh", ["-c", line], { encoding: "utf8" });
    expect(out.split("\0").slice(0, -1)).toEqual(WORDS);
  });

  it("leaves words that need no quoting bare, and quotes the rest", () => {
    expect(shellWord("once")).toBe("once");
    expect(shellWord("--deadline")).toBe("--deadline");
    expect(shellWord("5;id")).toBe("'5;id'");
    expect(shellWord("")).toBe("''");
  });
});
