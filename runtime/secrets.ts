import { createCipheriv, createDecipheriv, randomBytes } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import * as path from "node:path";

/**
 * A secret the runtime needs across restarts: from the environment when the operator provides one, else
 * generated on first start and kept root-only (0600) in the data directory.
 */
export function persistentSecret(
  dataDir: string,
  fileName: string,
  fromEnv: string | undefined,
  bytes = 32,
): string {
  if (fromEnv) return fromEnv;
  const file = path.join(dataDir, fileName);
  if (!existsSync(file)) {
    mkdirSync(dataDir, { recursive: true });
    try {
      writeFileSync(file, randomBytes(bytes).toString("base64url"), { mode: 0o600, flag: "wx" });
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error; // another process made it first
    }
  }
  return readFileSync(file, "utf8").trim();
}

/** The passphrase encrypting the tenant stacks' secrets in the local file backend. */
export const statePassphrase = (dataDir: string, env: NodeJS.ProcessEnv = process.env) =>
  persistentSecret(dataDir, "state.passphrase", env.AGENT_SANDBOX_STATE_PASSPHRASE);

/** The access tokens' signing key (HS256): at least 32 bytes. */
export function tokenSecret(dataDir: string, env: NodeJS.ProcessEnv = process.env): Uint8Array {
  const secret = persistentSecret(dataDir, "jwt.secret", env.AGENT_SANDBOX_JWT_SECRET, 48);
  if (Buffer.byteLength(secret) < 32) throw new Error("AGENT_SANDBOX_JWT_SECRET must be at least 32 bytes");
  return new TextEncoder().encode(secret);
}

/**
 * Encrypts secrets kept in the database (SSH private keys, service-account keys): AES-256-GCM with a
 * random 96-bit nonce, `v1.<nonce>.<tag>.<ciphertext>` in base64url. The key comes from
 * AGENT_SANDBOX_SECRETS_KEY (base64url of 32 bytes) or is generated root-only in the data directory.
 */
export class SecretBox {
  private readonly key: Buffer;

  constructor(key: Buffer) {
    if (key.length !== 32) throw new Error("the secrets key must be 32 bytes (base64url-encoded)");
    this.key = key;
  }

  static fromDataDir(dataDir: string, env: NodeJS.ProcessEnv = process.env): SecretBox {
    return new SecretBox(
      Buffer.from(persistentSecret(dataDir, "secrets.key", env.AGENT_SANDBOX_SECRETS_KEY), "base64url"),
    );
  }

  seal(plaintext: string): string {
    const nonce = randomBytes(12);
    const cipher = createCipheriv("aes-256-gcm", this.key, nonce);
    const ciphertext = Buffer.concat([cipher.update(plaintext, "utf8"), cipher.final()]);
    return ["v1", nonce, cipher.getAuthTag(), ciphertext]
      .map((part) => (typeof part === "string" ? part : part.toString("base64url")))
      .join(".");
  }

  open(sealed: string): string {
    const [version, nonce, tag, ciphertext] = sealed.split(".");
    if (version !== "v1" || !nonce || !tag || ciphertext === undefined)
      throw new Error("not a sealed secret");
    const decipher = createDecipheriv("aes-256-gcm", this.key, Buffer.from(nonce, "base64url"));
    decipher.setAuthTag(Buffer.from(tag, "base64url"));
    return Buffer.concat([decipher.update(Buffer.from(ciphertext, "base64url")), decipher.final()]).toString(
      "utf8",
    );
  }
}
