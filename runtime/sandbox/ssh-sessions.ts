// Who is connected to a sandbox's SSH server from elsewhere: kernel state the tenant cannot write, read on
// the host. A session is activity (the idle shutdown keeps such a sandbox running).
import { promises as fs } from "node:fs";
import type Docker from "dockerode";
import { tenantNames } from "../../components/tenant/names.js";
import { SANDBOX_SSH_PORT } from "../../lib/constants.js";
import { isNotFound } from "../../lib/docker-client.js";

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
