// `npm run preview:platform -- [--markdown FILE] [--json FILE] [--policy-pack DIR]`: `pulumi preview --diff`
// of the platform stack (AGENT_SANDBOX_CONFIG or Pulumi.<AGENT_SANDBOX_STACK|dev>.yaml, stack
// AGENT_SANDBOX_STACK or dev) with the policy pack (the checkout's policy/ unless --policy-pack), printed as
// Markdown per resource and per policy violation (the pull request's platform preview,
// .github/workflows/ci.yml). Exit 0: the preview ran; 1: it failed, or a mandatory policy failed it.
import * as path from "node:path";
import { REPO_ROOT } from "../lib/toolchain.js";
import { platformPreviewMarkdown, previewPlatform } from "../runtime/host/platform-preview.js";
import { loadStackConfig } from "../runtime/stack-file.js";
import { EXIT, fleetArgs, report, runCommand } from "./fleet-cli.js";

const COMMAND = "preview:platform";
const values = fleetArgs(COMMAND, "[--markdown FILE] [--json FILE] [--policy-pack DIR]", {
  markdown: { type: "string" },
  json: { type: "string" },
  "policy-pack": { type: "string", default: path.join(REPO_ROOT, "policy") },
});

runCommand(COMMAND, async () => {
  const { file, config } = loadStackConfig();
  const preview = await previewPlatform({
    stack: process.env.AGENT_SANDBOX_STACK ?? "dev",
    configFile: file,
    config,
    policyPack: path.resolve(values["policy-pack"]),
  });
  report(values, platformPreviewMarkdown(preview), preview);
  if (preview.status !== "ok") console.error(`${COMMAND}: ${preview.error ?? "a mandatory policy failed"}`);
  return preview.status === "ok" ? EXIT.ok : EXIT.failed;
});
