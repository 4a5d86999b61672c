// The `invites_redeemed` table: the id of every invite code used, with the account it made.
import type { Queryable } from "./db.js";

/** Whether the invite with this id has been redeemed. */
export async function inviteRedeemed(db: Queryable, inviteId: string): Promise<boolean> {
  const { rows } = await db.query("select 1 from invites_redeemed where id = $1", [inviteId]);
  return rows.length > 0;
}

/** Records the invite as redeemed by `userId`; false (and nothing written) when it was redeemed before. */
export async function recordInviteRedemption(
  tx: Queryable,
  inviteId: string,
  userId: string,
): Promise<boolean> {
  const { rows } = await tx.query(
    "insert into invites_redeemed (id, user_id) values ($1, $2) on conflict (id) do nothing returning id",
    [inviteId, userId],
  );
  return rows.length > 0;
}
