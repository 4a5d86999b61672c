// The dev servers an agent runs inside a container sandbox, found without being declared (issue 45; seed 004
// US4, FR-012): the TCP ports its agent's programs listen on, read on the host from the sandbox's network
// namespace (`/proc/<pid>/net/tcp*`: kernel state the tenant cannot write), each with the worktree its
// program runs in (the listening socket's owner's working directory). No listener, nothing inside: asked
// when a request or a listing needs it, so a port answers as soon as it listens.
import { promises as fs, readFileSync } from "node:fs";
import type Docker from "dockerode";
import { tenantNames } from "../../components/tenant/names.js";
import { AGENT_UID, SANDBOX_SSH_PORT } from "../../lib/constants.js";
import type { FoundDevServer } from "../../lib/dev-server-names.js";
import { isNotFound } from "../../lib/docker-client.js";

/** A listening socket of /proc/net/tcp or tcp6. */
export interface ListeningSocket {
  readonly port: number;
  readonly address: string;
  readonly uid: number;
  readonly inode: string;
}

/** /proc/net's address (hex, 32-bit words in host byte order: little-endian here) as text. */
export function procNetAddressText(hex: string): string {
  const words = hex.match(/.{8}/g) ?? [];
  const bytes = words.flatMap((word) =>
    (word.match(/../g) ?? []).reverse().map((pair) => parseInt(pair, 16)),
  );
  if (bytes.length === 4) return bytes.join(".");
  if (bytes.slice(0, 10).every((b) => b === 0) && bytes[10] === 0xff && bytes[11] === 0xff)
    return `::ffff:${bytes.slice(12).join(".")}`;
  const groups = [];
  for (let i = 0; i < 16; i += 2) groups.push(((bytes[i]! << 8) | bytes[i + 1]!).toString(16));
  // The URL parser writes an IPv6 address in its shortest form.
  return new URL(`http://[${groups.join(":")}]/`).hostname.replace(/^\[|\]$/g, "");
}

/** The LISTEN (0A) lines of a /proc/net/tcp or tcp6 table. */
export function listeningSockets(table: string): ListeningSocket[] {
  const found: ListeningSocket[] = [];
  for (const line of table.split("\n").slice(1)) {
    const fields = line.trim().split(/\s+/);
    if (fields[3] !== "0A" || fields.length < 10) continue;
    const [address, port] = fields[1]!.split(":");
    found.push({
      port: parseInt(port ?? "", 16),
      address: procNetAddressText(address ?? ""),
      uid: Number(fields[7]),
      inode: fields[9]!,
    });
  }
  return found;
}

/** The worktree a working directory is in: `/workspace/<repo>/.worktrees/<name>/...` (lowercased). */
export function worktreeOf(cwd: string): string | undefined {
  const match = /^\/(?:home\/agent\/)?workspace\/[^/]+\/\.worktrees\/([^/]+)(?:\/|$)/.exec(cwd);
  return match?.[1]?.toLowerCase();
}

/** The container's first process (its network namespace's), kept a few seconds: a request asks often. */
const PID_TTL_MS = 5_000;

/**
 * The dev servers of container sandboxes. A socket's worktree is found once (its inode's owner among the
 * processes in the sandbox's namespace) and kept while the socket listens.
 */
export class ContainerDevServers {
  private readonly pids = new Map<string, { pid: number; at: number }>();
  private readonly worktrees = new Map<string, Map<string, string | null>>();
  private readonly recent = new Map<string, { at: number; servers: FoundDevServer[] | undefined }>();

  constructor(private readonly docker: () => Docker) {}

  /**
   * The project's dev servers; undefined when its container does not run. Read at most `maxAgeMs` ago (0: now):
   * the kernel writes its TCP tables by walking the whole host's connection table, several milliseconds on a
   * busy host, which every request through the front door would pay.
   */
  async found(projectId: string, maxAgeMs = 0): Promise<FoundDevServer[] | undefined> {
    const recent = this.recent.get(projectId);
    if (recent && performance.now() - recent.at <= maxAgeMs) return recent.servers;
    const at = performance.now();
    const servers = await this.read(projectId);
    this.recent.set(projectId, { at, servers });
    if (servers === undefined) this.recent.delete(projectId);
    return servers;
  }

