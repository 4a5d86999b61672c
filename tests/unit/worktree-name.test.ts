// A worktree's branch and the names it maps onto (cli/worktree-name.ts): `/` as `__` for the directory and
// the tmux session, `_` as `-` for the front-door route, and what is refused before anything reaches a shell.
import { describe, expect, it } from "vitest";
import { CliError, EXIT } from "../../cli/errors.js";
import { WORKTREE_NAME } from "../../cli/repo.js";
import {
  checkBranchName,
  parseWorktreeName,
  worktreeDir,
  worktreeLabel,
  worktreeRoute,
} from "../../cli/worktree-name.js";
import { refusal } from "../helpers/refusal.js";

describe("a worktree's names", () => {
  it.each([
    ["feat/x", "feat__x", "feat--x"],
    ["feat__x", "feat__x", "feat--x"],
    ["wt-a", "wt-a", "wt-a"],
    ["a/b/c", "a__b__c", "a--b--c"],
    ["feat/-x", "feat__-x", "feat---x"],
    ["Feature_2", "Feature_2", undefined],
    ["fix/", undefined, undefined],
  ])("%s: directory and session %s, route %s", (branch, dir, route) => {
    if (dir === undefined) {
      expect(refusal(() => parseWorktreeName(branch)).code).toBe(EXIT.badInput);
      return;
    }
    expect(parseWorktreeName(branch)).toEqual({ branch, dir });
    expect(worktreeRoute(dir)).toBe(route);
  });

  it("maps a mapped name onto itself, so either names the worktree", () => {
    for (const branch of ["feat/x", "a/b_c/d", "release-2/hotfix"]) {
      const dir = worktreeDir(branch);
      expect(worktreeDir(dir)).toBe(dir);
      expect(parseWorktreeName(dir).dir).toBe(dir);
    }
  });

  it("maps onto a directory and session name the terminal proxy takes, with no '/'", () => {
    for (const branch of ["feat/x", "a/b", "x".repeat(30) + "/" + "y".repeat(30), "a_b/c-d"]) {
      const { dir } = parseWorktreeName(branch);
      expect(dir).toMatch(WORKTREE_NAME);
      expect(dir).not.toContain("/");
    }
  });

  it("gives names that differ only in '/', '__' or '_' and '-' the same label: two worktrees may not share it", () => {
    const labels = ["feat/x", "feat__x", "feat--x", "feat_-x", "feat-_x"].map((b) =>
      worktreeLabel(parseWorktreeName(b).dir),
    );
    expect(new Set(labels)).toEqual(new Set(["feat--x"]));
    expect(worktreeLabel("feat-x")).not.toBe(worktreeLabel("feat__x"));
  });

  it("has no route for a name that cannot be a DNS label: capitals, over 32 characters, a '-' at an end", () => {
    expect(worktreeRoute("Fix")).toBeUndefined();
    expect(worktreeRoute("a".repeat(33))).toBeUndefined();
    expect(worktreeRoute("a".repeat(32))).toBe("a".repeat(32));
    expect(worktreeRoute("fix_")).toBeUndefined();
    expect(worktreeRoute("x__y")).toBe("x--y");
  });

  it.each([
    "x;touch /tmp/pwned",
    "$(id)",
    "-rf",
    ".hidden",
    "a b",
    "feat//x",
    "/feat",
    "feat/",
    "feat/.x",
    "x.lock",
    "a..b",
    "a\\b",
    "a:b",
    "",
    "a".repeat(64),
    // 31 + 1 + 31 characters, but 64 once the '/' is '__'.
    `${"a".repeat(31)}/${"b".repeat(31)}`,
  ])("refuses %j, naming it", (name) => {
    const error = refusal(() => parseWorktreeName(name));
    expect(error.code).toBe(EXIT.badInput);
    expect(error.message).toContain(`invalid worktree name ${JSON.stringify(name)}`);
  });

  it("applies git's own rules besides: HEAD is not a branch", async () => {
    await expect(checkBranchName("feat/x")).resolves.toBeUndefined();
    const error = await checkBranchName("HEAD").then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(CliError);
    expect((error as CliError).code).toBe(EXIT.badInput);
    expect((error as CliError).message).toMatch(/invalid branch name "HEAD": git refuses it/);
  });
});
