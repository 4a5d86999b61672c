import { createHash } from "node:crypto";
import { z } from "zod";
import { changedKeys, type ResourceHandler } from "../handler.js";
import { generateSshKeyPair } from "../../lib/ssh-keygen.js";

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
    const keys = await generateSshKeyPair(inputs.comment);
    const id = createHash("sha256").update(keys.publicKey).digest("hex").slice(0, 16);
    return { id, outs: { ...inputs, ...keys } };
  },

  // The keypair exists only in the state; there is nothing outside to drift.
  read: async (_id, olds) => olds,

  async update() {
    throw new Error("an SSH keypair is replaced, never updated");
  },

  async delete() {},
};
