import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { promisify } from "node:util";

const exec = promisify(execFile);

/** A Linux bridge of a test's own, addressed as a tenant's bridge is; `remove` takes it down again. */
export interface TestBridge {
  readonly name: string;
  remove(): Promise<void>;
}

/**
 * Makes a bridge (`mvb<hex>`) holding `address` (`10.251.77.1/24`), up. A bridge a killed run of the same
 * test left with that address is removed first, with the taps on it: its route came first, and every guest
 * on the new bridge answered 'No route to host' (CI's microvm.test.ts, session 30).
 */
export async function testBridge(address: string): Promise<TestBridge> {
  const ip = address.split("/")[0]!;
  for (const line of (await exec("ip", ["-o", "-4", "addr", "show"])).stdout.split("\n")) {
    const [, leftover, held] = /^\d+:\s+(mvb[0-9a-f]{8})\s+inet ([\d.]+)\//.exec(line) ?? [];
    if (!leftover || held !== ip) continue;
    const taps = (await exec("ip", ["-o", "link", "show", "master", leftover])).stdout;
    for (const [, tap] of taps.matchAll(/^\d+:\s+([^:@\s]+)/gm))
      await exec("ip", ["link", "del", tap!]).catch(() => undefined);
    await exec("ip", ["link", "del", leftover]);
  }
  const name = `mvb${randomBytes(4).toString("hex")}`;
  await exec("ip", ["link", "add", name, "type", "bridge"]);
  const remove = async () => void (await exec("ip", ["link", "del", name]).catch(() => undefined));
  try {
    await exec("ip", ["addr", "add", address, "dev", name]);
    await exec("ip", ["link", "set", name, "up"]);
  } catch (error) {
    await remove();
    throw error;
  }
  return { name, remove };
}
