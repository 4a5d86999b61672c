import * as path from "node:path";
import { readStackConfigFile, type StackConfig } from "../stacks/config.js";
import { REPO_ROOT } from "../lib/toolchain.js";

/**
 * The stack file that configures this process: `AGENT_SANDBOX_CONFIG` (a path) if set, else
 * `Pulumi.<AGENT_SANDBOX_STACK>.yaml` in the checkout, the stack defaulting to `dev`.
 */
export function loadStackConfig(env: NodeJS.ProcessEnv = process.env): { file: string; config: StackConfig } {
  let file = env.AGENT_SANDBOX_CONFIG;
  if (!file) {
    const stack = env.AGENT_SANDBOX_STACK ?? "dev";
    if (!/^[A-Za-z0-9_.-]+$/.test(stack))
      throw new Error(`AGENT_SANDBOX_STACK=${stack} is not a valid stack name`);
    file = path.join(REPO_ROOT, `Pulumi.${stack}.yaml`);
  }
  return { file, config: readStackConfigFile(file) };
}
