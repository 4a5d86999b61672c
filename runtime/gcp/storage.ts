// The few GCS JSON API calls the runtime makes itself (purging a deleted tenant's prefix and its Pulumi
// state), over fetch: no client library for four requests. STORAGE_EMULATOR_HOST points it at an emulator,
// the variable Pulumi's gs:// backend (gocloud.dev) and Google's client libraries honour: one setting
// sends every GCS request of the platform to the same place.

/** Google's Cloud Storage endpoint: the one used unless STORAGE_EMULATOR_HOST names another. */
export const GOOGLE_STORAGE = "https://storage.googleapis.com";

/** Where GCS answers: the emulator when STORAGE_EMULATOR_HOST is set (`host:port`), else Google. */
export function gcsEndpoint(env: NodeJS.ProcessEnv = process.env): string {
  const host = env.STORAGE_EMULATOR_HOST?.trim();
  if (!host) return GOOGLE_STORAGE;
  return /^https?:\/\//.test(host) ? host.replace(/\/+$/, "") : `http://${host}`;
}

/** An access token for a request, or undefined for none (an emulator). */
export type TokenSource = () => Promise<string | undefined>;

/**
 * The runtime's own token: GOOGLE_OAUTH_ACCESS_TOKEN when set (what the Pulumi CLI also honours), else the
 * VM's service account from the metadata server (GCE_METADATA_HOST overrides its address, as in Google's
 * libraries). Against an emulator with neither set, none: the emulator checks no credentials.
 */
export function hostTokenSource(env: NodeJS.ProcessEnv = process.env): TokenSource {
  return async () => {
    if (env.GOOGLE_OAUTH_ACCESS_TOKEN) return env.GOOGLE_OAUTH_ACCESS_TOKEN;
    if (env.STORAGE_EMULATOR_HOST && !env.GCE_METADATA_HOST) return undefined;
    return (await metadataToken(env)).accessToken;
  };
}

export interface AccessToken {
  readonly accessToken: string;
  readonly expiresAt: Date;
}

/** The VM's service account's token from the GCE metadata server. */
export async function metadataToken(env: NodeJS.ProcessEnv = process.env): Promise<AccessToken> {
  const host = env.GCE_METADATA_HOST ?? "metadata.google.internal";
  const url = `http://${host}/computeMetadata/v1/instance/service-accounts/default/token`;
  const response = await fetch(url, {
    headers: { "Metadata-Flavor": "Google" },
    signal: AbortSignal.timeout(10_000),
  }).catch((error: Error) => {
    throw new Error(`cannot reach the metadata server at ${host} for the VM's token: ${error.message}`);
  });
  if (!response.ok) throw new Error(`the metadata server at ${host} answered ${response.status} for a token`);
  const body = (await response.json()) as { access_token: string; expires_in: number };
  return { accessToken: body.access_token, expiresAt: new Date(Date.now() + body.expires_in * 1000) };
}

/** A GCS request that failed: says which bucket and object, and the status. */
export class GcsError extends Error {
  constructor(
    message: string,
    readonly status: number,
  ) {
    super(message);
    this.name = "GcsError";
  }
}

export class GcsClient {
  constructor(
    private readonly token: TokenSource,
    readonly endpoint: string = gcsEndpoint(),
  ) {}

  private async call(what: string, url: string, init: RequestInit = {}): Promise<Response> {
    const token = await this.token();
    const response = await fetch(url, {
      ...init,
      headers: {
        ...(init.headers as Record<string, string>),
        ...(token ? { authorization: `Bearer ${token}` } : {}),
      },
      signal: AbortSignal.timeout(60_000),
    }).catch((error: Error) => {
      throw new GcsError(`${what}: cannot reach ${this.endpoint}: ${error.message}`, 0);
    });
    if (!response.ok && response.status !== 404) {
      const detail = (await response.text()).slice(0, 300).trim();
      throw new GcsError(
        `${what}: GCS answered ${response.status}${detail ? `: ${detail}` : ""}`,
        response.status,
      );
    }
    return response;
  }

  private objectsUrl(bucket: string): string {
    return `${this.endpoint}/storage/v1/b/${encodeURIComponent(bucket)}/o`;
  }

