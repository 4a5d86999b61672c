import * as path from "node:path";
import { HostBaseline } from "../../components/host/host-baseline.js";
import type { StackConfig } from "../config.js";
import type { PlatformOutputs } from "./outputs.js";

/**
 * The `local` target: the sandbox host's baseline applied to this machine (the same component and the
 * same rendered configuration the GCP VM gets), so `npm run local` runs on a reconciled stack too.
 */
export function localPlatform(config: StackConfig): PlatformOutputs {
  const baseline = new HostBaseline("host", {
    host: config.host,
    runtimeApi: `127.0.0.1:${config.runtime.apiPort}`,
  });
  const { publicHost, apiPort, terminalPort } = config.runtime;
  return {
    apiUrl: `http://${publicHost}:${apiPort}`,
    terminalUrlBase: `ws://${publicHost}:${terminalPort}/terminal`,
    registry: baseline.registry,
    bucket: baseline.backupDir,
    stateBackendUrl: `file://${path.join(config.host.dataDir, "state")}`,
  };
}
