// The dev servers an agent runs inside its sandbox, found without being declared (issue 45; seed 004 US4,
// FR-012): the TCP ports its agent's programs listen on, each with the worktree its program runs in (the
// listening socket's owner's working directory). A container's are read on the host from the sandbox's network
// namespace (`/proc/<pid>/net/tcp*`: kernel state the tenant cannot write); a microVM's and a Pod's, whose
// kernel is not the host's, by one command inside through the backend's runner (issue 48), reading the same
// tables from the guest's or the Pod's kernel. No listener, no daemon: asked when a request or a listing needs
// it, so a port answers as soon as it listens.
import { promises as fs, readFileSync } from "node:fs";
import type Docker from "dockerode";
import { tenantNames } from "../../components/tenant/names.js";
import { AGENT_UID, SANDBOX_SSH_PORT } from "../../lib/constants.js";
import type { FoundDevServer } from "../../lib/dev-server-names.js";
import { isNotFound } from "../../lib/docker-client.js";
import { SandboxNotRunningError } from "./exec.js";
import type { SandboxRunner } from "./runner.js";

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

/** The agent's dev servers among a namespace's listening sockets: its uid, ports from 1024, never its sshd's. */
const agentServers = (sockets: readonly ListeningSocket[]) =>
  sockets.filter((s) => s.uid === AGENT_UID && s.port >= 1024 && s.port !== SANDBOX_SSH_PORT);

/** One server per address and port, with its socket's worktree where one was found. */
function serversOf(
  sockets: readonly ListeningSocket[],
  worktrees: ReadonlyMap<string, string | null>,
  host?: string,
): FoundDevServer[] {
  const servers = new Map<string, FoundDevServer>();
  for (const socket of sockets) {
    const worktree = worktrees.get(socket.inode) ?? undefined;
    servers.set(`${socket.address}:${socket.port}`, {
      port: socket.port,
      address: socket.address,
      ...(worktree ? { worktree } : {}),
      ...(host ? { host } : {}),
    });
  }
  return [...servers.values()];
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
      const sockets = agentServers(tables.flatMap(listeningSockets));
      return serversOf(sockets, await this.worktreesOf(projectId, pid, sockets));
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

/**
 * What one command inside a sandbox prints of its sockets, as the agent (every dev server is the agent's, and
 * its own processes' links are all it needs to read): the kernel's TCP tables, then each socket link of the
 * processes it may read (`/proc/<pid>/fd <socket:[inode]>`), then their working directories. GNU find prints
 * the links in one process: a shell loop would start a readlink per descriptor.
 */
export const SOCKETS_INSIDE_SCRIPT = [
  "echo @tcp; cat /proc/net/tcp",
  "echo @tcp6; cat /proc/net/tcp6 2>/dev/null",
  "echo @fd; find /proc/[0-9]*/fd -maxdepth 1 -lname 'socket:*' -printf '%h %l\\n' 2>/dev/null",
  "echo @cwd; find /proc/[0-9]*/cwd -maxdepth 0 -printf '%h %l\\n' 2>/dev/null",
  "exit 0",
].join("\n");

/** The agent's dev servers in {@link SOCKETS_INSIDE_SCRIPT}'s output, each with its worktree. Pure. */
export function socketsInside(output: string, host?: string): FoundDevServer[] {
  const sections = new Map<string, string[]>();
  let current: string[] | undefined;
  for (const line of output.split("\n")) {
    if (/^@(tcp6?|fd|cwd)$/.test(line)) sections.set(line.slice(1), (current = []));
    else current?.push(line);
  }
  const table = (name: string) => sections.get(name)?.join("\n") ?? "";
  const sockets = agentServers([...listeningSockets(table("tcp")), ...listeningSockets(table("tcp6"))]);
  // `/proc/<pid>/fd socket:[<inode>]` and `/proc/<pid> <cwd>`: the first owner's directory counts.
  const cwds = new Map<string, string>();
  for (const line of sections.get("cwd") ?? []) {
    const match = /^\/proc\/([0-9]+) (\/.*)$/.exec(line);
    if (match) cwds.set(match[1]!, match[2]!);
  }
  const wanted = new Set(sockets.map((s) => s.inode));
  const worktrees = new Map<string, string | null>();
  for (const line of sections.get("fd") ?? []) {
    const match = /^\/proc\/([0-9]+)\/fd socket:\[([0-9]+)\]$/.exec(line);
    if (!match || !wanted.has(match[2]!) || worktrees.has(match[2]!)) continue;
    const cwd = cwds.get(match[1]!);
    if (cwd !== undefined) worktrees.set(match[2]!, worktreeOf(cwd) ?? null);
  }
  return serversOf(sockets, worktrees, host);
}

/** How long a reading inside may take before the front door says the sandbox does not answer. */
const INSIDE_TIMEOUT_MS = 10_000;

/**
 * The dev servers of sandboxes whose kernel is not the host's (a microVM's guest, a Pod on a node): one command
 * inside through the backend's runner, and where the front door reaches them (`address`: the Pod's own address;
 * absent, the sandbox's bridge address). A reading is a command's round trip (an SSH channel, the cluster's exec),
 * so a page's burst of requests is served from the last one (`maxAgeMs`), and concurrent askers share one.
 */
export class InsideDevServers<T extends { readonly projectId: string }> {
  private readonly recent = new Map<string, { at: number; servers: Promise<FoundDevServer[] | undefined> }>();

  constructor(
    private readonly runnerOf: (target: T) => Promise<SandboxRunner>,
    private readonly address?: (target: T) => Promise<string | undefined>,
  ) {}

  async found(target: T, maxAgeMs = 0): Promise<FoundDevServer[] | undefined> {
    const { projectId } = target;
    const recent = this.recent.get(projectId);
    if (recent && performance.now() - recent.at <= maxAgeMs) return recent.servers;
    const at = performance.now();
    const servers = this.read(target);
    this.recent.set(projectId, { at, servers });
    // A failed reading, or a sandbox not running, is not kept.
    servers.then(
      (found) => found === undefined && this.forget(projectId, servers),
      () => this.forget(projectId, servers),
    );
    return servers;
  }

  private forget(projectId: string, servers: Promise<unknown>) {
    if (this.recent.get(projectId)?.servers === servers) this.recent.delete(projectId);
  }

  private async read(target: T): Promise<FoundDevServer[] | undefined> {
    try {
      const runner = await this.runnerOf(target);
      const [result, address] = await Promise.all([
        runner.run(["sh", "-c", SOCKETS_INSIDE_SCRIPT], { timeoutMs: INSIDE_TIMEOUT_MS }),
        this.address?.(target),
      ]);
      if (result.exitCode !== 0)
        throw new Error(`reading the sandbox's sockets failed (${result.exitCode}): ${result.stderr.trim()}`);
      // A Pod between two lives has no address yet: nothing the front door could reach.
      if (this.address && !address) return undefined;
      return socketsInside(result.stdout, address);
    } catch (error) {
      if (error instanceof SandboxNotRunningError) return undefined;
      throw error;
    }
  }
}
