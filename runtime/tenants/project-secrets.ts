import {
  gatewayProviderOf,
  type SecretDelivery,
  type TenantSecret,
} from "../../components/tenant/secrets.js";
import type { Queryable } from "../store/db.js";
import { sealedSecrets, upsertSealedSecret } from "../store/secrets.js";
import type { SecretBox } from "../secrets.js";

/**
 * Project secrets: write-only values an owner gives a project, sealed with the platform's key
 * in the database. How each reaches the sandbox is its `delivery`:
 * - `env`: a file `/run/secrets/<NAME>` and the variable `NAME` in the agent's shells;
 * - `file`: the file only;
 * - `gateway`: never inside. A model-API key: the sandbox gets a placeholder and a base URL on its own
 *   gateway address, where the credential gateway (runtime/gateway/) adds the real key on the way out.
 * Values are never returned by the API, never in the image, a snapshot, a backup, `docker inspect` or the
 * audit (runtime/terminal/ redacts them from the audit and the recordings).
 */
export type { SecretDelivery };

/** A secret's name: an environment variable's (so path characters never reach a file name). */
export const SECRET_NAME = /^[A-Z_][A-Z0-9_]{0,63}$/;
/** The largest value (bytes of UTF-8): a PEM key or a service-account JSON fits; the request under 64 KiB. */
export const MAX_SECRET_BYTES = 32 * 1024;
/** Secrets one project may hold. */
export const MAX_PROJECT_SECRETS = 100;

/** How a secret of this name is delivered unless its owner says otherwise: model-API keys by the gateway. */
export const defaultDelivery = (name: string): SecretDelivery =>
  gatewayProviderOf(name) === undefined ? "env" : "gateway";

/** A secret as its owner sees it: never its value. */
export interface ProjectSecret {
  readonly name: string;
  readonly delivery: SecretDelivery;
  readonly updatedAt: string;
}

/** A secret with its value, for the reconciler, the gateway and the audit's redaction only. */
export type OpenedSecret = TenantSecret;

const iso = (at: Date | string) => new Date(at).toISOString();

/** Sets (or replaces) a secret; returns it as its owner sees it. Throws when the project has too many. */
export async function putSecret(
  db: Queryable,
  box: SecretBox,
  projectId: string,
  name: string,
  value: string,
  delivery: SecretDelivery = defaultDelivery(name),
): Promise<ProjectSecret> {
  const updatedAt = await upsertSealedSecret(
    db,
    { projectId, name, sealed: box.seal(value), delivery },
    MAX_PROJECT_SECRETS,
  );
  if (updatedAt === undefined)
    throw new RangeError(`project ${projectId} already has ${MAX_PROJECT_SECRETS} secrets, the limit`);
  return { name, delivery, updatedAt: iso(updatedAt) };
}

/** The project's secrets by name, without values. */
export async function listSecrets(db: Queryable, projectId: string): Promise<ProjectSecret[]> {
  const rows = await sealedSecrets(db, projectId);
  return rows.map((row) => ({ name: row.name, delivery: row.delivery, updatedAt: iso(row.updated_at) }));
}

/** The project's secrets with their values, opened. */
export async function openSecrets(db: Queryable, box: SecretBox, projectId: string): Promise<OpenedSecret[]> {
  const rows = await sealedSecrets(db, projectId);
  return rows.map((row) => ({ name: row.name, delivery: row.delivery, value: box.open(row.sealed) }));
}

/** Every value of the project's secrets (the terminal's audit redacts each one). */
export async function projectSecretValues(
  db: Queryable,
  box: SecretBox,
  projectId: string,
): Promise<string[]> {
  return (await openSecrets(db, box, projectId)).map((secret) => secret.value);
}
