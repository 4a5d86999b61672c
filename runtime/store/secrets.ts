// The `project_secrets` table: each project's secrets, sealed with the platform's key (the store never sees
// a value), and the `ssh_gateway_host_keys` table: the SSH gateway's host key of each kubernetes project, its
// private half sealed likewise.
import type { SecretDelivery } from "../../components/tenant/secrets.js";
import type { Queryable } from "./db.js";

export interface SealedSecretRow {
  readonly name: string;
  readonly delivery: SecretDelivery;
  readonly sealed: string;
  readonly updated_at: Date | string;
}

/**
 * Sets (or replaces) a secret, unless the project holds `limit` others already: then nothing is written and
 * the answer is undefined. Otherwise when it was written.
 */
export async function upsertSealedSecret(
  db: Queryable,
  secret: { projectId: string; name: string; sealed: string; delivery: SecretDelivery },
  limit: number,
): Promise<Date | string | undefined> {
  const { rows } = await db.query<{ updated_at: Date | string }>(
    `insert into project_secrets (project_id, name, sealed, delivery)
       select $1, $2, $3, $4
        where (select count(*) from project_secrets where project_id = $1 and name <> $2) < $5
     on conflict (project_id, name) do update
       set sealed = excluded.sealed, delivery = excluded.delivery, updated_at = now()
     returning updated_at`,
    [secret.projectId, secret.name, secret.sealed, secret.delivery, limit],
  );
  return rows[0]?.updated_at;
}

/** Deletes a secret; false when the project had none of that name. */
export async function deleteSecret(db: Queryable, projectId: string, name: string): Promise<boolean> {
  const { rows } = await db.query(
    "delete from project_secrets where project_id = $1 and name = $2 returning name",
    [projectId, name],
  );
  return rows.length > 0;
}

/** Deletes all of a project's secrets (its deletion). */
export async function deleteAllSecrets(db: Queryable, projectId: string): Promise<void> {
  await db.query("delete from project_secrets where project_id = $1", [projectId]);
}

/** The project's secrets by name, sealed. */
export async function sealedSecrets(db: Queryable, projectId: string): Promise<SealedSecretRow[]> {
  return (
    await db.query<SealedSecretRow>(
      "select name, delivery, sealed, updated_at from project_secrets where project_id = $1 order by name",
      [projectId],
    )
  ).rows;
}

/** The SSH gateway's host key of the project (`type base64`, and the private key sealed), if it has one. */
export async function gatewayHostKeyRow(
  db: Queryable,
  projectId: string,
): Promise<{ public_key: string; private_key: string } | undefined> {
  return (
    await db.query<{ public_key: string; private_key: string }>(
      "select public_key, private_key from ssh_gateway_host_keys where project_id = $1",
      [projectId],
    )
  ).rows[0];
}

/** Records the project's host key unless it has one already (another runtime's, made at the same time). */
export async function addGatewayHostKey(
  db: Queryable,
  projectId: string,
  publicKey: string,
  sealedPrivateKey: string,
): Promise<void> {
  await db.query(
    `insert into ssh_gateway_host_keys (project_id, public_key, private_key) values ($1, $2, $3)
       on conflict (project_id) do nothing`,
    [projectId, publicKey, sealedPrivateKey],
  );
}

/** Deletes the host keys of deleted projects. */
export async function deleteGatewayHostKeysOfDeletedProjects(db: Queryable): Promise<void> {
  await db.query(
    `delete from ssh_gateway_host_keys k using tenants t
      where t.project_id = k.project_id and t.state = 'deleted'`,
  );
}
