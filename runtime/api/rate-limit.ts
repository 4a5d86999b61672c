import type { Queryable } from "../db.js";
import { HttpError } from "../errors.js";
import type { RateLimit } from "../../stacks/config.js";

/** Buckets untouched for this long past a full refill are deleted (an absent bucket is a full one). */
const SWEEP_EVERY_MS = 60_000;

/**
 * A token bucket per subject (a client address, a user) in the database: `burst` requests at once,
 * refilled at `perHour`. In the database rather than in memory for the reason the login throttle is:
 * several API processes may share one Postgres, and a restart must not hand out a fresh budget. It costs
 * one upsert per request it guards, which are the expensive ones (an argon2 hash; ssh-keygen and a
 * Pulumi update).
 */
export class RateLimiter {
  private readonly perSecond: number;
  private lastSweep = 0;

  /**
   * `name` scopes the buckets (`register`, `createProject`); `configKey` and `what` make the 429's
   * message: what was refused, and which setting allows it.
   */
  constructor(
    private readonly db: Queryable,
    private readonly name: string,
    private readonly rule: RateLimit,
    private readonly configKey: string,
    private readonly what: string,
  ) {
    this.perSecond = rule.perHour / 3600;
  }

  /** Spends one token of `subject`'s bucket, or throws a 429 whose `retry_after` says when one is back. */
  async take(subject: string): Promise<void> {
    await this.sweep();
    const key = `${this.name}:${subject}`;
    const available = `least($2::float8, b.tokens + extract(epoch from now() - b.updated_at)::float8 * $3::float8)`;
    const { rows } = await this.db.query(
      `insert into rate_limits as b (key, tokens, updated_at) values ($1, $2::float8 - 1, now())
       on conflict (key) do update set tokens = ${available} - 1, updated_at = now()
        where ${available} >= 1
       returning tokens`,
      [key, this.rule.burst, this.perSecond],
    );
    if (rows.length > 0) return;
    const { rows: bucket } = await this.db.query<{ available: number }>(
      `select ${available} as available from rate_limits b where key = $1`,
      [key, this.rule.burst, this.perSecond],
    );
    const missing = 1 - (bucket[0]?.available ?? 0);
    const retry = Math.max(1, Math.ceil(missing / this.perSecond));
    throw new HttpError(
      429,
      "rate_limited",
      `too many ${this.what}; try again in ${retry} s (${this.configKey} allows ${this.rule.burst} at once, then ${this.rule.perHour} an hour)`,
      { retry_after: retry },
    );
  }

  private async sweep(): Promise<void> {
    if (Date.now() - this.lastSweep < SWEEP_EVERY_MS) return;
    this.lastSweep = Date.now();
    await this.db.query(
      "delete from rate_limits where key like $1 and updated_at < now() - $2 * interval '1 second'",
      [`${this.name}:%`, this.rule.burst / this.perSecond],
    );
  }
}
