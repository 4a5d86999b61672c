import { existsSync } from "node:fs";
import { toolchain } from "../lib/toolchain.js";
import { buildBundles } from "../scripts/bundles.js";
import { boundSharedRegistry } from "./helpers/shared-registry.js";

/** Rebuilds the bundles (under a second) so tests never run a stale plugin or runtime. */
export default async function setup(): Promise<void> {
  await buildBundles();
  await boundSharedRegistry();
  const { pulumiBin } = toolchain();
  if (!existsSync(pulumiBin)) {
    throw new Error(`Pulumi CLI missing at ${pulumiBin}: run the tests with 'npm test', which sets it up`);
  }
}
