import { createHmac, hkdfSync, randomBytes, timingSafeEqual } from "node:crypto";
import type { Queryable } from "../store/db.js";
import { recordTicketUse, sweepExpiredTickets } from "../store/terminal.js";

/** How long a terminal ticket can be redeemed (ARCHITECTURE decision 6: ≤ 60 s). */
export const TICKET_TTL_SECONDS = 60;

export interface TicketClaims {
  /** The user the ticket was issued to. */
  readonly user: string;
  readonly project: string;
  /** The Origin of the request that asked for it; the socket must come from the same one. */
  readonly origin?: string;
  /** Unix seconds. */
  readonly expires: number;
  /** Unique per ticket: redeeming records it, so a ticket works once. */
  readonly id: string;
}

/** Why a ticket was refused (the socket closes with 4401 and this as the reason). */
export class TicketError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "TicketError";
  }
}

/**
 * Short-lived, single-use terminal tickets, bound to user, project and Origin (when one was sent).
 * A ticket is `<claims>.<HMAC-SHA256>` in base64url: issuing one costs no database write (every project
 * view carries one), and redeeming one records its id so it cannot be replayed.
 */
export class TicketIssuer {
  private readonly key: Buffer;

  /** `secret`: the runtime's token secret; the ticket key is derived from it for this purpose only. */
  constructor(
    secret: Uint8Array,
    private readonly ttlSeconds = TICKET_TTL_SECONDS,
    private readonly now: () => number = () => Date.now(),
  ) {
    this.key = Buffer.from(hkdfSync("sha256", secret, "", "agent-sandbox terminal tickets v1", 32));
  }

  issue(user: string, project: string, origin?: string): string {
    const claims: TicketClaims = {
      user,
      project,
      ...(origin ? { origin } : {}),
      expires: Math.floor(this.now() / 1000) + this.ttlSeconds,
      id: randomBytes(16).toString("base64url"),
    };
    const body = Buffer.from(JSON.stringify(claims)).toString("base64url");
    return `${body}.${this.sign(body)}`;
  }

  /** Checks signature, expiry, project and Origin; throws {@link TicketError} naming what is wrong. */
  verify(ticket: string, project: string, origin: string | undefined): TicketClaims {
    const [body, signature, ...rest] = ticket.split(".");
    if (!body || !signature || rest.length > 0) throw new TicketError("malformed ticket");
    const expected = Buffer.from(this.sign(body));
    const given = Buffer.from(signature);
    if (given.length !== expected.length || !timingSafeEqual(given, expected))
      throw new TicketError("invalid ticket");
    const claims = JSON.parse(Buffer.from(body, "base64url").toString("utf8")) as TicketClaims;
    if (claims.expires * 1000 <= this.now()) throw new TicketError("ticket expired");
    if (claims.project !== project) throw new TicketError("ticket is for another project");
    if (claims.origin && claims.origin !== origin) throw new TicketError("ticket is bound to another origin");
    return claims;
  }

  private sign(body: string): string {
    return createHmac("sha256", this.key).update(body).digest("base64url");
  }
}

/** Uses a ticket up; false when it was used before. Expired records are swept as it goes. */
export async function redeemTicket(db: Queryable, claims: TicketClaims): Promise<boolean> {
  await sweepExpiredTickets(db);
  return recordTicketUse(db, claims.id, claims.expires);
}
