import * as path from "node:path";
import { z } from "zod";
import { caddyFrontDoor, caddyPaths, stopCaddy, type CaddyOptions } from "../../lib/host/caddy.js";
import { livePid } from "../../lib/process.js";
import { changedKeys, type ResourceHandler } from "../handler.js";

const absolutePath = z.string().refine((p) => path.isAbsolute(p) && path.normalize(p) === p, {
  message: "must be an absolute, normalized path",
});

/**
 * The front door's Caddy (lib/host/caddy.ts) on loopback, its admin API on 127.0.0.1: started when it does
 * not run, left alone when it does (the tenants' routes live in its memory), stopped on delete.
 */
export const CaddyServiceInputs = z.object({
  port: z.number().int().min(1).max(65535),
  adminPort: z.number().int().min(1).max(65535),
  configDir: absolutePath,
  logDir: absolutePath,
  runDir: absolutePath,
  /** The runtime that answers the found dev servers' forward-auth (`127.0.0.1:<api port>`), if any. */
  devServersAuthUpstream: z.string().min(1).optional(),
});
export type CaddyServiceInputs = z.infer<typeof CaddyServiceInputs>;
export type CaddyServiceOutputs = CaddyServiceInputs & { running: boolean; pid: number };

const options = ({ devServersAuthUpstream, ...inputs }: CaddyServiceInputs): CaddyOptions => ({
  ...inputs,
  ...(devServersAuthUpstream ? { devServers: { authUpstream: devServersAuthUpstream } } : {}),
});

async function apply(inputs: CaddyServiceInputs): Promise<CaddyServiceOutputs> {
  const check = await caddyFrontDoor(options(inputs)).ensure(() => undefined);
  if (!check.ready) throw new Error(`caddy (front door): ${check.detail}`);
  const pid = (await livePid(caddyPaths(inputs).pidFile, "caddy")) ?? 0;
  return { ...inputs, running: true, pid };
}

export const caddyServiceHandler: ResourceHandler<CaddyServiceInputs, CaddyServiceOutputs> = {
  inputs: CaddyServiceInputs,

  async diff(_id, olds, news) {
    const keys = ["port", "adminPort", "configDir", "logDir", "runDir"] as const;
    const changed = changedKeys(olds, news, keys);
    // A running instance keeps its ports: a new port is a new instance (stop, then start). A new runtime
    // address is the dev servers' route changed in place.
    return {
      changes:
        changed.length > 0 ||
        olds.running === false ||
        changedKeys(olds, news, ["devServersAuthUpstream"] as const).length > 0,
      replaces: changed,
      deleteBeforeReplace: true,
    };
  },

  async create(inputs) {
    return { id: `caddy:${caddyPaths(inputs).pidFile}`, outs: await apply(inputs) };
  },

  async read(_id, olds) {
    const check = await caddyFrontDoor(options(olds))
      .probe()
      .catch(() => ({ ready: false }));
    const pid = await livePid(caddyPaths(olds).pidFile, "caddy");
    return { ...olds, running: check.ready, pid: pid ?? 0 };
  },

  update: (_id, _olds, news) => apply(news),

  async delete(_id, olds) {
    await stopCaddy(olds);
  },
};
