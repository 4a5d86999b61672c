import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { REPO_ROOT, toolchain } from "../lib/toolchain.js";

/** Rebuilds the plugin bundles (tens of ms) so tests never run a stale plugin. */
export default function setup(): void {
  // npm test builds them once before the runs it starts side by side (scripts/test.sh).
  if (process.env.AGENT_SANDBOX_PLUGINS_BUILT !== "1")
    execFileSync(process.execPath, ["scripts/build-plugins.mjs"], { cwd: REPO_ROOT, stdio: "ignore" });
  const { pulumiBin } = toolchain();
  if (!existsSync(pulumiBin)) {
    throw new Error(`Pulumi CLI missing at ${pulumiBin}: run the tests with 'npm test', which sets it up`);
  }
}
