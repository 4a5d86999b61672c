// The `login_failures` table: failed logins counted per key (an account, a client address) within a window,
// which the login throttle (api/auth.ts) reads.
import type { Queryable } from "./db.js";

/** A key's failures in the current window. */
export interface LoginFailures {
  readonly key: string;
  readonly failures: number;
  /** Seconds until the window ends. */
  readonly window: number;
  /** Seconds since the last failure. */
  readonly since: number;
}

/** The failures of those of `keys` whose window, `windowSeconds` long, has not ended. */
export async function recentLoginFailures(
  db: Queryable,
  keys: readonly string[],
  windowSeconds: number,
): Promise<LoginFailures[]> {
  const { rows } = await db.query<LoginFailures>(
    `select key, failures,
            ceil(extract(epoch from (first_at + $2 * interval '1 second' - now())))::int as window,
            extract(epoch from (now() - coalesce(last_at, first_at)))::float8 as since
       from login_failures where key = any($1) and first_at > now() - $2 * interval '1 second'`,
    [keys, windowSeconds],
  );
  return rows;
}

/** Counts one failure for `key`; a window over `windowSeconds` old starts again at this one. */
export async function recordLoginFailure(db: Queryable, key: string, windowSeconds: number): Promise<void> {
  await db.query(
    `insert into login_failures (key, failures, first_at, last_at) values ($1, 1, now(), now())
     on conflict (key) do update set
       failures = case when login_failures.first_at > now() - $2 * interval '1 second' then login_failures.failures + 1 else 1 end,
       first_at = case when login_failures.first_at > now() - $2 * interval '1 second' then login_failures.first_at else now() end,
       last_at = now()`,
    [key, windowSeconds],
  );
}

/** Forgets the key's failures (a successful login clears its account's). */
export async function clearLoginFailures(db: Queryable, key: string): Promise<void> {
  await db.query("delete from login_failures where key = $1", [key]);
}
