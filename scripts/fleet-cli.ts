// What the fleet commands (preview:tenants, drift:check, rollout) share: strict flags whose errors name
// the flag, the platform config they act on, and their reports written as Markdown and JSON.
import { writeFileSync } from "node:fs";
import { parseArgs, type ParseArgsConfig } from "node:util";
import { loadStackConfig } from "../runtime/stack-file.js";
import { tenantStackOptions } from "../runtime/tenants/config.js";

/** Exit codes: 0 ran (and found nothing wrong), 1 failed, 2 bad usage; drift:check adds 3 (drifted). */
export const EXIT = { ok: 0, failed: 1, usage: 2, drifted: 3 } as const;

type Options = NonNullable<ParseArgsConfig["options"]>;
type Flags<T extends Options> = ReturnType<typeof parseArgs<{ options: T; strict: true }>>["values"];

/** The command's flags, strictly: an unknown flag or a missing value ends the command with usage help. */
export function fleetArgs<const T extends Options>(command: string, usage: string, options: T): Flags<T> {
  let values: Record<string, unknown>;
  try {
    values = parseArgs({ options: { ...options, help: { type: "boolean" } }, strict: true }).values;
  } catch (error) {
    console.error(`${command}: ${(error as Error).message}\nusage: npm run ${command} -- ${usage}`);
    process.exit(EXIT.usage);
  }
  if (values.help) {
    console.log(`usage: npm run ${command} -- ${usage}`);
    process.exit(EXIT.ok);
  }
  return values as unknown as Flags<T>;
}

/** The flags of the read-only fleet commands (preview:tenants, drift:check). */
export const REPORT_FLAGS = {
  markdown: { type: "string" },
  json: { type: "string" },
  concurrency: { type: "string", default: "4" },
} as const;
export const REPORT_USAGE = "[--markdown FILE] [--json FILE] [--concurrency N]";

/** `--concurrency`: stacks worked on at once. */
export function concurrencyOf(values: { concurrency?: string }): number {
  const concurrency = Number(values.concurrency ?? "4");
  if (!Number.isInteger(concurrency) || concurrency < 1)
    throw new Error(`--concurrency must be a whole number >= 1, got ${values.concurrency}`);
  return concurrency;
}

/** The platform config (AGENT_SANDBOX_CONFIG or Pulumi.<AGENT_SANDBOX_STACK|dev>.yaml) and its stacks. */
export function fleetConfig() {
  const { config, file } = loadStackConfig();
  return { config, file, stack: tenantStackOptions(config) };
}

/** Prints `markdown` and writes the reports the flags ask for. */
export function report(values: { markdown?: string; json?: string }, markdown: string, json: unknown) {
  process.stdout.write(markdown);
  if (values.markdown) writeFileSync(values.markdown, markdown);
  if (values.json) writeFileSync(values.json, `${JSON.stringify(json, null, 2)}\n`);
}

/** Runs `main`; an error (a config that does not parse, an unreachable backend) is one line and exit 1. */
export function runCommand(command: string, main: () => Promise<number>): void {
  main().then(
    (code) => process.exit(code),
    (error: Error) => {
      console.error(`${command}: ${error.message}`);
      process.exit(EXIT.failed);
    },
  );
}
