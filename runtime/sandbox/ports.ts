// The ports listening inside a sandbox, for the dev-server front door to route to: read by `ss`
// in the sandbox's network namespace, as the agent (process names need root, and are not given).

export interface ListeningPort {
  readonly port: number;
  /** The address it is bound to (`0.0.0.0`, `::`, `127.0.0.1`...). */
  readonly address: string;
  readonly protocol: "tcp" | "udp";
}

/** `ss -H -l -n -t -u` lines: `tcp LISTEN 0 128 0.0.0.0:8080 0.0.0.0:*`; the same port on v4 and v6 twice. */
export function parseListening(output: string): ListeningPort[] {
  const ports: ListeningPort[] = [];
  for (const line of output.split("\n")) {
    const fields = line.trim().split(/\s+/);
    if (fields.length < 5) continue;
    const [netid, , , , local] = fields as [string, string, string, string, string];
    const at = local.lastIndexOf(":");
    const port = Number(local.slice(at + 1));
    if (!Number.isInteger(port) || port <= 0 || (netid !== "tcp" && netid !== "udp")) continue;
    // `[::]:8080`, `0.0.0.0%lo:53`: the address without brackets or interface.
    const address = local
      .slice(0, at)
      .replace(/^\[|\]$/g, "")
      .replace(/%.*$/, "");
    ports.push({ port, address, protocol: netid });
  }
  return ports.sort(
    (a, b) => a.port - b.port || (a.address < b.address ? -1 : a.address > b.address ? 1 : 0),
  );
}
