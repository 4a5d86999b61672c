// Pulumi resource plugins for the runtime's check of the provider its kubernetes stacks would run
// (lib/kubernetes-provider.ts): `versioned` is a real plugin, Pulumi's own Node.js provider server
// (@pulumi/pulumi/provider), serving the engine's protocol and reporting the version it is given; the others are
// what a wrong file in the plugin's place does (exits, prints something else, never answers).
import { chmodSync, mkdirSync, writeFileSync } from "node:fs";
import * as path from "node:path";
import { REPO_ROOT } from "../../lib/toolchain.js";

export type PluginBehaviour =
  | { readonly versioned: string }
  | { readonly exits: number; readonly says: string }
  | { readonly prints: string }
  | { readonly hangs: true };

/**
 * Writes an executable plugin at `file` (its directory made); `startsLog`, when given, gets a line each time
 * it is started.
 */
export function writeResourcePlugin(file: string, behaviour: PluginBehaviour, startsLog?: string): void {
  mkdirSync(path.dirname(file), { recursive: true });
  const started = startsLog ? `echo started >> '${startsLog}'\n` : "";
  let body: string;
  if ("versioned" in behaviour) {
    // CommonJS from the checkout's root, where node_modules resolves @pulumi/pulumi.
    const program = `require("@pulumi/pulumi/provider").main({ version: ${JSON.stringify(behaviour.versioned)} }, process.argv.slice(1))`;
    body = `cd '${REPO_ROOT}' && exec '${process.execPath}' -e '${program}' "$@"`;
  } else if ("exits" in behaviour) body = `echo '${behaviour.says}' >&2\nexit ${behaviour.exits}`;
  else if ("prints" in behaviour) body = `echo '${behaviour.prints}'\nexec sleep 60`;
  else body = "exec sleep 60";
  writeFileSync(file, `#!/bin/sh\n${started}${body}\n`);
  chmodSync(file, 0o755);
}
