// `npm run drift:check -- [--markdown FILE] [--json FILE] [--concurrency N]`: a refresh preview of every
// tenant stack in the platform's state backend, reporting each drifted resource and the properties that
// differ (or "deleted out of band"). Changes nothing; needs no database (the scheduled workflow runs it
// against the production state backend; the runtime's own sweep records the same per project).
// Exit 0: all clean; 3: drift found; 1: a stack could not be checked.
import {
  concurrencyOf,
  EXIT,
  fleetArgs,
  fleetConfig,
  report,
  REPORT_FLAGS,
  REPORT_USAGE,
  runCommand,
} from "./fleet-cli.js";
import { checkFleetDrift, driftMarkdown } from "../runtime/tenants/fleet.js";

const COMMAND = "drift:check";
const values = fleetArgs(COMMAND, REPORT_USAGE, REPORT_FLAGS);

runCommand(COMMAND, async () => {
  const concurrency = concurrencyOf(values);
  const checks = await checkFleetDrift(fleetConfig().stack, concurrency, (line) => console.error(line));
  report(values, driftMarkdown(checks), { tenants: checks });
  if (checks.some((check) => check.status === "failed")) return EXIT.failed;
  return checks.some((check) => check.status === "drifted") ? EXIT.drifted : EXIT.ok;
});
