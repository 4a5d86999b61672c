import { execFile } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

/** The checkout's root (this file is `lib/toolchain.ts`). */
export const REPO_ROOT = fileURLToPath(new URL("..", import.meta.url));

/** Where the toolchain and other build products are cached, outside the repo (scripts/lib.sh agrees). */
export function cacheRoot(env: NodeJS.ProcessEnv = process.env): string {
  return (
    env.AGENT_SANDBOX_CACHE ??
    path.join(env.XDG_CACHE_HOME ?? path.join(os.homedir(), ".cache"), "agent-sandbox")
  );
}

/** The pinned CLI version: the wrapper module's requirement on `pkg/v3` (scripts/toolchain/go.mod). */
export function pinnedPulumiVersion(): string {
  const goMod = readFileSync(path.join(REPO_ROOT, "scripts/toolchain/go.mod"), "utf8");
  const match = /^require github\.com\/pulumi\/pulumi\/pkg\/v3 v([0-9.]+)$/m.exec(goMod);
  if (!match?.[1]) throw new Error("scripts/toolchain/go.mod does not pin github.com/pulumi/pulumi/pkg/v3");
  return match[1];
}

export interface Toolchain {
  /** Pass as `PulumiCommand.get({ root })`; the CLI is `${pulumiRoot}/bin/pulumi`. */
  readonly pulumiRoot: string;
  readonly pulumiBin: string;
  readonly pulumiVersion: string;
  /** Environment for the engine: plugins on PATH, no plugin downloads, no update checks. */
  readonly env: Record<string, string>;
}

export function toolchain(env: NodeJS.ProcessEnv = process.env): Toolchain {
  const pulumiVersion = pinnedPulumiVersion();
  const pulumiRoot = path.join(cacheRoot(env), `pulumi-v${pulumiVersion}`);
  const binDirs = [path.join(pulumiRoot, "bin"), path.join(REPO_ROOT, "bin")];
  return {
    pulumiRoot,
    pulumiBin: path.join(pulumiRoot, "bin", "pulumi"),
    pulumiVersion,
    env: {
      PATH: [...binDirs, env.PATH ?? "/usr/local/bin:/usr/bin:/bin"].join(path.delimiter),
      // Plugins are ours (on PATH) or absent: a missing one must fail at once, not try a download.
      PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION: "true",
      PULUMI_SKIP_UPDATE_CHECK: "true",
    },
  };
}

/** Runs `pulumi version`; throws naming the path and the fix when the CLI is missing. */
export async function pulumiCliVersion(chain: Toolchain = toolchain()): Promise<string> {
  if (!existsSync(chain.pulumiBin)) {
    throw new Error(`Pulumi CLI not found at ${chain.pulumiBin}; run 'npm run setup'`);
  }
  const { stdout } = await promisify(execFile)(chain.pulumiBin, ["version"], { timeout: 10_000 });
  return stdout.trim();
}
