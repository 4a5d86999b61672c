import * as path from "node:path";
import { readStackConfigFile, type StackConfig } from "../stacks/config.js";
import { REPO_ROOT } from "./toolchain.js";

/** The stack whose `Pulumi.<stack>.yaml` configures this process: `AGENT_SANDBOX_STACK`, default `dev`. */
export function loadStackConfig(env: NodeJS.ProcessEnv = process.env): { stack: string; file: string; config: StackConfig } {
  const stack = env.AGENT_SANDBOX_STACK ?? "dev";
  if (!/^[A-Za-z0-9_.-]+$/.test(stack)) throw new Error(`AGENT_SANDBOX_STACK=${stack} is not a valid stack name`);
  const file = path.join(REPO_ROOT, `Pulumi.${stack}.yaml`);
  return { stack, file, config: readStackConfigFile(file) };
}
