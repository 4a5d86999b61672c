import { formatIPv4, parseCidr } from "./ipv4.js";

/** Thrown when every subnet of the pool is taken: the caller reports it on the operation. */
export class SubnetPoolExhaustedError extends Error {
  constructor(pool: string, size: number) {
    super(`subnet pool ${pool} is exhausted: all ${size} /24 subnets are allocated`);
    this.name = "SubnetPoolExhaustedError";
  }
}

/**
 * The lowest /24 of `pool` that no tenant holds. Pure: the taken set comes from durable allocations
 * (released only when a tenant's delete has finished), so a restart allocates exactly as before and a
 * freed subnet is never handed out while its old bridge or rules may still exist.
 */
export function allocateTenantSubnet(pool: string, taken: Iterable<string>): string {
  const cidr = parseCidr(pool);
  if (!cidr) throw new Error(`subnet pool ${pool} is not an IPv4 CIDR`);
  if (cidr.prefix > 24) throw new Error(`subnet pool ${pool} is smaller than one /24`);
  const used = new Set(taken);
  const count = 2 ** (24 - cidr.prefix);
  for (let i = 0; i < count; i++) {
    const subnet = `${formatIPv4(cidr.network + i * 256)}/24`;
    if (!used.has(subnet)) return subnet;
  }
  throw new SubnetPoolExhaustedError(pool, count);
}

/** Gateway (.1, the host's side of the bridge, where Squid listens) and the sandbox's address (.2). */
export function tenantAddresses(subnet: string): { gateway: string; sandbox: string } {
  const cidr = parseCidr(subnet);
  if (!cidr || cidr.prefix !== 24) throw new Error(`tenant subnet ${subnet} must be a /24`);
  return { gateway: formatIPv4(cidr.network + 1), sandbox: formatIPv4(cidr.network + 2) };
}
