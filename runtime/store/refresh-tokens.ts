// The `refresh_tokens` table: every refresh token issued (by its hash), grouped in families (one per login),
// with when each was used, replaced or revoked. The rules that read these are the API's (api/auth.ts).
import type { Queryable } from "./db.js";

/** One token of a family, with what the refresh rule asks of it. */
export interface FamilyToken {
  readonly id: string;
  readonly user_id: string;
  readonly token_hash: string;
  readonly replaced: boolean;
  readonly revoked: boolean;
  /** It has been presented (the family's head, unless a newer one has been since: then `replaced`). */
  readonly head: boolean;
  /** The access token it last bought is still fresh. */
  readonly early: boolean;
  readonly expired: boolean;
  /** Its account is deleted. */
  readonly deleted: boolean;
}

/** A new token of the family, valid for `ttlSeconds` from now. */
export async function recordRefreshToken(
  db: Queryable,
  token: { id: string; userId: string; familyId: string; tokenHash: string; ttlSeconds: number },
): Promise<void> {
  await db.query(
    `insert into refresh_tokens (id, user_id, family_id, token_hash, expires_at)
     values ($1, $2, $3, $4, now() + $5 * interval '1 second')`,
    [token.id, token.userId, token.familyId, token.tokenHash, token.ttlSeconds],
  );
}

/** The family of the token with this hash; undefined for a token never issued. */
export async function tokenFamily(db: Queryable, tokenHash: string): Promise<string | undefined> {
  const { rows } = await db.query<{ family_id: string }>(
    "select family_id from refresh_tokens where token_hash = $1",
    [tokenHash],
  );
  return rows[0]?.family_id;
}

/** Every token of the family, oldest first, locked until the transaction ends. */
export async function lockTokenFamily(tx: Queryable, familyId: string): Promise<FamilyToken[]> {
  const { rows } = await tx.query<FamilyToken>(
    `select t.id, t.user_id, t.token_hash, t.replaced_at is not null as replaced,
            t.revoked_at is not null as revoked, t.used_at is not null as head,
            coalesce(t.reusable_at > now(), false) as early, t.expires_at < now() as expired,
            u.deleted_at is not null as deleted
       from refresh_tokens t join users u on u.id = t.user_id
      where t.family_id = $1 order by t.created_at, t.id for update of t`,
    [familyId],
  );
  return rows;
}

/** Revokes every token of the family (those revoked before keep their time). */
export async function revokeTokenFamily(db: Queryable, familyId: string): Promise<void> {
  await db.query("update refresh_tokens set revoked_at = coalesce(revoked_at, now()) where family_id = $1", [
    familyId,
  ]);
}

/** Revokes the family of the token with this hash; nothing for a token never issued. */
export async function revokeFamilyOfToken(db: Queryable, tokenHash: string): Promise<void> {
  await db.query(
    `update refresh_tokens set revoked_at = coalesce(revoked_at, now())
      where family_id = (select family_id from refresh_tokens where token_hash = $1)`,
    [tokenHash],
  );
}

/** Marks every token of the family but `keptId` replaced (those replaced before keep their time). */
export async function replaceTokensExcept(db: Queryable, familyId: string, keptId: string): Promise<void> {
  await db.query(
    "update refresh_tokens set replaced_at = now() where family_id = $1 and id <> $2 and replaced_at is null",
    [familyId, keptId],
  );
}

/**
 * Records the token as presented (the first time only) and when it may be presented again:
 * `reusableAt`, in seconds since the epoch.
 */
export async function recordTokenUse(db: Queryable, tokenId: string, reusableAt: number): Promise<void> {
  await db.query(
    "update refresh_tokens set used_at = coalesce(used_at, now()), reusable_at = to_timestamp($2) where id = $1",
    [tokenId, reusableAt],
  );
}
