// The names of the dev servers the front door finds by itself (issue 45; seed 004 US4, FR-012): a port that
// an agent's program listens on inside a sandbox answers at `<project>.<domain>`, `<worktree>.<project>` and
// `p<port>.<project>`, the project's part made from its name. Pure, so the routes, the CLI and the tests
// agree on them. The declared ports' names (lib/front-door.ts) are another form and never one of these.

/** The most characters a project's part keeps of its name (a DNS label is at most 63; room for `-<label>`). */
const SLUG_MAX = 40;
/** Names the front door keeps for itself (`api.<domain>` is E2B's control plane on a public domain). */
const RESERVED = new Set(["api", "www", "admin", "console", "terminal", "localhost"]);
/** A 12-hex project label at the start (a declared route's `<label>[-<name>]`), or at the end after `-`. */
const LABEL_FIRST = /^[0-9a-f]{12}(-|$)/;
const LABEL_LAST = /^(.+)-([0-9a-f]{12})$/;
/** `p<port>`: a port's own name, before any worktree's. */
const PORT_LABEL = /^p([1-9][0-9]{0,4})$/;
/** A DNS label: a worktree's part of a name (and every other part). */
const DNS_LABEL = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;

/**
 * A worktree's part of its servers' names: its directory's name (`sbx worktree add feat/x` makes
 * `.worktrees/feat__x`) with `_` written `-`, as its declared route's name is (`feat--x`): a host name has no
 * `_`, and no certificate authority signs one. A branch name (`feat/x`) maps to the same.
 */
export const worktreeHostLabel = (worktree: string) =>
  worktree.toLowerCase().replace(/\//g, "__").replace(/_/g, "-");

/** A project's name as a host name's label: accents dropped, lowercase, runs of anything else one `-`, at most 40. */
export function devServerSlug(name: string): string {
  const slug = name
    .normalize("NFKD")
    .replace(/\p{M}/gu, "")
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, "-")
    .replace(/^-+|-+$/g, "")
    .slice(0, SLUG_MAX)
    .replace(/-+$/, "");
  return slug === "" ? "project" : slug;
}

/**
 * Whether a slug may stand alone (`<slug>.<domain>`): it starts with a letter, is not reserved, and cannot
 * be read as one of the other forms (a declared route's label first, a label-suffixed slug, a port's name).
 */
export function bareSlugAllowed(slug: string): boolean {
  return (
    /^[a-z]/.test(slug) &&
    !RESERVED.has(slug) &&
    !LABEL_FIRST.test(slug) &&
    !LABEL_LAST.test(slug) &&
    !/^p[0-9]/.test(slug)
  );
}

export interface NamedProject {
  readonly id: string;
  readonly name: string;
  /** Older projects keep the bare name when two share it: the order decides, so it never flips. */
  readonly createdAt: string | Date;
}

/** The project's label: the first 12 hex characters of its UUID (as a declared route's). */
const labelOf = (id: string) => id.replace(/-/g, "").toLowerCase().slice(0, 12);

/**
 * Each project's part of its dev servers' host names. The oldest live project of a slug has it bare (when
 * the slug may stand alone); every other one, and any slug that may not, is `<slug>-<label>`. No two
 * projects get the same part: a bare slug never ends in `-<12 hex>`, a suffixed one always does, with its own
 * project's label.
 */
export function devServerProjectParts(projects: readonly NamedProject[]): Map<string, string> {
  const ordered = [...projects].sort(
    (a, b) => new Date(a.createdAt).getTime() - new Date(b.createdAt).getTime() || (a.id < b.id ? -1 : 1),
  );
  const taken = new Set<string>();
  const parts = new Map<string, string>();
  for (const project of ordered) {
    const slug = devServerSlug(project.name);
    const bare = bareSlugAllowed(slug) && !taken.has(slug);
    if (bare) taken.add(slug);
    parts.set(project.id, bare ? slug : `${slug}-${labelOf(project.id)}`);
  }
  return parts;
}

/** What a dev-server host name asks for: a project's part, and the port or worktree within it. */
export interface DevServerHost {
  /**
   * The project's part (`web`, `web-0f3a9c2b7d41`), or its 12-hex label under a port or a worktree
   * (`p5173.<label>`, `<worktree>.<label>`: the alias every project has; `<label>` alone is its declared route's).
   */
  readonly project: string;
  readonly port?: number;
  readonly worktree?: string;
}

