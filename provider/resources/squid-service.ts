import { createHash } from "node:crypto";
import { promises as fs } from "node:fs";
import * as path from "node:path";
import { z } from "zod";
import { runSquid, type SquidInstance, squidServing, stopSquid } from "../../lib/host/squid.js";
import { changedKeys, type ResourceHandler } from "../handler.js";

const absolutePath = z.string().refine((p) => path.isAbsolute(p) && path.normalize(p) === p, {
  message: "must be an absolute, normalized path",
});

/** sha256 of a file's content, or "" when it is missing (what a service reads its config from). */
export async function fileSha256(file: string): Promise<string> {
  try {
    return createHash("sha256")
      .update(await fs.readFile(file))
      .digest("hex");
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return "";
    throw error;
  }
}

/**
 * The project's Squid instance running from its base config (`squid -f config`, own pid file and port).
 * `configSha256` is the content it must serve (the config file resource's hash): a different one on
 * disk or in the inputs makes `up` reconfigure it.
 */
export const SquidServiceInputs = z.object({
  port: z.number().int().min(1).max(65535),
  config: absolutePath,
  pidFile: absolutePath,
  logDir: absolutePath,
  configSha256: z.string().regex(/^[0-9a-f]{64}$/, { message: "must be a sha256 hex digest" }),
});
export type SquidServiceInputs = z.infer<typeof SquidServiceInputs>;
export type SquidServiceOutputs = SquidServiceInputs & {
  running: boolean;
  pid: number;
  /** sha256 of the config file as found on disk by the last create, update or refresh. */
  configFileSha256: string;
};

const instance = (inputs: SquidServiceInputs): SquidInstance => ({
  port: inputs.port,
  config: inputs.config,
  pidFile: inputs.pidFile,
  logDir: inputs.logDir,
});

async function apply(inputs: SquidServiceInputs, reconfigure: boolean): Promise<SquidServiceOutputs> {
  const onDisk = await fileSha256(inputs.config);
  if (onDisk !== inputs.configSha256) {
    throw new Error(`${inputs.config} does not hold the declared config (sha256 ${onDisk || "none"})`);
  }
  const pid = await runSquid(instance(inputs), reconfigure, () => undefined);
  return { ...inputs, running: true, pid, configFileSha256: onDisk };
}

export const squidServiceHandler: ResourceHandler<SquidServiceInputs, SquidServiceOutputs> = {
  inputs: SquidServiceInputs,

  async diff(_id, olds, news) {
    const changed = changedKeys(olds, news, ["port", "config", "pidFile", "logDir", "configSha256"]);
    const drifted = olds.running === false || olds.configFileSha256 !== olds.configSha256;
    return {
      changes: changed.length > 0 || drifted,
      // Another pid file or config path is another instance: stop the old one first (same port).
      replaces: changedKeys(olds, news, ["config", "pidFile"]),
      deleteBeforeReplace: true,
    };
  },

  async create(inputs) {
    // An instance already running from this config (the host's before it was a stack) is adopted.
    return { id: `squid:${inputs.pidFile}`, outs: await apply(inputs, true) };
  },

  async read(_id, olds) {
    const pid = await squidServing(instance(olds));
    return {
      ...olds,
      running: pid !== undefined,
      pid: pid ?? 0,
      configFileSha256: await fileSha256(olds.config),
    };
  },

  update: (_id, _olds, news) => apply(news, true),

  async delete(_id, olds) {
    await stopSquid(instance(olds));
  },
};
