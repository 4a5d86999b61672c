// The runtime's credentials for a GKE cluster. GKE authenticates a Google OAuth access token as the
// account it belongs to, and the platform stack binds the runtime's ClusterRole to the Project Service account
// (components/kubernetes/runtime-access.ts); people's kubeconfigs use `gke-gcloud-auth-plugin`, which the
// runtime does not run. So the runtime mints the Project Service account's token itself, by impersonation with
// the VM's own token (as it mints tenants' tokens: runtime/gcp/credentials.ts), keeps it, and mints the next one
// a while before it expires. No key, no plugin, nothing on disk.
import { parse as parseYaml, stringify as toYaml } from "yaml";
import { generateAccessToken } from "../gcp/credentials.js";
import type { AccessToken, TokenSource } from "../gcp/storage.js";

/** What GKE's API accepts a Google access token for. */
export const GKE_SCOPES = [
  "https://www.googleapis.com/auth/cloud-platform",
  "https://www.googleapis.com/auth/userinfo.email",
] as const;

export interface GkeCredentialsOptions {
  /** The account the runtime acts as on the cluster: the Project Service account's e-mail. */
  readonly account: string;
  /** The runtime's own token (the VM's account, from the metadata server). */
  readonly source: TokenSource;
  /** IAM Credentials API; default Google's. */
  readonly endpoint?: string;
  /** How long before a token expires the next is minted (default 5 min). */
  readonly marginSeconds?: number;
  /** A token's lifetime (default 3600 s). */
  readonly lifetimeSeconds?: number;
}

/** A bearer token for the cluster that {@link refresh} keeps current; one mint at a time. */
export function gkeCredentials(options: GkeCredentialsOptions) {
  const marginMs = (options.marginSeconds ?? 300) * 1000;
  let current: AccessToken | undefined;
  let minting: Promise<void> | undefined;
  const fresh = () => current !== undefined && current.expiresAt.getTime() - Date.now() > marginMs;
  return {
    token: (): string => current?.accessToken ?? "",
    async refresh(): Promise<void> {
      if (fresh()) return;
      minting ??= generateAccessToken({
        target: options.account,
        delegates: [],
        scope: GKE_SCOPES,
        source: options.source,
        endpoint: options.endpoint,
        lifetimeSeconds: options.lifetimeSeconds,
      })
        .then((token) => {
          current = token;
        })
        .finally(() => (minting = undefined));
      await minting;
    },
    /** When the kept token expires (undefined before the first). */
    expiresAt: (): Date | undefined => current?.expiresAt,
  };
}
export type GkeCredentials = ReturnType<typeof gkeCredentials>;

/**
 * A kubeconfig for a tenant stack's Kubernetes provider: the runtime's (its cluster, server and CA) with the
 * user replaced by a fresh token of the runtime's. A stack operation takes minutes, well within a token's hour.
 */
export async function kubeconfigWithToken(kubeconfig: string, credentials: GkeCredentials): Promise<string> {
  await credentials.refresh();
  const doc = parseYaml(kubeconfig) as {
    "current-context"?: string;
    contexts?: { name: string; context: { user?: string } }[];
    users?: { name: string; user: Record<string, unknown> }[];
  };
  const context = doc.contexts?.find((entry) => entry.name === doc["current-context"]);
  const userName = context?.context.user ?? "agent-sandbox-runtime";
  if (context) context.context.user = userName;
  doc.users = [
    ...(doc.users ?? []).filter((entry) => entry.name !== userName),
    { name: userName, user: { token: credentials.token() } },
  ];
  return toYaml(doc);
}
