// The runtime's way into a cluster: a kubeconfig given in its configuration (the platform's output on
// GKE, a file elsewhere), never the process's ambient ~/.kube/config or KUBECONFIG. Only what the runtime can use
// without running anything: a bearer token (inline or a file re-read on each request, as a projected token is),
// or a client certificate. An exec or auth-provider user is refused by name, not ignored.
import { readFileSync } from "node:fs";
import * as path from "node:path";
import { parse as parseYaml } from "yaml";

/** Everything a request to the cluster needs. */
export interface ClusterAccess {
  /** Where the access came from, for messages (`kubeconfig /etc/agent-sandbox/kubeconfig`). */
  readonly source: string;
  readonly context: string;
  /** `https://host:port` with no trailing slash. */
  readonly server: string;
  readonly ca?: Buffer;
  readonly tlsServerName?: string;
  readonly insecureSkipTlsVerify: boolean;
  /** The bearer token, read each time (a file's token may be rotated under the runtime). */
  readonly token?: () => string;
  /** Made current before each request (a token minted for a while, `gkeCredentials`). */
  readonly refresh?: () => Promise<void>;
  readonly clientCert?: Buffer;
  readonly clientKey?: Buffer;
}

export class KubeconfigError extends Error {
  constructor(source: string, message: string) {
    super(`${source}: ${message}`);
    this.name = "KubeconfigError";
  }
}

type Named<T> = { name?: unknown } & Record<string, T>;

const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value);

/**
 * Parses a kubeconfig's text. `baseDir` resolves relative file references (the directory of the file it was
 * read from); without one, only inline `*-data` fields are accepted. `context` overrides `current-context`.
 */
export function parseKubeconfig(
  text: string,
  options: {
    source: string;
    baseDir?: string;
    context?: string;
    /**
     * Credentials of the runtime's own instead of the kubeconfig user's (GKE: a token minted for the Project
     * Service account); the user, whatever it holds (`gke-gcloud-auth-plugin` for people), is not read.
     */
    credentials?: { readonly token: () => string; readonly refresh: () => Promise<void> };
  },
): ClusterAccess {
  const { source, baseDir } = options;
  const fail = (message: string): never => {
    throw new KubeconfigError(source, message);
  };
  let doc: unknown;
  try {
    doc = parseYaml(text);
  } catch (error) {
    return fail(`not YAML: ${(error as Error).message.split("\n")[0]}`);
  }
  if (!isRecord(doc)) return fail("not a kubeconfig (expected a mapping with clusters, users and contexts)");
  const contextName = options.context ?? doc["current-context"];
  if (typeof contextName !== "string" || contextName === "")
    return fail("no current-context, and no context was named");
  const find = (list: string, name: string, field: string): Record<string, unknown> => {
    const entries = doc[list];
    if (!Array.isArray(entries)) return fail(`has no ${list}`);
    const entry = (entries as Named<unknown>[]).find((item) => isRecord(item) && item.name === name);
    if (!entry) return fail(`${list.slice(0, -1)} '${name}' is not among its ${list}`);
    const body = entry[field];
    if (!isRecord(body)) return fail(`${list.slice(0, -1)} '${name}' has no ${field}`);
    return body;
  };
  const context = find("contexts", contextName, "context");
  if (typeof context.cluster !== "string") return fail(`context '${contextName}' names no cluster`);
  if (typeof context.user !== "string") return fail(`context '${contextName}' names no user`);
  const cluster = find("clusters", context.cluster, "cluster");

  const file = (value: unknown, key: string): Buffer => {
    if (typeof value !== "string" || value === "") return fail(`${key} must be a file path`);
    if (!baseDir && !path.isAbsolute(value))
      return fail(`${key} '${value}' is a relative path, and this kubeconfig was not read from a file`);
    const resolved = path.resolve(baseDir ?? "/", value);
    try {
      return readFileSync(resolved);
    } catch (error) {
      return fail(`${key} '${resolved}' cannot be read: ${(error as NodeJS.ErrnoException).code ?? error}`);
    }
  };
  const data = (value: unknown, key: string): Buffer => {
    if (typeof value !== "string" || !/^[A-Za-z0-9+/=\s]+$/.test(value)) return fail(`${key} is not base64`);
    return Buffer.from(value, "base64");
  };
  const material = (holder: Record<string, unknown>, key: string): Buffer | undefined =>
    holder[`${key}-data`] !== undefined
      ? data(holder[`${key}-data`], `${key}-data`)
      : holder[key] !== undefined
        ? file(holder[key], key)
        : undefined;

  const server = cluster.server;
  if (typeof server !== "string") return fail(`cluster '${context.cluster}' has no server`);
  let url: URL;
  try {
    url = new URL(server);
  } catch {
    return fail(`cluster '${context.cluster}': server '${server}' is not a URL`);
  }
  if (url.protocol !== "https:")
    return fail(
      `cluster '${context.cluster}': server '${server}' must be https (a plain-http API server is refused)`,
    );

  const base = {
    source,
    context: contextName,
    server: server.replace(/\/+$/, ""),
    ca: material(cluster, "certificate-authority"),
    tlsServerName: typeof cluster["tls-server-name"] === "string" ? cluster["tls-server-name"] : undefined,
    insecureSkipTlsVerify: cluster["insecure-skip-tls-verify"] === true,
  };
  if (options.credentials) return { ...base, ...options.credentials };
  const user = find("users", context.user, "user");
  for (const key of ["exec", "auth-provider"])
    if (user[key] !== undefined) {
      const plugin = isRecord(user[key]) ? (user[key].command ?? user[key].name) : undefined;
      return fail(
        `user '${context.user}' authenticates with ${key === "exec" ? "an exec plugin" : "an auth provider"}` +
          `${typeof plugin === "string" ? ` (${plugin})` : ""}, which the runtime does not run: give it a token, a token file or a client certificate`,
      );
    }
  let token: (() => string) | undefined;
  if (typeof user.token === "string" && user.token !== "") {
    const value = user.token;
    token = () => value;
  } else if (user.tokenFile !== undefined) {
    const tokenPath = path.resolve(baseDir ?? "/", String(user.tokenFile));
    file(user.tokenFile, "tokenFile");
    token = () => readFileSync(tokenPath, "utf8").trim();
  }
  const clientCert = material(user, "client-certificate");
  const clientKey = material(user, "client-key");
  if ((clientCert === undefined) !== (clientKey === undefined))
    return fail(
      `user '${context.user}' has a client certificate without its key, or a key without its certificate`,
    );
  if (!token && !clientCert)
    return fail(
      `user '${context.user}' has no credentials (token, tokenFile or client-certificate and client-key)`,
    );

  return { ...base, token, clientCert, clientKey };
}

/** Reads and parses a kubeconfig file (relative references resolve beside it). */
export function readKubeconfig(
  file: string,
  context?: string,
  credentials?: Parameters<typeof parseKubeconfig>[1]["credentials"],
): ClusterAccess {
  const source = `kubeconfig ${file}`;
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (error) {
    throw new KubeconfigError(source, `cannot be read: ${(error as NodeJS.ErrnoException).code ?? error}`);
  }
  return parseKubeconfig(text, { source, baseDir: path.dirname(path.resolve(file)), context, credentials });
}
