// What `sbx` takes from a sandbox or the API and hands on to the developer's machine: text for the terminal
// (with its escape sequences written out), a URL for the browser (http(s) only), an SSH address for ssh's
// command line and an ~/.ssh/config block (plain host, user and port only).
import { describe, expect, it } from "vitest";
import { EXIT } from "../../cli/errors.js";
import { openableUrl } from "../../cli/commands/open.js";
import { printable, printableName } from "../../cli/printable.js";
import { checkSshAddress } from "../../cli/ssh.js";

describe("printable", () => {
  it.each([
    ["OSC 52 writes the clipboard", "\u001b]52;c;Y3VybCBldmlsfHNo\u0007", "\\x1b]52;c;Y3VybCBldmlsfHNo\\x07"],
    ["a window title", "\u001b]0;sbx: all good\u001b\\", "\\x1b]0;sbx: all good\\x1b\\"],
    ["the cursor moved up over earlier lines", "done\u001b[2A\u001b[2K", "done\\x1b[2A\\x1b[2K"],
    ["a carriage return that overwrites the line", "error\rok   ", "error\\x0dok   "],
    ["an 8-bit CSI", "\u009b31m", "\\x9b31m"],
    ["a bidirectional override", "evil\u202ecod.exe", "evil\\u202ecod.exe"],
    ["DEL and NUL", "a\u007fb\u0000", "a\\x7fb\\x00"],
  ])("writes out %s", (_what, text, shown) => {
    expect(printable(text)).toBe(shown);
    // Nothing a terminal acts on is left.
    expect(printable(text)).not.toMatch(/[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u202a-\u202e]/);
  });

  it("keeps newlines, tabs and every printable character, in any script", () => {
    const text = "line one\n\tline two: ü, 日本, emoji 🙂, quotes \"'`";
    expect(printable(text)).toBe(text);
    expect(printableName("a\nb\tc")).toBe("a\\nb\\tc");
  });
});

describe("openableUrl", () => {
  it("takes the front door's one-time URL", () => {
    const url = "http://0f3a9c2b7d41.sandbox.localhost:8080/_sbx/session?ticket=abc";
    expect(openableUrl(url)).toBe(url);
    expect(openableUrl("https://front.example.com/x")).toBe("https://front.example.com/x");
  });

  it.each([
    "file:///home/dev/.ssh/id_ed25519",
    "javascript:alert(1)",
    "vscode://vscode.git/clone?url=x",
    "ssh://host/x",
    "--help",
    "not a url",
    "http://user:password@example.com/",
    42,
    undefined,
  ])("refuses %j", (url) => {
    expect(() => openableUrl(url)).toThrow(/is not a plain http\(s\) URL, so it is not opened/);
    try {
      openableUrl(url);
    } catch (error) {
      expect(error).toMatchObject({ code: EXIT.refused });
    }
  });
});

describe("checkSshAddress", () => {
  it.each([
    [{ host: "127.0.0.1", port: 10022, user: "agent" }],
    [{ host: "sandbox-host.example.com", port: 22, user: "agent" }],
    [{ host: "::1", port: 2222, user: "agent" }],
  ])("takes %j", (address) => {
    expect(checkSshAddress(address)).toEqual(address);
  });

  it.each([
    [
      "a newline that adds a ProxyCommand",
      { host: "127.0.0.1\n  ProxyCommand sh -c 'touch /tmp/pwned'", port: 22, user: "agent" },
    ],
    ["a space in the host", { host: "a b", port: 22, user: "agent" }],
    ["an option for a host", { host: "-oProxyCommand=x", port: 22, user: "agent" }],
    ["a user with a newline", { host: "127.0.0.1", port: 22, user: "agent\nHost *" }],
    ["a user with an @", { host: "127.0.0.1", port: 22, user: "a@b" }],
    ["no port", { host: "127.0.0.1", port: null, user: "agent" }],
    ["a port out of range", { host: "127.0.0.1", port: 70000, user: "agent" }],
    ["a port as text", { host: "127.0.0.1", port: "22 -oX", user: "agent" }],
  ])("refuses %s", (_what, address) => {
    expect(() => checkSshAddress(address)).toThrow(
      /the project's SSH address is not a plain host, user and port/,
    );
  });
});
