import { promises as fs } from "node:fs";
import * as path from "node:path";
import { z } from "zod";
import { changedKeys, type ResourceHandler } from "../handler.js";

/** A directory on the host with an owner and mode (a sandbox's local backup location, say). */
export const HostDirectoryInputs = z.object({
  path: z.string().refine((p) => path.isAbsolute(p) && path.normalize(p) === p && p.split("/").length > 2, {
    message: "must be an absolute, normalized path at least two levels deep",
  }),
  uid: z.number().int().min(0),
  gid: z.number().int().min(0),
  mode: z
    .string()
    .regex(/^0?[0-7]{3}$/, { message: "must be an octal mode such as 0750" })
    .transform((m) => m.padStart(4, "0")),
  /** Delete the contents with the directory (a project's data goes when the project goes). */
  deleteContents: z.boolean().default(false),
});
export type HostDirectoryInputs = z.infer<typeof HostDirectoryInputs>;
export type HostDirectoryOutputs = HostDirectoryInputs;

async function observe(target: string, olds: HostDirectoryInputs): Promise<HostDirectoryOutputs | undefined> {
  try {
    const stat = await fs.stat(target);
    if (!stat.isDirectory()) return { ...olds, uid: -1, gid: -1, mode: "file" };
    return { ...olds, uid: stat.uid, gid: stat.gid, mode: (stat.mode & 0o777).toString(8).padStart(4, "0") };
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw error;
  }
}

async function apply(inputs: HostDirectoryInputs): Promise<HostDirectoryOutputs> {
  await fs.mkdir(inputs.path, { recursive: true });
  await fs.chown(inputs.path, inputs.uid, inputs.gid);
  await fs.chmod(inputs.path, parseInt(inputs.mode, 8));
  return inputs;
}

export const hostDirectoryHandler: ResourceHandler<HostDirectoryInputs, HostDirectoryOutputs> = {
  inputs: HostDirectoryInputs,

  async diff(_id, olds, news) {
    const changed = changedKeys(olds, news, ["path", "uid", "gid", "mode", "deleteContents"]);
    return { changes: changed.length > 0, replaces: changedKeys(olds, news, ["path"]) };
  },

  async create(inputs) {
    return { id: inputs.path, outs: await apply(inputs) };
  },

  read: (id, olds) => observe(id, olds),

  update: (_id, _olds, news) => apply(news),

  async delete(id, olds) {
    if (olds.deleteContents) await fs.rm(id, { recursive: true, force: true });
    else await fs.rmdir(id).catch(() => undefined); // kept when it still holds something
  },
};