/**
 * Reads `<project>.<domain>`, `<worktree>.<project>.<domain>` or `p<port>.<project>.<domain>` (lowercase, no
 * port); undefined for any other name. Under a worktree or a port, `project` may also be the project's
 * 12-hex label (the alias).
 */
export function parseDevServerHost(host: string, domain: string): DevServerHost | undefined {
  const name = host.toLowerCase().replace(/\.$/, "");
  if (!name.endsWith(`.${domain}`)) return undefined;
  const labels = name.slice(0, -domain.length - 1).split(".");
  if (labels.length > 2 || labels.some((label) => !DNS_LABEL.test(label))) return undefined;
  const project = labels.at(-1)!;
  // `<label>` alone is a declared route's name (lib/front-door.ts), never a found server's.
  if (labels.length === 1) return /^[0-9a-f]{12}$/.test(project) ? undefined : { project };
  const sub = labels[0]!;
  const port = PORT_LABEL.exec(sub);
  if (port) return Number(port[1]) <= 65535 ? { project, port: Number(port[1]) } : undefined;
  return { project, worktree: sub };
}

/** A dev server as the sandbox's kernel has it (runtime/sandbox/dev-servers.ts). */
export interface FoundDevServer {
  readonly port: number;
  /** The address it listens on: `0.0.0.0`, `::`, or a loopback one the front door cannot reach. */
  readonly address: string;
  /** The worktree its program runs in (its directory under `.worktrees/`), when it runs in one. */
  readonly worktree?: string;
  /**
   * Where the front door reaches the sandbox, when it is not the sandbox's bridge address (a Pod's own address,
   * from the cluster's API: never from inside the sandbox).
   */
  readonly host?: string;
}

/** Whether the front door reaches the server from the host: not when it listens on loopback alone. */
export const reachableAddress = (address: string) =>
  !/^127\./.test(address) && address !== "::1" && !address.startsWith("::ffff:127.");

/**
 * A found server's names, as `devServerFor` resolves them: `<part>` for the project's main server,
 * `<worktree>.<part>` for each worktree's first, `p<port>.<part>` for each port (its reachable server first).
 */
export function devServerNames(
  part: string,
  servers: readonly FoundDevServer[],
  domain: string,
): { server: FoundDevServer; hosts: string[] }[] {
  const main = devServerFor({ project: part }, servers);
  return ordered(servers).map((server) => {
    const hosts: string[] = [];
    if (server === main) hosts.push(`${part}.${domain}`);
    const worktree = server.worktree && worktreeHostLabel(server.worktree);
    if (worktree && DNS_LABEL.test(worktree) && devServerFor({ project: part, worktree }, servers) === server)
      hosts.push(`${worktree}.${part}.${domain}`);
    if (devServerFor({ project: part, port: server.port }, servers) === server)
      hosts.push(`p${server.port}.${part}.${domain}`);
    return { server, hosts };
  });
}

/** By port, a reachable address before a loopback one, then by address. */
const ordered = (servers: readonly FoundDevServer[]) =>
  [...servers].sort(
    (a, b) =>
      a.port - b.port ||
      Number(reachableAddress(b.address)) - Number(reachableAddress(a.address)) ||
      (a.address < b.address ? -1 : a.address > b.address ? 1 : 0),
  );

/**
 * The server a parsed host name stands for among those found: by port, by worktree (its lowest port), or the
 * project's main one (the lowest port not in a worktree, else the lowest of all).
 */
export function devServerFor(
  asked: DevServerHost,
  servers: readonly FoundDevServer[],
): FoundDevServer | undefined {
  const sorted = ordered(servers);
  if (asked.port !== undefined) return sorted.find((server) => server.port === asked.port);
  if (asked.worktree !== undefined) {
    const label = worktreeHostLabel(asked.worktree);
    return sorted.find(
      (server) => server.worktree !== undefined && worktreeHostLabel(server.worktree) === label,
    );
  }
  return sorted.find((server) => server.worktree === undefined) ?? sorted[0];
}
