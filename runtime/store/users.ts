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

/** Whether the account exists and is not deleted. */
export async function isActiveUser(db: Queryable, userId: string): Promise<boolean> {
  const { rows } = await db.query("select 1 from users where id = $1 and deleted_at is null", [userId]);
  return rows.length > 0;
}

/** Records a new account; false (and nothing written) when one already has the email. */
export async function createUser(
  tx: Queryable,
  user: { id: string; email: string; passwordHash: string },
): Promise<boolean> {
  const { rows } = await tx.query<{ id: string }>(
    "insert into users (id, email, password_hash) values ($1, $2, $3) on conflict (email) do nothing returning id",
    [user.id, user.email, user.passwordHash],
  );
  return rows.length > 0;
}

/** The id and password hash of the live account with this email (as stored: in lower case). */
export async function loginAccount(
  db: Queryable,
  email: string,
): Promise<{ id: string; password_hash: string } | undefined> {
  const { rows } = await db.query<{ id: string; password_hash: string }>(
    "select id, password_hash from users where email = $1 and deleted_at is null",
    [email],
  );
  return rows[0];
}