  private async read(projectId: string): Promise<FoundDevServer[] | undefined> {
    for (let attempt = 0; attempt < 2; attempt += 1) {
      const pid = await this.pid(projectId, attempt > 0);
      if (pid === undefined) return undefined;
      const tables = readTables(pid);
      // The container went (or restarted) since its pid was kept: ask the engine again.
      if (tables === undefined) continue;
      const sockets = tables
        .flatMap(listeningSockets)
        .filter((s) => s.uid === AGENT_UID && s.port >= 1024 && s.port !== SANDBOX_SSH_PORT);
      const worktrees = await this.worktreesOf(projectId, pid, sockets);
      const servers = new Map<string, FoundDevServer>();
      for (const socket of sockets) {
        const worktree = worktrees.get(socket.inode) ?? undefined;
        servers.set(`${socket.address}:${socket.port}`, {
          port: socket.port,
          address: socket.address,
          ...(worktree ? { worktree } : {}),
        });
      }
      return [...servers.values()];
    }
    return undefined;
  }

  private async pid(projectId: string, fresh: boolean): Promise<number | undefined> {
    const kept = this.pids.get(projectId);
    if (kept && !fresh && Date.now() - kept.at < PID_TTL_MS) return kept.pid;
    this.pids.delete(projectId);
    try {
      const { State } = await this.docker().getContainer(tenantNames(projectId).container).inspect();
      if (!State.Running || !(State.Pid > 0)) return undefined;
      this.pids.set(projectId, { pid: State.Pid, at: Date.now() });
      return State.Pid;
    } catch (error) {
      if (isNotFound(error)) return undefined;
      throw error;
    }
  }

  /** Each listening socket's worktree (null: none), looked up once per new socket. */
  private async worktreesOf(
    projectId: string,
    pid: number,
    sockets: readonly ListeningSocket[],
  ): Promise<Map<string, string | null>> {
    const known = this.worktrees.get(projectId) ?? new Map<string, string | null>();
    const current = new Map<string, string | null>();
    const unknown = new Set<string>();
    for (const { inode } of sockets) {
      if (known.has(inode)) current.set(inode, known.get(inode)!);
      else unknown.add(inode);
    }
    if (unknown.size > 0) {
      const owners = await socketOwnersCwd(pid, unknown);
      for (const inode of unknown) {
        const cwd = owners.get(inode);
        current.set(inode, cwd === undefined ? null : (worktreeOf(cwd) ?? null));
      }
    }
    this.worktrees.set(projectId, current);
    return current;
  }
}

const readlink = (file: string) => fs.readlink(file).catch(() => undefined);

/**
 * The namespace's TCP tables, or undefined when the process is gone. Read synchronously: the kernel writes a
 * small table at once, and Node's asynchronous read of a file whose size says 0 takes several trips through
 * its thread pool (3-4 ms a request here, against 0.1 ms).
 */
function readTables(pid: number): string[] | undefined {
  try {
    return ["tcp", "tcp6"].map((table) => readFileSync(`/proc/${pid}/net/${table}`, "utf8"));
  } catch {
    return undefined;
  }
}

/**
 * The working directory of each socket's owner, among the processes in the network namespace of `pid`
 * (the path as the sandbox sees it).
 */
export async function socketOwnersCwd(
  pid: number,
  inodes: ReadonlySet<string>,
): Promise<Map<string, string>> {
  const owners = new Map<string, string>();
  const namespace = await readlink(`/proc/${pid}/ns/net`);
  if (namespace === undefined) return owners;
  const processes = (await fs.readdir("/proc")).filter((entry) => /^[0-9]+$/.test(entry));
  for (const process of processes) {
    if ((await readlink(`/proc/${process}/ns/net`)) !== namespace) continue;
    const fds = await fs.readdir(`/proc/${process}/fd`).catch(() => [] as string[]);
    for (const fd of fds) {
      const inode = /^socket:\[([0-9]+)\]$/.exec((await readlink(`/proc/${process}/fd/${fd}`)) ?? "")?.[1];
      if (inode === undefined || !inodes.has(inode) || owners.has(inode)) continue;
      const cwd = await readlink(`/proc/${process}/cwd`);
      if (cwd !== undefined) owners.set(inode, cwd);
    }
    if (owners.size === inodes.size) break;
  }
  return owners;
}
