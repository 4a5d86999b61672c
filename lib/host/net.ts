import Docker from "dockerode";
import { BlockList, connect, createServer } from "node:net";
import { networkInterfaces } from "node:os";
import { networkOf } from "../subnets.js";

/** Resolves when something accepts TCP connections on host:port; rejects after `timeoutMs`. */
export function tcpReachable(host: string, port: number, timeoutMs = 1_000): Promise<void> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host, port });
    const fail = (why: string) => {
      socket.destroy();
      reject(new Error(`nothing accepts connections on ${host}:${port} (${why})`));
    };
    socket.setTimeout(timeoutMs, () => fail("timed out"));
    socket.once("error", (error) => fail(error.message));
    socket.once("connect", () => {
      socket.end();
      resolve();
    });
  });
}

/** Ranges Squid's tenant rules already refuse (to_localhost, to_linklocal, to_private in squid.conf). */
const REFUSED_ANYWAY = (() => {
  const list = new BlockList();
  for (const [network, prefix] of [
    ["0.0.0.0", 8],
    ["10.0.0.0", 8],
    ["100.64.0.0", 10],
    ["127.0.0.0", 8],
    ["169.254.0.0", 16],
    ["172.16.0.0", 12],
    ["192.0.0.0", 24],
    ["192.168.0.0", 16],
    ["224.0.0.0", 4],
    ["240.0.0.0", 4],
  ] as const)
    list.addSubnet(network, prefix, "ipv4");
  for (const [network, prefix] of [
    ["::1", 128],
    ["fc00::", 7],
    ["fe80::", 10],
  ] as const)
    list.addSubnet(network, prefix, "ipv6");
  return list;
})();

/**
 * This host's own addresses outside the ranges the proxy refuses anyway (a public or documentation address
 * on an interface), which an allowlisted name must not lead to either: Squid would connect to the host's
 * own services. Read when the proxy's config is rendered on the host.
 */
export function hostPublicAddresses(): string[] {
  const found = Object.values(networkInterfaces())
    .flat()
    .filter((i) => i !== undefined)
    .filter((i) => !REFUSED_ANYWAY.check(i.address, i.family === "IPv6" ? "ipv6" : "ipv4"))
    .map((i) => i.address);
  return [...new Set(found)].sort();
}

/** What the host already uses that the platform's own records do not show (see `allocateTenantSubnet`). */
export interface HostUsage {
  /** IPv4 networks in use on the host: its interfaces' (bridges and VPNs included) and the engine's. */
  networks(): Promise<string[]>;
  /** Whether something on the host holds TCP `port` (a listener, a container's published port). */
  portInUse(port: number): Promise<boolean>;
}

/** The IPv4 networks of this host's interfaces, down ones included (a Docker bridge without containers). */
export function interfaceNetworks(): string[] {
  const found = Object.values(networkInterfaces())
    .flat()
    .flatMap((i) => (i && i.family === "IPv4" && i.cidr ? [networkOf(i.cidr)] : []))
    .filter((cidr): cidr is string => cidr !== undefined && !cidr.startsWith("127."));
  return [...new Set(found)].sort();
}

/**
 * This host's usage: its interfaces' networks, the networks the engine on `dockerSocket` has allocated (a
 * network whose bridge is not up yet still holds its pool), and a bind probe for ports. An engine that
 * does not answer adds nothing: the create that follows reports it.
 */
export function engineHostUsage(dockerSocket: string): HostUsage {
  const docker = new Docker({ socketPath: dockerSocket, timeout: 5_000 });
  return {
    async networks() {
      const engine = await docker.listNetworks().catch(() => []);
      const subnets = engine.flatMap((n) => (n.IPAM?.Config ?? []).map((c) => c.Subnet ?? ""));
      return [...new Set([...interfaceNetworks(), ...subnets.filter((s) => s.includes("."))])].sort();
    },
    portInUse: (port) =>
      new Promise((resolve) => {
        const server = createServer();
        server.once("error", () => resolve(true));
        server.listen({ port, host: "0.0.0.0", exclusive: true }, () => server.close(() => resolve(false)));
      }),
  };
}
