import * as path from "node:path";
import { z } from "zod";
import {
  type RegistryInstance,
  registryServing,
  runRegistry,
  stopRegistry,
} from "../../lib/host/registry.js";
import { changedKeys, type ResourceHandler } from "../handler.js";
import { fileSha256 } from "./squid-service.js";

const absolutePath = z.string().refine((p) => path.isAbsolute(p) && path.normalize(p) === p, {
  message: "must be an absolute, normalized path",
});

/**
 * The local image registry (Debian's docker-registry) serving from its config file on loopback; a
 * different config (inputs or disk) makes `up` restart it. Its storage stays on delete (images are data).
 */
export const RegistryServiceInputs = z.object({
  port: z.number().int().min(1).max(65535),
  config: absolutePath,
  storageDir: absolutePath,
  pidFile: absolutePath,
  logFile: absolutePath,
  configSha256: z.string().regex(/^[0-9a-f]{64}$/, { message: "must be a sha256 hex digest" }),
});
export type RegistryServiceInputs = z.infer<typeof RegistryServiceInputs>;
export type RegistryServiceOutputs = RegistryServiceInputs & {
  running: boolean;
  pid: number;
  configFileSha256: string;
};

const instance = (inputs: RegistryServiceInputs): RegistryInstance => ({
  port: inputs.port,
  config: inputs.config,
  storageDir: inputs.storageDir,
  pidFile: inputs.pidFile,
  logFile: inputs.logFile,
});

async function apply(inputs: RegistryServiceInputs, restart: boolean): Promise<RegistryServiceOutputs> {
  const onDisk = await fileSha256(inputs.config);
  if (onDisk !== inputs.configSha256) {
    throw new Error(`${inputs.config} does not hold the declared config (sha256 ${onDisk || "none"})`);
  }
  const pid = await runRegistry(instance(inputs), restart, () => undefined);
  return { ...inputs, running: true, pid, configFileSha256: onDisk };
}

export const registryServiceHandler: ResourceHandler<RegistryServiceInputs, RegistryServiceOutputs> = {
  inputs: RegistryServiceInputs,

  async diff(_id, olds, news) {
    const keys = ["port", "config", "storageDir", "pidFile", "logFile", "configSha256"] as const;
    const changed = changedKeys(olds, news, keys);
    const drifted = olds.running === false || olds.configFileSha256 !== olds.configSha256;
    return {
      changes: changed.length > 0 || drifted,
      replaces: changedKeys(olds, news, ["pidFile"]),
      deleteBeforeReplace: true,
    };
  },

  async create(inputs) {
    return { id: `registry:${inputs.pidFile}`, outs: await apply(inputs, false) };
  },

  async read(_id, olds) {
    const pid = await registryServing(instance(olds));
    return {
      ...olds,
      running: pid !== undefined,
      pid: pid ?? 0,
      configFileSha256: await fileSha256(olds.config),
    };
  },

  // A config that changed (or was changed by hand and repaired) is only read at start: restart.
  update: (_id, olds, news) =>
    apply(news, olds.configSha256 !== news.configSha256 || olds.configFileSha256 !== olds.configSha256),

  async delete(_id, olds) {
    await stopRegistry(instance(olds));
  },
};
