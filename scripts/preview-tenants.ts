// `npm run preview:tenants -- [--markdown FILE] [--json FILE] [--concurrency N]`: previews this
// checkout's tenant program against every tenant stack in the platform's state backend, each with the
// spec it recorded, and prints per tenant "unchanged" or the resources and properties that would change
// (the pull request's rollout preview; .github/workflows/ci.yml). Read-only; needs no database. The
// program is type-checked first: one that does not compile is reported before any stack is read.
import { currentProgramVersion, tenantProgramCompileErrors } from "../stacks/tenant/version.js";
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

const COMMAND = "preview:tenants";
const values = fleetArgs(COMMAND, REPORT_USAGE, REPORT_FLAGS);

runCommand(COMMAND, async () => {
  const concurrency = concurrencyOf(values);
  const { stack } = fleetConfig();
  const errors = await tenantProgramCompileErrors();
  if (errors) {
    const markdown = `## Tenant rollout preview\n\nThe tenant program does not compile; no stack was previewed.\n\n\`\`\`\n${errors}\n\`\`\`\n`;
    report(values, markdown, { compiled: false, errors });
    return EXIT.failed;
  }
  // Loaded only now: a program with a syntax error would fail at its import, before the check above.
  const { previewFleet, previewMarkdown } = await import("../runtime/tenants/fleet.js");
  const preview = await previewFleet(stack, currentProgramVersion(), concurrency, (line) =>
    console.error(line),
  );
  report(values, previewMarkdown(preview), { compiled: true, ...preview });
  return preview.tenants.some((tenant) => tenant.status === "failed") ? EXIT.failed : EXIT.ok;
});
