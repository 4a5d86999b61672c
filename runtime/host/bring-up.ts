// Entry point: converges this machine to the host baseline of the configured stack and reports it.
// `--only firewall,squid` limits it to those parts (the GCP host's systemd units use this).
import { loadStackConfig } from "../stack-file.js";
import { bringUpHost, hostBaseline } from "./baseline.js";

try {
  const { file, config } = loadStackConfig();
  if (config.target !== "local") {
    throw new Error(
      `${file} has agent-sandbox:target=${config.target}; only the local target is brought up here`,
    );
  }
  const parts = hostBaseline(config.host);
  const onlyAt = process.argv.indexOf("--only");
  const only = onlyAt >= 0 ? (process.argv[onlyAt + 1] ?? "").split(",").filter(Boolean) : undefined;
  const unknown = (only ?? []).filter((name) => !parts.some((part) => part.name === name));
  if (only?.length === 0 || unknown.length > 0) {
    throw new Error(`--only takes part names from: ${parts.map((part) => part.name).join(", ")}`);
  }
  const selected = only ? parts.filter((part) => only.includes(part.name)) : parts;
  const checks = await bringUpHost(selected, (line) => console.log(`    ${line}`));
  for (const check of checks) console.log(`    ok ${check.name.padEnd(17)} ${check.detail}`);
} catch (error) {
  console.error(`\nerror: ${(error as Error).message}`);
  process.exitCode = 1;
}
