import { describe, expect, it } from "vitest";
import { INVITE_CODE, InviteCodes } from "../../runtime/api/invites.js";
import { HttpError } from "../../runtime/errors.js";

const secret = new TextEncoder().encode("a-test-signing-key-that-is-at-least-32-bytes");
const DAY = 86_400_000;

const refusal = (fn: () => unknown): HttpError => {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(HttpError);
    return error as HttpError;
  }
  throw new Error("expected the code to be refused");
};

describe("invite codes", () => {
  it("a minted code has the documented shape and verifies until it expires, with a fresh id each time", () => {
    let now = Date.UTC(2026, 10, 22);
    const codes = new InviteCodes(secret, () => now);
    const code = codes.mint(2);
    expect(code).toMatch(INVITE_CODE);
    expect(codes.verify(code)).toEqual({ id: code.split(".")[0], expires: now / 1000 + 2 * 86_400 });
    expect(codes.mint(2).split(".")[0]).not.toBe(code.split(".")[0]);
    now += 2 * DAY - 1000;
    expect(() => codes.verify(code)).not.toThrow();
    now += 1000;
    expect(refusal(() => codes.verify(code))).toMatchObject({ status: 403, code: "invalid_invite" });
  });

  it.each([
    [
      "a changed expiry",
      (code: string) => code.replace(/\.(\d+)\./, (_, t: string) => `.${Number(t) + 86_400}.`),
    ],
    ["a changed id", (code: string) => `${code[0] === "A" ? "B" : "A"}${code.slice(1)}`],
    ["a changed signature", (code: string) => `${code.slice(0, -1)}${code.endsWith("A") ? "B" : "A"}`],
    ["a truncated code", (code: string) => code.slice(0, 40)],
    ["another key's code", () => new InviteCodes(new TextEncoder().encode("x".repeat(32))).mint(1)],
    ["not a code at all", () => "hello"],
  ])("refuses %s (403 invalid_invite)", (_what, tamper) => {
    const codes = new InviteCodes(secret);
    expect(refusal(() => codes.verify(tamper(codes.mint(1))))).toMatchObject({
      status: 403,
      code: "invalid_invite",
      message: "the invite code is not valid",
    });
  });

  it("is valid for 1 to 365 days", () => {
    const codes = new InviteCodes(secret);
    for (const days of [0, -1, 366, Number.NaN]) expect(() => codes.mint(days)).toThrow(/1 to 365 days/);
  });
});
