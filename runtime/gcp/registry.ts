// Artifact Registry for the runtime. Its Docker endpoint takes an OAuth access token as the password of
// the user `oauth2accesstoken`; the runtime's is the Project Service account's, minted by impersonation with the
// VM's own token (never a key), which may write and delete in the `sandboxes` repository only. Snapshots are
// pushed and pulled with it; a deleted tenant's package (`sandboxes/<project id>`, every snapshot tag) is deleted
// through the Artifact Registry API with it.
export const ARTIFACT_REGISTRY_API = "https://artifactregistry.googleapis.com";

/** What the engine takes for a push or pull (dockerode's `authconfig`, sent as X-Registry-Auth). */
export interface RegistryAuth {
  readonly username: string;
  readonly password: string;
  readonly serveraddress: string;
}

/** A kept token of the Project Service account (runtime/kubernetes/gke-credentials.ts makes one). */
export interface KeptToken {
  refresh(): Promise<void>;
  token(): string;
}

/** The engine's credentials for the registry `host` (`<region>-docker.pkg.dev`), with a token fresh enough. */
export function artifactRegistryAuth(host: string, credentials: KeptToken): () => Promise<RegistryAuth> {
  return async () => {
    await credentials.refresh();
    return { username: "oauth2accesstoken", password: credentials.token(), serveraddress: `https://${host}` };
  };
}

/** `auth` for an image of its own registry only: the token never goes to another one. */
export function authFor(image: string, auth: RegistryAuth | undefined): RegistryAuth | undefined {
  if (!auth) return undefined;
  return image.startsWith(`${new URL(auth.serveraddress).host}/`) ? auth : undefined;
}

export interface ArtifactPackage {
  readonly project: string;
  readonly location: string;
  readonly repository: string;
  /** The image's path under the repository: a tenant's project id. */
  readonly name: string;
}

/**
 * Deletes a package with all its versions and tags (Google finishes the long-running operation on its own);
 * `absent` when there is none, so a retried delete is fine.
 */
export async function deleteArtifactPackage(
  pkg: ArtifactPackage,
  token: () => Promise<string>,
  endpoint = ARTIFACT_REGISTRY_API,
): Promise<"deleted" | "absent"> {
  const name = `projects/${pkg.project}/locations/${pkg.location}/repositories/${pkg.repository}/packages/${encodeURIComponent(pkg.name)}`;
  const response = await fetch(`${endpoint}/v1/${name}`, {
    method: "DELETE",
    headers: { authorization: `Bearer ${await token()}` },
    signal: AbortSignal.timeout(30_000),
  }).catch((error: Error) => {
    throw new Error(`deleting the registry package ${name}: cannot reach ${endpoint}: ${error.message}`);
  });
  if (response.status === 404) return "absent";
  if (!response.ok)
    throw new Error(
      `deleting the registry package ${name}: ${response.status} ${(await response.text()).slice(0, 300).trim()}`,
    );
  return "deleted";
}
