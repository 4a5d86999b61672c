import { promises as fs } from "node:fs";
import type Docker from "dockerode";
import { tenantNames } from "../../components/tenant/names.js";
import { SANDBOX_SSH_PORT } from "../../lib/constants.js";
import { isNotFound } from "../../lib/docker-client.js";
import { tenantAddresses } from "../../lib/subnets.js";
import type { Database } from "../db.js";
import { requestOperation } from "../tenants/service.js";
import type { Job } from "./scheduler.js";

export interface IdleShutdownOptions {
  /** A running project with no activity for this long is snapshotted and stopped (seed 000 §5.3). */
  readonly idleMinutes: number;
  readonly intervalMs: number;
  /** Whether this runtime's terminal proxy holds a live session on the project. */
  readonly liveTerminal: (projectId: string) => boolean;
  readonly docker: Docker;
}

interface Candidate {
  id: string;
  last_active: Date;
  /** A microVM's subnet (its SSH sessions are the host's connections to its sandbox address); null for a container. */
  microvm_subnet: string | null;
}

/** An IPv4 address as /proc/net/tcp writes it: the 32-bit word in host (little-endian) byte order, in hex. */
export function procNetAddress(ipv4: string): string {
  return ipv4
    .split(".")
    .reverse()
    .map((octet) => Number(octet).toString(16).toUpperCase().padStart(2, "0"))
    .join("");
}

/**
 * Established TCP connections to `address`:`port` in a /proc/net/tcp table (the host's, for a microVM: its
 * SSH port's forwarder and the terminal connect from the host to the guest's sshd on the tenant's bridge).
 */
export function establishedTo(table: string, address: string, port: number): number {
  const remote = `${procNetAddress(address)}:${port.toString(16).toUpperCase().padStart(4, "0")}`;
  return table
    .split("\n")
    .slice(1)
    .filter((line) => {
      const [, , peer, state] = line.trim().split(/\s+/);
      return state === "01" && peer?.toUpperCase() === remote;
    }).length;
}

/** 127/8, ::1 or ::ffff:127/104 in /proc/net's notation (hex, 32-bit words in host byte order). */
function isLoopback(hex: string): boolean {
  const address = hex.toUpperCase();
  if (address.length === 8) return address.slice(6) === "7F";
  return (
    address === "00000000000000000000000001000000" ||
    (address.startsWith("0000000000000000FFFF0000") && address.slice(30) === "7F")
  );
}

/**
 * Established TCP connections to the sandbox's sshd from elsewhere, read from its network namespace on
 * the host (`/proc/<pid>/net/tcp*`): kernel state the tenant cannot write. A connection the sandbox makes
 * to its own sshd (loopback, or its own address) does not count, so an agent cannot keep itself awake.
 */
export async function sshSessions(docker: Docker, projectId: string): Promise<number> {
  let pid: number;
  try {
    pid = (await docker.getContainer(tenantNames(projectId).container).inspect()).State.Pid;
  } catch (error) {
    if (isNotFound(error)) return 0;
    throw error;
  }
  if (!(pid > 0)) return 0;
  const port = SANDBOX_SSH_PORT.toString(16).toUpperCase().padStart(4, "0");
  let count = 0;
  for (const table of ["tcp", "tcp6"]) {
    const text = await fs.readFile(`/proc/${pid}/net/${table}`, "utf8").catch(() => "");
    for (const line of text.split("\n").slice(1)) {
      const [, local, remote, state] = line.trim().split(/\s+/);
      if (state !== "01" || !local?.endsWith(`:${port}`) || !remote) continue; // 01: ESTABLISHED
      const [localAddress] = local.split(":");
      const [remoteAddress] = remote.split(":");
      if (!isLoopback(remoteAddress ?? "") && remoteAddress !== localAddress) count += 1;
    }
  }
  return count;
}

/**
 * The idle shutdown: every running project that opted in, with no live terminal, no SSH session and no
 * activity (created, started, connected, typed) for `idleMinutes`, gets the snapshot-with-stop operation a
 * user could ask for. An SSH session counts as activity now. One request per idle period (its idempotency
 * key is the last activity), never while another operation is pending on the project.
 */
export function idleShutdownJob(db: Database, options: IdleShutdownOptions): Job {
  return {
    name: "idle-shutdown",
    intervalMs: options.intervalMs,
    async run() {
      const { rows } = await db.query<Candidate>(
        `select p.id, greatest(p.created_at, t.updated_at, p.last_connection_at,
                  (select max(a.at) from terminal_audit a where a.project_id = p.id)) as last_active,
                case when t.spec->>'backend' = 'microvm' then t.subnet end as microvm_subnet
           from projects p join tenants t on t.project_id = p.id
          where t.state = 'running' and (t.spec->>'running')::boolean and p.idle_shutdown
            and not exists (select 1 from operations o where o.project_id = p.id
                             and o.state in ('pending', 'running'))`,
      );
      const stopped: string[] = [];
      const deadline = Date.now() - options.idleMinutes * 60_000;
      for (const { id, last_active, microvm_subnet: subnet } of rows) {
        if (options.liveTerminal(id)) continue;
        const sessions = subnet
          ? establishedTo(
              await fs.readFile("/proc/self/net/tcp", "utf8"),
              tenantAddresses(subnet).sandbox,
              SANDBOX_SSH_PORT,
            )
          : await sshSessions(options.docker, id);
        if (sessions > 0) {
          await db.query("update projects set last_connection_at = now() where id = $1", [id]);
          continue;
        }
        if (new Date(last_active).getTime() > deadline) continue;
        const key = `idle-shutdown-${id}-${new Date(last_active).getTime()}`;
        const { created } = await requestOperation(db, id, "snapshot", key, { running: false });
        if (created) stopped.push(id);
      }
      return { checked: rows.length, stopped };
    },
  };
}
