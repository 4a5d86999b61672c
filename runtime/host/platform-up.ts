// Entry point (scripts/lib.sh prepare_local_platform): `pulumi up --refresh` of the platform stack's local
// target on this machine, so the host baseline is a reconciled stack: a second run changes nothing, and
// a hand-made change to the host (a flushed chain, an edited squid.conf) is put back.
import * as path from "node:path";
import { statePassphrase } from "../secrets.js";
import { loadStackConfig } from "../stack-file.js";
import { PlatformStack } from "./platform-stack.js";

try {
  const { file, config } = loadStackConfig();
  const stackName = process.env.AGENT_SANDBOX_STACK ?? "dev";
  if (config.target !== "local") {
    throw new Error(
      `${file} has agent-sandbox:target=${config.target}; only the local target is applied here`,
    );
  }
  // The platform stack's own state, beside (not in) the tenant stacks' backend.
  const platformDir = path.join(config.host.dataDir, "platform");
  const stack = new PlatformStack({
    stack: stackName,
    configFile: file,
    stateDir: path.join(platformDir, "state"),
    workDir: path.join(platformDir, "work"),
    passphrase: statePassphrase(config.host.dataDir),
  });
  const started = Date.now();
  await stack.prepare();
  // Another checkout's `npm test` on this machine may be updating the same stack: wait for its lock.
  let result = await stack.up({ refresh: true });
  for (let attempt = 0; attempt < 36 && /currently locked/.test(result.stdout + result.stderr); attempt++) {
    if (attempt === 0) console.log("    the stack is locked by another update; waiting for it");
    await new Promise((resolve) => setTimeout(resolve, 5_000));
    result = await stack.up({ refresh: true });
  }
  const summary = result.stdout.slice(result.stdout.lastIndexOf("Resources:")).trim();
  if (result.code !== 0) {
    throw new Error(
      `pulumi up of stack ${stackName} failed:\n${result.stdout.slice(-6000)}\n${result.stderr}`,
    );
  }
  for (const line of summary.split("\n")) console.log(`    ${line}`);
  console.log(`    state: file://${path.join(platformDir, "state")} (${Date.now() - started} ms)`);
} catch (error) {
  console.error(`\nerror: ${(error as Error).message}`);
  process.exitCode = 1;
}
