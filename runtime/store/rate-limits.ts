// The `rate_limits` table: one token bucket per key (a limiter's name and a subject), with its tokens as of
// `updated_at`; an absent bucket is a full one. The limiter (api/rate-limit.ts) says what the keys are.
import type { Queryable } from "./db.js";

/** A bucket's tokens now: those it had, refilled at $3 a second since, at most $2 (its burst). */
const AVAILABLE = `least($2::float8, b.tokens + extract(epoch from now() - b.updated_at)::float8 * $3::float8)`;

/** A bucket's shape: at most `burst` tokens, refilled at `perSecond`. */
export interface BucketRule {
  readonly burst: number;
  readonly perSecond: number;
}

/** Spends one token of the key's bucket; false (and nothing spent) when it has less than one. */
export async function takeBucketToken(db: Queryable, key: string, rule: BucketRule): Promise<boolean> {
  const { rows } = await db.query(
    `insert into rate_limits as b (key, tokens, updated_at) values ($1, $2::float8 - 1, now())
     on conflict (key) do update set tokens = ${AVAILABLE} - 1, updated_at = now()
      where ${AVAILABLE} >= 1
     returning tokens`,
    [key, rule.burst, rule.perSecond],
  );
  return rows.length > 0;
}

/** The tokens in the key's bucket now; undefined when it has none recorded. */
export async function bucketTokens(
  db: Queryable,
  key: string,
  rule: BucketRule,
): Promise<number | undefined> {
  const { rows } = await db.query<{ available: number }>(
    `select ${AVAILABLE} as available from rate_limits b where key = $1`,
    [key, rule.burst, rule.perSecond],
  );
  return rows[0]?.available;
}

/** Deletes the buckets of keys starting with `prefix` untouched for `ageSeconds` (full again by then). */
export async function sweepBuckets(db: Queryable, prefix: string, ageSeconds: number): Promise<void> {
  await db.query(
    "delete from rate_limits where key like $1 and updated_at < now() - $2 * interval '1 second'",
    [`${prefix}%`, ageSeconds],
  );
}
