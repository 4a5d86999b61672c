// How the runtime obtains a tenant's GCP credentials: only by impersonation, never a key.
// The VM's account may mint tokens for the Project Service account, which may mint tokens for each tenant's
// account (components/tenant/identity.ts grants it that, per tenant); one generateAccessToken call with the
// Project Service account as delegate yields a token of the tenant's account, confined by its IAM
// conditions to `projects/<id>/` of the bucket. The token goes to a root-only file of the tenant's that its
// sandbox reads (GCS_TOKEN_FILE); the runtime rewrites it well before it expires.
import { promises as fs } from "node:fs";
import * as path from "node:path";
import { GCS_TOKEN_FILE } from "../../components/tenant/sandbox.js";
import { tenantServiceAccountEmail } from "../../components/tenant/identity.js";
import type { AccessToken, TokenSource } from "./storage.js";

export const IAM_CREDENTIALS_ENDPOINT = "https://iamcredentials.googleapis.com";
const STORAGE_SCOPE = "https://www.googleapis.com/auth/devstorage.read_write";

export interface ImpersonationOptions {
  /** The platform's GCP project (the tenants' accounts live there). */
  readonly project: string;
  /** The Project Service account's email: the delegate in every tenant token's chain. */
  readonly projectServiceAccount: string;
  /** The runtime's own token (the VM's account, from the metadata server). */
  readonly source: TokenSource;
  /** IAM Credentials API; default Google's. */
  readonly endpoint?: string;
  /** A token's lifetime (default 3600 s, the API's maximum without an org policy change). */
  readonly lifetimeSeconds?: number;
}

/**
 * IAM Credentials' generateAccessToken: a token of `target` for `scope`, through `delegates` (each may mint for
 * the next, the first for the caller), called with the runtime's own token.
 */
export async function generateAccessToken(options: {
  readonly target: string;
  readonly delegates: readonly string[];
  readonly scope: readonly string[];
  readonly source: TokenSource;
  readonly endpoint?: string;
  readonly lifetimeSeconds?: number;
}): Promise<AccessToken> {
  const { target } = options;
  const endpoint = options.endpoint ?? IAM_CREDENTIALS_ENDPOINT;
  const url = `${endpoint}/v1/projects/-/serviceAccounts/${encodeURIComponent(target)}:generateAccessToken`;
  const source = await options.source();
  const response = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json", ...(source ? { authorization: `Bearer ${source}` } : {}) },
    body: JSON.stringify({
      ...(options.delegates.length > 0
        ? { delegates: options.delegates.map((account) => `projects/-/serviceAccounts/${account}`) }
        : {}),
      scope: [...options.scope],
      lifetime: `${options.lifetimeSeconds ?? 3600}s`,
    }),
    signal: AbortSignal.timeout(30_000),
  }).catch((error: Error) => {
    throw new Error(`minting a token for ${target}: cannot reach ${endpoint}: ${error.message}`);
  });
  if (!response.ok) {
    const detail = (await response.text()).slice(0, 300).trim();
    const via = options.delegates.length > 0 ? ` via ${options.delegates.join(", ")}` : "";
    throw new Error(`minting a token for ${target}${via}: ${response.status} ${detail}`);
  }
  const body = (await response.json()) as { accessToken: string; expireTime: string };
  return { accessToken: body.accessToken, expiresAt: new Date(body.expireTime) };
}

/** Mints a token of the tenant's own service account through the Project Service account. */
export function tenantAccessToken(options: ImpersonationOptions, projectId: string): Promise<AccessToken> {
  return generateAccessToken({
    target: tenantServiceAccountEmail(options.project, projectId),
    delegates: [options.projectServiceAccount],
    scope: [STORAGE_SCOPE],
    source: options.source,
    endpoint: options.endpoint,
    lifetimeSeconds: options.lifetimeSeconds,
  });
}

/** The token as rclone's `token` option takes it (an OAuth2 token, JSON). */
export function rcloneToken(token: AccessToken): string {
  return JSON.stringify({
    access_token: token.accessToken,
    token_type: "Bearer",
    expiry: token.expiresAt.toISOString(),
  });
}

/** The tenant's token file on the host: `<secretsRoot>/<id>/gcs-token.json`, mounted at /run/secrets. */
export const tenantTokenPath = (secretsRoot: string, projectId: string) =>
  path.join(secretsRoot, projectId, GCS_TOKEN_FILE);

/** When a token file is due for renewal: within `marginMs` of its expiry (or unreadable). */
export async function tokenFileExpiry(file: string): Promise<Date | undefined> {
  try {
    const { expiry } = JSON.parse(await fs.readFile(file, "utf8")) as { expiry?: string };
    const date = expiry ? new Date(expiry) : undefined;
    return date && !Number.isNaN(date.getTime()) ? date : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Keeps each gcp-mode tenant's token file fresh. `renew(id)` mints and writes one now (after a create or
 * start); `renewDue(ids)` renews those within `marginMs` of expiry (default 20 min: longer than a sync's
 * usual length, so a token rarely expires mid-sync, and sandbox-backup retries once with a renewed one).
 */
export class TenantTokens {
  constructor(
    private readonly options: ImpersonationOptions,
    private readonly secretsRoot: string,
    private readonly marginMs = 20 * 60_000,
  ) {}

  async renew(projectId: string): Promise<Date> {
    const token = await tenantAccessToken(this.options, projectId);
    const file = tenantTokenPath(this.secretsRoot, projectId);
    await fs.mkdir(path.dirname(file), { recursive: true, mode: 0o700 });
    const temp = `${file}.${process.pid}.tmp`;
    await fs.writeFile(temp, rcloneToken(token), { mode: 0o600 });
    await fs.rename(temp, file); // atomic: a reader sees the old token or the new one
    return token.expiresAt;
  }

  /** A token of the tenant's account minted now, as rclone takes it, written nowhere (the runtime's own rclone). */
  async mint(projectId: string): Promise<string> {
    return rcloneToken(await tenantAccessToken(this.options, projectId));
  }

  /** The tenant's token file as written (what a microVM's guest is given), or undefined if there is none. */
  async read(projectId: string): Promise<string | undefined> {
    return fs.readFile(tenantTokenPath(this.secretsRoot, projectId), "utf8").catch(() => undefined);
  }

  /** Renews every due token; failures are returned per project (the others are still renewed). */
  async renewDue(projectIds: readonly string[], now = new Date()): Promise<Record<string, string>> {
    const failures: Record<string, string> = {};
    for (const projectId of projectIds) {
      const expiry = await tokenFileExpiry(tenantTokenPath(this.secretsRoot, projectId));
      if (expiry && expiry.getTime() - now.getTime() > this.marginMs) continue;
      await this.renew(projectId).catch((error: Error) => (failures[projectId] = error.message));
    }
    return failures;
  }

  async remove(projectId: string): Promise<void> {
    await fs.rm(tenantTokenPath(this.secretsRoot, projectId), { force: true });
  }
}
