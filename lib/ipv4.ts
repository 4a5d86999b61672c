/** IPv4 helpers for validating and allocating bridge subnets (pure, no I/O). */

export function parseIPv4(address: string): number | undefined {
  const parts = address.split(".");
  if (parts.length !== 4) return undefined;
  let value = 0;
  for (const part of parts) {
    if (!/^(0|[1-9][0-9]{0,2})$/.test(part)) return undefined;
    const octet = Number(part);
    if (octet > 255) return undefined;
    value = value * 256 + octet;
  }
  return value;
}

export function formatIPv4(value: number): string {
  return [24, 16, 8, 0].map((shift) => Math.floor(value / 2 ** shift) % 256).join(".");
}

export interface Cidr {
  readonly network: number;
  readonly prefix: number;
}

/** Parses `a.b.c.d/n` and insists the address is the network address (no host bits set). */
export function parseCidr(cidr: string): Cidr | undefined {
  const [address, prefixText, ...rest] = cidr.split("/");
  if (address === undefined || prefixText === undefined || rest.length > 0) return undefined;
  if (!/^([0-9]|[12][0-9]|3[0-2])$/.test(prefixText)) return undefined;
  const network = parseIPv4(address);
  const prefix = Number(prefixText);
  if (network === undefined) return undefined;
  if (network % 2 ** (32 - prefix) !== 0) return undefined;
  return { network, prefix };
}

export function cidrContains(cidr: Cidr, address: number): boolean {
  const size = 2 ** (32 - cidr.prefix);
  return address >= cidr.network && address < cidr.network + size;
}
