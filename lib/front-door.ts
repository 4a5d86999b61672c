/** The dev-server ports a project declares for the front door, as `PATCH /projects/{id}` takes them. */
export interface FrontDoorPort {
  readonly port: number;
  /** A worktree or label: part of the host name, so a DNS label. */
  readonly name?: string;
}

/** The port E2B's SDKs put in their envd host name (`49983-<sandbox id>.<domain>`; docs/e2b.md). */
export const E2B_ENVD_PORT = 49983;

/** The front door's domain on the local target (a name every browser resolves to loopback). */
export const LOCAL_FRONT_DOOR_DOMAIN = "sandbox.localhost";

/**
 * The header in which the runtime's forward-auth of an E2B sandbox's port host says where Caddy sends the
 * request on (`<address>:<port>`); a client's own is deleted before it is asked.
 */
export const FRONT_DOOR_UPSTREAM_HEADER = "X-Sbx-Upstream";

/** The sandbox's own SSH port, never a front-door route. */
export const SANDBOX_SSH_PORT = 2222;
export const MAX_FRONT_DOOR_PORTS = 10;
/**
 * The owner's session cookie on a front-door host; host-scoped (no Domain), so each host has its own. The
 * runtime sets and checks it; Caddy strips it before a request reaches the sandbox.
 */
export const FRONT_DOOR_COOKIE = "sbx_front_door";
/**
 * Removes the owner's cookie from a Cookie header, wherever it stands among the others (RE2 has no
 * look-behind: the pair and the separator before it go, then a separator left at the start).
 */
export const FRONT_DOOR_COOKIE_STRIP = [
  { search_regexp: `(^|;\\s*)${FRONT_DOOR_COOKIE}=[^;]*`, replace: "" },
  { search_regexp: "^;\\s*", replace: "" },
];

/** The largest response header a dev server's answer may carry through the front door (1 MiB). */
export const DEV_SERVER_MAX_HEADER_BYTES = 1 << 20;

/** The path on a front-door host that redeems a one-time session URL (sets the cookie, redirects). */
export const FRONT_DOOR_SESSION_PATH = "/__sbx/session";

const DNS_LABEL = /^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$/;

/** Checks a declared list; the error names the offending field (`ports[1].port`). */
export function validateFrontDoorPorts(value: unknown): FrontDoorPort[] {
  if (!Array.isArray(value)) throw new Error("ports: must be an array of {port, name?}");
  if (value.length > MAX_FRONT_DOOR_PORTS) throw new Error(`ports: at most ${MAX_FRONT_DOOR_PORTS} entries`);
  const seen = new Set<string>();
  return value.map((entry: unknown, index) => {
    const field = `ports[${index}]`;
    if (typeof entry !== "object" || entry === null)
      throw new Error(`${field}: must be an object {port, name?}`);
    const { port, name, ...rest } = entry as Record<string, unknown>;
    const unknown = Object.keys(rest);
    if (unknown.length > 0) throw new Error(`${field}.${unknown[0]}: unknown field`);
    if (typeof port !== "number" || !Number.isInteger(port) || port < 1024 || port > 65535)
      throw new Error(`${field}.port: must be an integer from 1024 to 65535`);
    if (port === SANDBOX_SSH_PORT)
      throw new Error(`${field}.port: ${SANDBOX_SSH_PORT} is the sandbox's SSH port`);
    if (name !== undefined && (typeof name !== "string" || !DNS_LABEL.test(name)))
      throw new Error(`${field}.name: must be a DNS label (a-z, 0-9, '-', at most 32 characters)`);
    const key = `${name ?? ""}:${port}`;
    if (seen.has(key))
      throw new Error(`${field}: port ${port}${name ? ` named ${name}` : ""} is declared twice`);
    seen.add(key);
    return name === undefined ? { port } : { port, name };
  });
}

/** The project's label in front-door host names: the first 12 hex characters of its UUID. */
export function frontDoorLabel(projectId: string): string {
  const hex = projectId.replace(/-/g, "").toLowerCase();
  if (!/^[0-9a-f]{12,}$/.test(hex)) throw new Error(`not a project id: ${projectId}`);
  return hex.slice(0, 12);
}

/** `<label>[-<name>].<domain>`, e.g. `0f3a9c2b7d41-feature.sandbox.localhost`. */
export function frontDoorHost(
  projectId: string,
  name: string | undefined,
  domain = LOCAL_FRONT_DOOR_DOMAIN,
): string {
  return `${frontDoorLabel(projectId)}${name ? `-${name}` : ""}.${domain}`;
}

/** An E2B sandbox's host for `port`, as E2B's SDKs form it (`getHost`): `<port>-<sandbox id>.<domain>`. */
export function e2bHost(projectId: string, port: number, domain = LOCAL_FRONT_DOOR_DOMAIN): string {
  return `${port}-${projectId}.${domain}`;
}

/** One declared port's route: the host names it answers and the URL to show. */
export interface FrontDoorRouteHosts {
  readonly port: number;
  readonly name?: string;
  /** `p<port>-<label>[-<name>]` always; `<label>[-<name>]` too for the first port of that name. */
  readonly hosts: string[];
  readonly url: string;
}

/** A front door's URL base: `https://` when it serves TLS, the port left out where it is the scheme's own. */
export function frontDoorUrl(host: string, listenPort: number, tls = false): string {
  const implied = listenPort === (tls ? 443 : 80);
  return `${tls ? "https" : "http"}://${host}${implied ? "" : `:${listenPort}`}/`;
}

/**
 * The host names of each declared port. The first port of a name (or of no name) has the short host
 * `<label>[-<name>]`; every port also has `p<port>-<label>[-<name>]` (the label starts with a hex digit, so
 * the two forms never meet). `listenPort` (and `tls`: the GCP target's front door) go into the URLs.
 */
export function frontDoorRoutes(
  projectId: string,
  ports: readonly FrontDoorPort[],
  listenPort: number,
  domain = LOCAL_FRONT_DOOR_DOMAIN,
  tls = false,
): FrontDoorRouteHosts[] {
  const named = new Set<string>();
  return ports.map(({ port, name }) => {
    const short = frontDoorHost(projectId, name, domain);
    const first = !named.has(name ?? "");
    named.add(name ?? "");
    const hosts = [...(first ? [short] : []), `p${port}-${short}`];
    return {
      port,
      ...(name === undefined ? {} : { name }),
      hosts,
      url: frontDoorUrl(hosts[0]!, listenPort, tls),
    };
  });
}
