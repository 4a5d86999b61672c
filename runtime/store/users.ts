// The `users` table: the platform's accounts (a deleted one keeps its row, with `deleted_at` set).
import type { Queryable } from "./db.js";

/** The email of the user, if the account exists and is not deleted. */
export async function activeUserEmail(db: Queryable, userId: string): Promise<string | undefined> {
  const { rows } = await db.query<{ email: string }>(
    "select email from users where id = $1 and deleted_at is null",
    [userId],
  );
  return rows[0]?.email;
}
