import * as path from "node:path";
import { z } from "zod";
import { engineVersion, startEngine, stopEngine } from "../../lib/host/docker-engine.js";
import { livePid } from "../../lib/process.js";
import { changedKeys, type ResourceHandler } from "../handler.js";

const absolutePath = z.string().refine((p) => path.isAbsolute(p) && path.normalize(p) === p, {
  message: "must be an absolute, normalized path",
});

/**
 * The container engine's API socket (dockerd). An engine that already answers on the socket is adopted
 * and never stopped by this resource; one it started itself (`startedPid`) is stopped on delete.
 */
export const ContainerEngineInputs = z.object({
  socket: absolutePath,
  logDir: absolutePath,
  runDir: absolutePath,
});
export type ContainerEngineInputs = z.infer<typeof ContainerEngineInputs>;
export type ContainerEngineOutputs = ContainerEngineInputs & {
  running: boolean;
  version: string;
  apiVersion: string;
  /** The dockerd this resource started (0: it adopted a running engine and leaves it alone). */
  startedPid: number;
};

const quiet = () => undefined;

async function ensureRunning(
  inputs: ContainerEngineInputs,
  startedPid: number,
): Promise<ContainerEngineOutputs> {
  // A busy engine can miss one version call's deadline: ask again before deciding it is not there.
  let version = (await engineVersion(inputs.socket)) ?? (await engineVersion(inputs.socket));
  let pid = startedPid;
  if (!version) {
    pid = await startEngine(inputs, quiet);
    version = await engineVersion(inputs.socket);
    if (!version) throw new Error(`dockerd started (pid ${pid}) but unix://${inputs.socket} does not answer`);
  }
  return {
    ...inputs,
    running: true,
    version: version.version,
    apiVersion: version.apiVersion,
    startedPid: pid,
  };
}

export const containerEngineHandler: ResourceHandler<ContainerEngineInputs, ContainerEngineOutputs> = {
  inputs: ContainerEngineInputs,

  async diff(_id, olds, news) {
    const changed = changedKeys(olds, news, ["socket", "logDir", "runDir"]);
    return {
      changes: changed.length > 0 || olds.running === false,
      replaces: changedKeys(olds, news, ["socket"]),
    };
  },

  async create(inputs) {
    return { id: `engine:${inputs.socket}`, outs: await ensureRunning(inputs, 0) };
  },

  async read(_id, olds) {
    const version = await engineVersion(olds.socket);
    return {
      ...olds,
      running: version !== undefined,
      version: version?.version ?? olds.version,
      apiVersion: version?.apiVersion ?? olds.apiVersion,
    };
  },

  update: (_id, olds, news) => ensureRunning(news, olds.startedPid),

  async delete(_id, olds) {
    if (olds.startedPid <= 0) return; // adopted: someone else's engine
    // Only the dockerd we started, and only while that pid still is dockerd.
    const pid = await livePid(path.join(olds.runDir, "dockerd.pid"), "dockerd");
    if (pid === olds.startedPid) await stopEngine(pid);
  },
};
