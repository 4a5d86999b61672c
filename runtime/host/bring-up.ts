// Entry point: converges this machine to the host baseline of the configured stack and reports it.
import { loadStackConfig } from "../stack-file.js";
import { bringUpHost, hostBaseline } from "./baseline.js";

try {
  const { file, config } = loadStackConfig();
  if (config.target !== "local") {
    throw new Error(
      `${file} has agent-sandbox:target=${config.target}; only the local target is brought up here`,
    );
  }
  const checks = await bringUpHost(hostBaseline(config.host), (line) => console.log(`    ${line}`));
  for (const check of checks) console.log(`    ok ${check.name.padEnd(17)} ${check.detail}`);
} catch (error) {
  console.error(`\nerror: ${(error as Error).message}`);
  process.exitCode = 1;
}
