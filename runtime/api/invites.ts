import { createHmac, hkdfSync, randomBytes, timingSafeEqual } from "node:crypto";
import { HttpError } from "../errors.js";
import type { Queryable } from "../store/db.js";
import { inviteRedeemed, recordInviteRedemption } from "../store/invites.js";

/** `<id>.<expires, unix seconds>.<HMAC-SHA256>`: 22 + up to 12 + 43 characters, URL- and shell-safe. */
export const INVITE_CODE = /^[A-Za-z0-9_-]{22}\.[0-9]{1,12}\.[A-Za-z0-9_-]{43}$/;

/** An invite's lifetime when the operator does not choose one. */
export const DEFAULT_INVITE_DAYS = 7;

export interface InviteClaims {
  readonly id: string;
  /** Unix seconds. */
  readonly expires: number;
}

/**
 * Invite codes for `agent-sandbox:runtime.registration: invite`. A code is signed with a key derived from
 * the runtime's token secret (for this purpose only), so an operator mints one with `npm run invite`
 * while the runtime runs, without a database write (PGlite admits one process); redeeming it records
 * its id in the transaction that creates the account, so each code makes one account.
 */
export class InviteCodes {
  private readonly key: Buffer;

  constructor(
    secret: Uint8Array,
    private readonly now: () => number = () => Date.now(),
  ) {
    this.key = Buffer.from(hkdfSync("sha256", secret, "", "agent-sandbox invites v1", 32));
  }

  mint(validDays = DEFAULT_INVITE_DAYS): string {
    if (!(validDays > 0 && validDays <= 365)) throw new Error("an invite is valid for 1 to 365 days");
    const id = randomBytes(16).toString("base64url");
    const expires = Math.floor(this.now() / 1000 + validDays * 86_400);
    return `${id}.${expires}.${this.sign(`${id}.${expires}`)}`;
  }

  /** The code's claims; 403 `invalid_invite` for a forged, mangled or expired code. */
  verify(code: string): InviteClaims {
    const match = /^([^.]+)\.([0-9]+)\.([^.]+)$/.exec(code);
    const given = Buffer.from(match?.[3] ?? "");
    const expected = match ? Buffer.from(this.sign(`${match[1]}.${match[2]}`)) : Buffer.alloc(0);
    if (!match || given.length !== expected.length || !timingSafeEqual(given, expected))
      throw new HttpError(403, "invalid_invite", "the invite code is not valid");
    const claims = { id: match[1]!, expires: Number(match[2]) };
    if (claims.expires * 1000 <= this.now())
      throw new HttpError(403, "invalid_invite", "the invite code has expired; ask for another");
    return claims;
  }

  private sign(body: string): string {
    return createHmac("sha256", this.key).update(body).digest("base64url");
  }
}

const USED = () => new HttpError(403, "invite_used", "the invite code was already used; ask for another");

/** Refuses a code that was redeemed already, before any work is spent on the account. */
export async function assertInviteUnused(db: Queryable, claims: InviteClaims): Promise<void> {
  if (await inviteRedeemed(db, claims.id)) throw USED();
}

/** Uses the code up for `userId`, inside the transaction that creates the account. */
export async function redeemInvite(tx: Queryable, claims: InviteClaims, userId: string): Promise<void> {
  if (!(await recordInviteRedemption(tx, claims.id, userId))) throw USED();
}
