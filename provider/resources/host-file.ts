import { createHash } from "node:crypto";
import { promises as fs } from "node:fs";
import * as path from "node:path";
import { z } from "zod";
import { writeFileAtomic } from "../../lib/files.js";
import { changedKeys, type ResourceHandler } from "../handler.js";

/** A file on the host the plugin runs on (Squid fragments, ACL lists, base configs). */
export const HostFileInputs = z.object({
  path: z.string().refine((p) => path.isAbsolute(p) && path.normalize(p) === p && !p.includes("\0"), {
    message: "must be an absolute, normalized path",
  }),
  content: z.string(),
  mode: z
    .string()
    .regex(/^0?[0-7]{3}$/, { message: "must be an octal permission string such as 0644" })
    .default("0644")
    .transform((mode) => mode.padStart(4, "0")),
});
export type HostFileInputs = z.infer<typeof HostFileInputs>;
export type HostFileOutputs = HostFileInputs & { sha256: string };

const sha256 = (content: string): string => createHash("sha256").update(content).digest("hex");

async function observe(target: string): Promise<HostFileOutputs | undefined> {
  try {
    const [content, stat] = await Promise.all([fs.readFile(target, "utf8"), fs.stat(target)]);
    const mode = (stat.mode & 0o777).toString(8).padStart(4, "0");
    return { path: target, content, mode, sha256: sha256(content) };
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw error;
  }
}

export const hostFileHandler: ResourceHandler<HostFileInputs, HostFileOutputs> = {
  inputs: HostFileInputs,

  async diff(_id, olds, news) {
    const replaces = changedKeys(olds, news, ["path"]);
    const changed = changedKeys(olds, news, ["path", "content", "mode"]);
    return { changes: changed.length > 0, replaces, deleteBeforeReplace: false };
  },

  async create(inputs) {
    const existing = await observe(inputs.path);
    // Adopting an identical file makes a retried create (after a crash between write and state save)
    // succeed; anything else there belongs to someone else and is not silently overwritten.
    if (existing && existing.content !== inputs.content) {
      throw new Error(`${inputs.path} already exists with other content; remove it or import it first`);
    }
    await writeFileAtomic(inputs.path, inputs.content, inputs.mode);
    return { id: inputs.path, outs: { ...inputs, sha256: sha256(inputs.content) } };
  },

  read: (id) => observe(id),

  async update(_id, _olds, news) {
    await writeFileAtomic(news.path, news.content, news.mode);
    return { ...news, sha256: sha256(news.content) };
  },

  async delete(id) {
    await fs.rm(id, { force: true });
  },
};
