import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import * as os from "node:os";
import * as path from "node:path";
import { promisify } from "node:util";
import { z } from "zod";
import { changedKeys, type ResourceHandler } from "../handler.js";

const execFileAsync = promisify(execFile);

/** An ed25519 SSH keypair made by ssh-keygen; the private key is a secret output, kept only in state. */
export const SshKeyPairInputs = z.object({
  comment: z
    .string()
    .regex(/^[A-Za-z0-9@._:-]{1,64}$/, { message: "must be 1-64 characters of [A-Za-z0-9@._:-]" }),
});
export type SshKeyPairInputs = z.infer<typeof SshKeyPairInputs>;
export type SshKeyPairOutputs = SshKeyPairInputs & {
  publicKey: string;
  privateKey: string;
  fingerprint: string;
};

export const sshKeyPairHandler: ResourceHandler<SshKeyPairInputs, SshKeyPairOutputs> = {
  inputs: SshKeyPairInputs,

  async diff(_id, olds, news) {
    const changed = changedKeys(olds, news, ["comment"]);
    return { changes: changed.length > 0, replaces: changed };
  },

  async create(inputs) {
    const dir = await mkdtemp(path.join(os.tmpdir(), "sshkey-"));
    try {
      const file = path.join(dir, "key");
      await execFileAsync("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-C", inputs.comment, "-f", file]);
      const [privateKey, publicKey] = await Promise.all([
        readFile(file, "utf8"),
        readFile(`${file}.pub`, "utf8"),
      ]);
      const { stdout } = await execFileAsync("ssh-keygen", ["-l", "-f", `${file}.pub`]);
      const fingerprint = stdout.split(" ")[1] ?? "";
      const id = createHash("sha256").update(publicKey).digest("hex").slice(0, 16);
      return { id, outs: { ...inputs, publicKey: publicKey.trim(), privateKey, fingerprint } };
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  },

  // The keypair exists only in the state; there is nothing outside to drift.
  read: async (_id, olds) => olds,

  async update() {
    throw new Error("an SSH keypair is replaced, never updated");
  },

  async delete() {},
};