  /** Every object name under `prefix`, all pages. A missing bucket is an error naming it. */
  async list(bucket: string, prefix: string): Promise<string[]> {
    const names: string[] = [];
    let pageToken: string | undefined;
    do {
      const query = new URLSearchParams({ prefix, fields: "items(name),nextPageToken" });
      if (pageToken) query.set("pageToken", pageToken);
      const response = await this.call(
        `listing gs://${bucket}/${prefix}`,
        `${this.objectsUrl(bucket)}?${query}`,
      );
      if (response.status === 404) throw new GcsError(`bucket gs://${bucket} does not exist`, 404);
      const page = (await response.json()) as { items?: { name: string }[]; nextPageToken?: string };
      names.push(...(page.items ?? []).map((item) => item.name));
      pageToken = page.nextPageToken;
    } while (pageToken);
    return names;
  }

  /** Where a bucket is (`EUROPE-WEST1`, `EU`, `NAM4`) and what kind of location that is. */
  async bucketLocation(bucket: string): Promise<{ location: string; locationType: string }> {
    const response = await this.call(
      `reading gs://${bucket}`,
      `${this.endpoint}/storage/v1/b/${encodeURIComponent(bucket)}?fields=location,locationType`,
    );
    if (response.status === 404) throw new GcsError(`bucket gs://${bucket} does not exist`, 404);
    const body = (await response.json()) as { location?: string; locationType?: string };
    return { location: body.location ?? "", locationType: body.locationType ?? "" };
  }

  /** Deletes one object; one already gone is fine (a retried purge). */
  async delete(bucket: string, name: string): Promise<void> {
    await this.call(
      `deleting gs://${bucket}/${name}`,
      `${this.objectsUrl(bucket)}/${encodeURIComponent(name)}`,
      {
        method: "DELETE",
      },
    );
  }
}

/**
 * Deletes every live object under `prefix` (which must end in `/`: `projects/p1` would also match
 * `projects/p10/`), a few at a time; returns how many. On the versioned platform bucket the deleted
 * objects stay as noncurrent versions until the bucket's lifecycle rule removes them
 * (`gcp.deletedDataRetentionDays`, default 30 days): the documented retention of a deleted tenant's data.
 */
export async function purgePrefix(client: GcsClient, bucket: string, prefix: string): Promise<number> {
  if (!prefix.endsWith("/") || prefix === "/")
    throw new Error(`refusing to purge prefix ${JSON.stringify(prefix)}`);
  const names = await client.list(bucket, prefix);
  for (let i = 0; i < names.length; i += 16)
    await Promise.all(names.slice(i, i + 16).map((name) => client.delete(bucket, name)));
  return names.length;
}

/** A tenant's objects: `projects/<id>/` of the platform bucket (components/tenant/identity.ts). */
export const tenantPrefix = (projectId: string) => `projects/${projectId}/`;

/** The runtime's view of the platform bucket, for a tenant's delete. */
export interface TenantCloudStorage {
  readonly client: GcsClient;
  readonly bucket: string;
}

/** Empties the tenant's prefix (its backups and anything else it wrote); returns how many objects. */
export function purgeTenantObjects(storage: TenantCloudStorage, projectId: string): Promise<number> {
  return purgePrefix(storage.client, storage.bucket, tenantPrefix(projectId));
}

/** GCS multi-regions and the region names they span. */
const MULTI_REGIONS: Readonly<Record<string, string>> = { EU: "europe-", US: "us-", ASIA: "asia-" };

/**
 * Why a bucket in `location` does not suit a platform in `region`, or undefined when it does: the bucket is
 * that region, or a multi-region over it. Anything else (another region, a dual-region) sends every backup,
 * snapshot and state write across regions: latency and egress charges the platform stack, which makes its
 * bucket in `gcp.region`, never intended.
 */
export function bucketRegionProblem(bucket: string, location: string, region: string): string | undefined {
  const upper = location.toUpperCase();
  if (upper === region.toUpperCase()) return undefined;
  const span = MULTI_REGIONS[upper];
  if (span && region.startsWith(span)) return undefined;
  return `bucket gs://${bucket} is in ${location || "an unknown location"}, not in agent-sandbox:gcp.region ${region}: set gcp.region to the bucket's region, or use a bucket in ${region}`;
}
