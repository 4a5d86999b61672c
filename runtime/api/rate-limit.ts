import { HttpError } from "../errors.js";
import type { Queryable } from "../store/db.js";
import { bucketTokens, sweepBuckets, takeBucketToken, type BucketRule } from "../store/rate-limits.js";
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
  private readonly bucket: BucketRule;
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
    this.bucket = { burst: rule.burst, perSecond: this.perSecond };
  }

  /** Spends one token of `subject`'s bucket, or throws a 429 whose `retry_after` says when one is back. */
  async take(subject: string): Promise<void> {
    await this.sweep();
    const key = `${this.name}:${subject}`;
    if (await takeBucketToken(this.db, key, this.bucket)) return;
    const missing = 1 - ((await bucketTokens(this.db, key, this.bucket)) ?? 0);
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
    await sweepBuckets(this.db, `${this.name}:`, this.rule.burst / this.perSecond);
  }
}
