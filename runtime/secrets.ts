import { randomBytes } from "node:crypto";
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
