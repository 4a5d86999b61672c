import * as pulumi from "@pulumi/pulumi";
import { RESOURCE_TYPES } from "../../lib/constants.js";

export interface SshKeyPairArgs {
  readonly comment: pulumi.Input<string>;
}

/** An ed25519 keypair; `privateKey` is a secret output (encrypted in the state). */
export class SshKeyPair extends pulumi.CustomResource {
  declare public readonly publicKey: pulumi.Output<string>;
  declare public readonly privateKey: pulumi.Output<string>;
  declare public readonly fingerprint: pulumi.Output<string>;

  constructor(name: string, args: SshKeyPairArgs, opts?: pulumi.CustomResourceOptions) {
    super(
      RESOURCE_TYPES.sshKeyPair,
      name,
      { ...args, publicKey: undefined, privateKey: undefined, fingerprint: undefined },
      pulumi.mergeOptions(opts, { additionalSecretOutputs: ["privateKey"] }),
    );
  }
}
