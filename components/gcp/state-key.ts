import * as gcp from "@pulumi/gcp";
import * as pulumi from "@pulumi/pulumi";

/** Rotation period of the tenant-state key (90 days, in seconds as the API wants it). */
export const STATE_KEY_ROTATION = `${90 * 24 * 3600}s`;

const KEY_NAME = /^projects\/([^/]+)\/locations\/([^/]+)\/keyRings\/([^/]+)\/cryptoKeys\/([^/]+)$/;

/** The parts of `projects/<p>/locations/<l>/keyRings/<r>/cryptoKeys/<k>`, or undefined. */
export function parseKmsKeyName(
  key: string,
): { project: string; location: string; keyRing: string; cryptoKey: string } | undefined {
  const match = KEY_NAME.exec(key);
  if (!match) return undefined;
  const [, project, location, keyRing, cryptoKey] = match as unknown as [
    string,
    string,
    string,
    string,
    string,
  ];
  return { project, location, keyRing, cryptoKey };
}

/** Arguments of {@link StateSecretsKey}. */
export interface StateSecretsKeyArgs {
  /** The key to create: `projects/<p>/locations/<l>/keyRings/<r>/cryptoKeys/<k>` (config `gcp.kmsKey`). */
  readonly kmsKey: string;
  readonly labels: Record<string, string>;
}

export function validateStateSecretsKeyArgs(args: StateSecretsKeyArgs): string[] {
  return parseKmsKeyName(args.kmsKey)
    ? []
    : [`kmsKey: '${args.kmsKey}' is not projects/<p>/locations/<l>/keyRings/<r>/cryptoKeys/<k>`];
}

/**
 * The KMS key that encrypts the tenant stacks' secrets (`gcpkms://<key>`). Key rings and keys cannot be
 * deleted in GCP: the resources are protected, and a destroyed stack leaves them to be imported again.
 */
export class StateSecretsKey extends pulumi.ComponentResource {
  /** The key's resource name, as `gcpkms://` wants it. */
  public readonly keyId: pulumi.Output<string>;
  public readonly secretsProvider: pulumi.Output<string>;
  public readonly cryptoKey: gcp.kms.CryptoKey;

  constructor(name: string, args: StateSecretsKeyArgs, opts?: pulumi.ComponentResourceOptions) {
    super("sandbox:gcp:StateSecretsKey", name, {}, opts);
    const parts = parseKmsKeyName(args.kmsKey);
    if (!parts) throw new pulumi.ResourceError(validateStateSecretsKeyArgs(args).join("; "), this);
    const keyRing = new gcp.kms.KeyRing(
      `${name}-ring`,
      { project: parts.project, location: parts.location, name: parts.keyRing },
      { parent: this, protect: true },
    );
    this.cryptoKey = new gcp.kms.CryptoKey(
      `${name}-key`,
      {
        keyRing: keyRing.id,
        name: parts.cryptoKey,
        purpose: "ENCRYPT_DECRYPT",
        rotationPeriod: STATE_KEY_ROTATION,
        labels: args.labels,
      },
      { parent: this, protect: true },
    );
    this.keyId = this.cryptoKey.id;
    this.secretsProvider = pulumi.interpolate`gcpkms://${this.cryptoKey.id}`;
    this.registerOutputs({ keyId: this.keyId, secretsProvider: this.secretsProvider });
  }
}
