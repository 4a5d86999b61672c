import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { REPO_ROOT, toolchain } from "../lib/toolchain.js";

/** Rebuilds the plugin bundles (tens of ms) so tests never run a stale plugin. */
export default function setup(): void {
  execFileSync(process.execPath, ["scripts/build-plugins.mjs"], { cwd: REPO_ROOT, stdio: "ignore" });
  const { pulumiBin } = toolchain();
  if (!existsSync(pulumiBin)) {
    throw new Error(`Pulumi CLI missing at ${pulumiBin}: run the tests with 'npm test', which sets it up`);
  }
}
