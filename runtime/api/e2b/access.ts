import { createHmac, timingSafeEqual } from "node:crypto";
import type { Auth } from "../auth.js";

/**
 * The envd version this runtime answers as: the SDKs read it to know which of envd's features they may use
 * (0.5.7: closing stdin, uploads as octet streams).
 */
export const ENVD_VERSION = "0.5.7";

/**
 * The access token of an E2B sandbox's envd (the SDK sends it as `X-Access-Token`): derived from the
 * runtime's signing secret and the sandbox's id, so that it need not be stored and a connect can hand it out
 * again. It dies with the sandbox (envd answers only for a live E2B sandbox).
 */
export function envdAccessToken(auth: Auth, sandboxId: string): string {
  return createHmac("sha256", auth.derivedKey("e2b envd access token")).update(sandboxId).digest("base64url");
}

/** Whether `presented` is the sandbox's envd access token (in constant time). */
export function isEnvdAccessToken(auth: Auth, sandboxId: string, presented: string | undefined): boolean {
  if (presented === undefined) return false;
  const expected = Buffer.from(envdAccessToken(auth, sandboxId));
  const given = Buffer.from(presented);
  return given.length === expected.length && timingSafeEqual(given, expected);
}
