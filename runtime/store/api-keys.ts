// The `api_keys` table: each user's long-lived keys, by the SHA-256 of the key (the key itself is shown once,
// when it is made). The rules that read these are the API's (api/auth.ts).
import type { Queryable } from "./db.js";

/** What a key's owner may see of it: never the key or its hash. */
export interface ApiKeyRow {
  readonly id: string;
  readonly name: string;
  readonly prefix: string;
  readonly created_at: Date;
  readonly expires_at: Date | null;
  readonly last_used_at: Date | null;
}

const COLUMNS = "id, name, prefix, created_at, expires_at, last_used_at";

/** A new key of the user's, expiring after `expiresInDays` (never, when undefined). */
export async function recordApiKey(
  db: Queryable,
  key: { id: string; userId: string; name: string; prefix: string; keyHash: string; expiresInDays?: number },
): Promise<ApiKeyRow> {
  const { rows } = await db.query<ApiKeyRow>(
    `insert into api_keys (id, user_id, name, prefix, key_hash, expires_at)
     values ($1, $2, $3, $4, $5, case when $6::integer is null then null else now() + $6 * interval '1 day' end)
     returning ${COLUMNS}`,
    [key.id, key.userId, key.name, key.prefix, key.keyHash, key.expiresInDays ?? null],
  );
  return rows[0]!;
}

/**
 * How many of the user's keys still work, the user's row locked for the rest of the transaction: two creates
 * at once are serialised, so both cannot pass a limit.
 */
export async function countApiKeysLocked(tx: Queryable, userId: string): Promise<number> {
  await tx.query("select id from users where id = $1 for update", [userId]);
  const { rows } = await tx.query<{ count: number }>(
    `select count(*)::int as count from api_keys
     where user_id = $1 and revoked_at is null and (expires_at is null or expires_at > now())`,
    [userId],
  );
  return rows[0]?.count ?? 0;
}

/** The user's keys that still work (not revoked, not expired), oldest first. */
export async function listApiKeys(db: Queryable, userId: string): Promise<ApiKeyRow[]> {
  const { rows } = await db.query<ApiKeyRow>(
    `select ${COLUMNS} from api_keys
     where user_id = $1 and revoked_at is null and (expires_at is null or expires_at > now())
     order by created_at, id`,
    [userId],
  );
  return rows;
}

/** Revokes one of the user's keys; false when the user has no such key (or it was revoked already). */
export async function revokeApiKey(db: Queryable, userId: string, id: string): Promise<boolean> {
  const { rows } = await db.query(
    "update api_keys set revoked_at = now() where id = $1 and user_id = $2 and revoked_at is null returning id",
    [id, userId],
  );
  return rows.length > 0;
}

/**
 * The owner of the key with this hash, when it works: not revoked, not expired, its account live. Marks it
 * used (at most once a minute, so that a busy key does not write on every request).
 */
export async function apiKeyUser(db: Queryable, keyHash: string): Promise<string | undefined> {
  const { rows } = await db.query<{ user_id: string; id: string; stale: boolean }>(
    `select k.user_id, k.id, (k.last_used_at is null or k.last_used_at < now() - interval '1 minute') as stale
     from api_keys k join users u on u.id = k.user_id
     where k.key_hash = $1 and k.revoked_at is null and (k.expires_at is null or k.expires_at > now())
       and u.deleted_at is null`,
    [keyHash],
  );
  const key = rows[0];
  if (!key) return undefined;
  if (key.stale) await db.query("update api_keys set last_used_at = now() where id = $1", [key.id]);
  return key.user_id;
}
