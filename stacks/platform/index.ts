// The platform stack's program (Pulumi.yaml `main`): `pulumi up -s <stack>` builds the platform on the
// stack's target. The config is read through the engine and validated before any resource is declared,
// so a malformed value fails the preview naming its key (`agent-sandbox:host.squidPort: ...`).
import * as pulumi from "@pulumi/pulumi";
import { parseStackConfig, StackConfigError, type StackConfig } from "../config.js";
import { localPlatform } from "./local.js";
import type { PlatformOutputs } from "./outputs.js";

/** The engine hands config values as text; objects and numbers arrive JSON-encoded. */
function decode(value: string): unknown {
  try {
    return JSON.parse(value);
  } catch {
    return value;
  }
}

/**
 * The Node.js SDK's exit code for "the error was reported to the engine already" (@pulumi/pulumi cmd/run):
 * the engine then shows that message alone, without a stack trace of this program.
 */
const EXITED_AFTER_REPORTING_ERROR = 32;

async function stackConfig(): Promise<StackConfig> {
  const values = Object.fromEntries(
    Object.entries(pulumi.runtime.allConfig()).map(([key, value]) => [key, decode(value)]),
  );
  try {
    return parseStackConfig(values, `Pulumi.${pulumi.getStack()}.yaml`);
  } catch (error) {
    if (!(error instanceof StackConfigError)) throw error;
    // Report and exit now: a program that throws keeps its engine connections open until gRPC gives up
    // on them (~20 s here) before the engine hears of the error.
    await pulumi.log.error(error.message);
    process.exit(EXITED_AFTER_REPORTING_ERROR);
  }
}

async function platform(config: StackConfig): Promise<PlatformOutputs> {
  switch (config.target) {
    case "local":
      return localPlatform(config);
    case "gcp": {
      // Loaded only for gcp: the local target needs none of the cloud SDKs.
      const { gcpPlatform } = await import("./gcp.js");
      return gcpPlatform(config);
    }
    default: {
      const target: never = config.target;
      throw new pulumi.RunError(`agent-sandbox:target: unknown target ${String(target)}`);
    }
  }
}

const outputs = await platform(await stackConfig());

export const apiUrl = outputs.apiUrl;
export const terminalUrlBase = outputs.terminalUrlBase;
export const registry = outputs.registry;
export const bucket = outputs.bucket;
export const stateBackendUrl = outputs.stateBackendUrl;
/** gcp: the host's static address, which `gcp.domain` and `*.<domain>` must point at. */
export const hostAddress = outputs.hostAddress;
