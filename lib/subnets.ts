import { type Cidr, formatIPv4, parseCidr } from "./ipv4.js";

/** Thrown when every subnet of the pool is taken: the caller reports it on the operation. */
export class SubnetPoolExhaustedError extends Error {
  constructor(pool: string, size: number, onHost: readonly string[] = []) {
    super(
      `subnet pool ${pool} is exhausted: all ${size} /24 subnets are allocated` +
        (onHost.length > 0 ? ` or in use on the host (${onHost.join(", ")})` : ""),
    );
    this.name = "SubnetPoolExhaustedError";
  }
}

/** Whether two networks share an address. */
export const cidrsOverlap = (a: Cidr, b: Cidr) =>
  a.network < b.network + 2 ** (32 - b.prefix) && b.network < a.network + 2 ** (32 - a.prefix);

/**
 * The network an interface address lies in (`10.245.16.1/24` → `10.245.16.0/24`); undefined for anything
 * that is not an IPv4 address with a prefix.
 */
export function networkOf(addressWithPrefix: string): string | undefined {
  const [address, prefix] = addressWithPrefix.split("/");
  if (address === undefined || prefix === undefined || !/^\d{1,2}$/.test(prefix) || Number(prefix) > 32)
    return undefined;
  const base = parseCidr(`${address}/32`);
  if (!base) return undefined;
  const size = 2 ** (32 - Number(prefix));
  return `${formatIPv4(Math.floor(base.network / size) * size)}/${prefix}`;
}

/**
 * The lowest /24 of `pool` that no tenant holds and that overlaps nothing in use on the host. Pure: the
 * taken set comes from durable allocations (released only when a tenant's delete has finished), so a
 * restart allocates exactly as before and a freed subnet is never handed out while its old bridge or rules
 * may still exist. `onHost` is what the host already uses outside the platform's records (another Docker
 * network, a VPN's route, a bridge a killed process left): a /24 overlapping one of them would be refused
 * by the engine ("Pool overlaps") or route into the wrong place, so it is skipped, not failed on.
 */
export function allocateTenantSubnet(
  pool: string,
  taken: Iterable<string>,
  onHost: Iterable<string> = [],
): string {
  const cidr = parseCidr(pool);
  if (!cidr) throw new Error(`subnet pool ${pool} is not an IPv4 CIDR`);
  if (cidr.prefix > 24) throw new Error(`subnet pool ${pool} is smaller than one /24`);
  const own = new Set(taken);
  const used = [...own].flatMap((text) => parseCidr(text) ?? []);
  // The platform's own tenants' bridges are on the host too: only the rest is reported as the host's.
  const hostNetworks = [...new Set(onHost)].flatMap((text) => {
    const parsed = parseCidr(text);
    return parsed && !own.has(text) && cidrsOverlap(parsed, cidr) ? [{ text, parsed }] : [];
  });
  const count = 2 ** (24 - cidr.prefix);
  for (let i = 0; i < count; i++) {
    const candidate = { network: cidr.network + i * 256, prefix: 24 };
    if (used.some((u) => cidrsOverlap(u, candidate))) continue;
    if (hostNetworks.some((h) => cidrsOverlap(h.parsed, candidate))) continue;
    return `${formatIPv4(candidate.network)}/24`;
  }
  throw new SubnetPoolExhaustedError(
    pool,
    count,
    hostNetworks.map((h) => h.text),
  );
}

/** Gateway (.1, the host's side of the bridge, where Squid listens) and the sandbox's address (.2). */
export function tenantAddresses(subnet: string): { gateway: string; sandbox: string } {
  const cidr = parseCidr(subnet);
  if (!cidr || cidr.prefix !== 24) throw new Error(`tenant subnet ${subnet} must be a /24`);
  return { gateway: formatIPv4(cidr.network + 1), sandbox: formatIPv4(cidr.network + 2) };
}
