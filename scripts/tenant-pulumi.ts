// `npm run tenant-pulumi -- <project id> <pulumi arguments>`: the pinned Pulumi CLI on one tenant's stack, as
// its operations run it: in the tenant's work directory, on the platform's state backend, with the passphrase
// and this process's key service (a local stack's secrets are sealed by it: docs/tenant-stacks.md#the-stacks-key).
// `--stack tenant-<id>` is added. Exit: the CLI's own; 2 for a usage error, 1 for a stack that does not exist.
import { spawn } from "node:child_process";
import * as os from "node:os";
import { tenantNames } from "../components/tenant/names.js";
import { toolchain } from "../lib/toolchain.js";
import { localWorkspace, tenantStackExists } from "../runtime/tenants/stack.js";
import { EXIT, fleetConfig, runCommand } from "./fleet-cli.js";

const COMMAND = "tenant-pulumi";
const USAGE = `usage: npm run ${COMMAND} -- <project id> <pulumi arguments> (for example: stack export)`;

runCommand(COMMAND, async () => {
  const [projectId, ...args] = process.argv.slice(2);
  if (!projectId || projectId.startsWith("-") || args.length === 0) {
    console.error(
      `${COMMAND}: ${!projectId || projectId.startsWith("-") ? "no project id" : "no pulumi arguments"}`,
    );
    console.error(USAGE);
    return EXIT.usage;
  }
  const stackName = tenantNames(projectId).stack;
  if (args.includes("--stack") || args.some((arg) => arg.startsWith("--stack=") || arg === "-s")) {
    console.error(`${COMMAND}: the stack is the project's (${stackName}); leave out --stack`);
    return EXIT.usage;
  }
  // Without the shared provider: an engine this command runs starts its plugin if it needs one, and an
  // export or a config read (what an operator runs most) needs none, so none is started for them.
  const options = { ...fleetConfig().stack, sharedProvider: false };
  const workspace = await localWorkspace(projectId, async () => undefined, options);
  if (!(await tenantStackExists(projectId, options, workspace))) {
    console.error(`${COMMAND}: no stack ${stackName} in ${options.backendUrl}`);
    return EXIT.failed;
  }
  const chain = toolchain();
  const child = spawn(chain.pulumiBin, [...args, "--stack", stackName], {
    cwd: workspace.workDir,
    env: { ...process.env, ...workspace.envVars },
    stdio: "inherit",
  });
  return new Promise<number>((resolve, reject) => {
    child.once("error", reject);
    child.once("exit", (code, signal) =>
      resolve(code ?? (signal ? 128 + os.constants.signals[signal] : EXIT.failed)),
    );
  });
});
