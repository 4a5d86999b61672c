import { describe, expect, it } from "vitest";
import { chooseRoute } from "../../cli/commands/open.js";
import { EXIT } from "../../cli/errors.js";

const entries = [
  { name: null, port: 3000, url: "http://0f3a9c2b7d41.sandbox.localhost:8080/" },
  { name: "docs", port: 4000, url: "http://0f3a9c2b7d41-docs.sandbox.localhost:8080/" },
];

describe("sbx open: which front-door route", () => {
  it("takes the first declared port, or the one asked for", () => {
    expect(chooseRoute(entries).port).toBe(3000);
    expect(chooseRoute(entries, "4000").name).toBe("docs");
  });

  it("takes a worktree's route by its name, and refuses a worktree without one naming what is declared", () => {
    expect(chooseRoute(entries, undefined, "docs").port).toBe(4000);
    expect(chooseRoute(entries, "4000", "docs").name).toBe("docs");
    expect(() => chooseRoute(entries, undefined, "feature")).toThrow(
      /worktree feature has no front-door route \(declared: 3000, 4000 \(docs\)\): sbx worktree add feature --port N declares one/,
    );
    expect(() => chooseRoute(entries, "3000", "docs")).toThrow(/port 3000 is not declared/);
  });

  it.each([
    [[], undefined, EXIT.badInput, /declares no front-door ports/],
    [
      entries,
      "3001",
      EXIT.badInput,
      /port 3001 is not declared for the front door \(declared: 3000, 4000 \(docs\)\)/,
    ],
    [entries, "abc", EXIT.usage, /"abc" is not a port number/],
  ] as const)("refuses %j %s with exit %i and a message", (list, port, code, message) => {
    let thrown: unknown;
    try {
      chooseRoute(list, port);
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toMatchObject({ code });
    expect((thrown as Error).message).toMatch(message);
  });
});
