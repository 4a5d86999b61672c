import { BlockList, connect } from "node:net";
import { networkInterfaces } from "node:os";

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
