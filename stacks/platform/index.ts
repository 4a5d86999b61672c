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

function stackConfig(): StackConfig {
  const values = Object.fromEntries(
    Object.entries(pulumi.runtime.allConfig()).map(([key, value]) => [key, decode(value)]),
  );
  try {
    return parseStackConfig(values, `Pulumi.${pulumi.getStack()}.yaml`);
  } catch (error) {
    // RunError: the message alone, without a stack trace of this program.
    if (error instanceof StackConfigError) throw new pulumi.RunError(error.message);
    throw error;
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

const outputs = await platform(stackConfig());

export const apiUrl = outputs.apiUrl;
export const terminalUrlBase = outputs.terminalUrlBase;
export const registry = outputs.registry;
export const bucket = outputs.bucket;
export const stateBackendUrl = outputs.stateBackendUrl;
