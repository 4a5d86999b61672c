// `npm run rollout -- [--canary PROJECT] [--share 0.25] [--all] [--dry-run] [--markdown FILE] [--json FILE]`:
// applies this checkout's tenant program to the tenants not on it yet, in waves: one canary, then the
// share of the rest, then the rest; the first wave with a failure stops it. Each apply is an `update`
// operation in the platform's queue run by this process (runtime/reconciler/rollout.ts). Needs the platform's
// database: DATABASE_URL (Postgres), or the embedded one while the runtime is stopped.
import * as path from "node:path";
import { currentProgramVersion, tenantProgramCompileErrors } from "../stacks/tenant/version.js";
import { EXIT, fleetArgs, fleetConfig, report, runCommand } from "./fleet-cli.js";

const COMMAND = "rollout";
const values = fleetArgs(
  COMMAND,
  "[--canary PROJECT] [--share FRACTION] [--all] [--dry-run] [--markdown FILE] [--json FILE]",
  {
    canary: { type: "string" },
    share: { type: "string", default: "0.25" },
    all: { type: "boolean", default: false },
    "dry-run": { type: "boolean", default: false },
    markdown: { type: "string" },
    json: { type: "string" },
  },
);

runCommand(COMMAND, async () => {
  const share = Number(values.share);
  if (!(share > 0 && share <= 1))
    throw new Error(`--share must be a fraction in (0, 1], got ${values.share}`);
  const { config } = fleetConfig();
  const errors = await tenantProgramCompileErrors();
  if (errors) {
    console.error(`${COMMAND}: the tenant program does not compile; no tenant was touched:\n${errors}`);
    return EXIT.failed;
  }
  const { openDatabase } = await import("../runtime/store/db.js");
  const { migrate } = await import("../runtime/store/migrations.js");
  const { reconcilerOptions } = await import("../runtime/reconciler/options.js");
  const { planRollout, rollout, rolloutMarkdown } = await import("../runtime/reconciler/rollout.js");
  const db = await openDatabase({
    url: process.env.DATABASE_URL || undefined,
    dataDir: path.join(config.host.dataDir, "db"),
  });
  try {
    await migrate(db);
    const program = currentProgramVersion();
    const plan = { canary: values.canary, share, all: values.all };
    if (values["dry-run"]) {
      const waves = await planRollout(db, program, plan);
      const lines = waves.length
        ? waves.map((wave, i) => `- ${i === 0 ? "canary" : `wave ${i + 1}`}: ${wave.join(", ")}`)
        : [`Nothing to roll out: no tenant is on another program than \`${program.version}\`.`];
      report(values, `## Tenant rollout plan (dry run)\n\n${lines.join("\n")}\n`, { program, waves });
      return EXIT.ok;
    }
    const result = await rollout(db, {
      ...plan,
      program,
      reconciler: reconcilerOptions(config),
      log: (line) => console.error(line),
    });
    report(values, rolloutMarkdown(result), result);
    return result.completed ? EXIT.ok : EXIT.failed;
  } finally {
    await db.close();
  }
});
