import { hash as argonHash, verify as argonVerify } from "@node-rs/argon2";
import { createHash, createSecretKey, hkdfSync, randomBytes, randomUUID, type KeyObject } from "node:crypto";
import { errors as joseErrors, jwtVerify, SignJWT } from "jose";
import { HttpError } from "../errors.js";
import type { Database, Queryable } from "../store/db.js";
import { clearLoginFailures, recentLoginFailures, recordLoginFailure } from "../store/login-failures.js";
import {
  lockTokenFamily,
  recordRefreshToken,
  recordTokenUse,
  replaceTokensExcept,
  revokeFamilyOfToken,
  revokeTokenFamily,
  tokenFamily,
} from "../store/refresh-tokens.js";
import { activeUserEmail, createUser, isActiveUser, loginAccount } from "../store/users.js";
import {
  apiKeyUser,
  countApiKeysLocked,
  listApiKeys,
  recordApiKey,
  revokeApiKey,
  type ApiKeyRow,
} from "../store/api-keys.js";

export interface AuthSettings {
  /** HMAC key of the access tokens (HS256, pinned); at least 32 bytes. */
  readonly secret: Uint8Array;
  readonly issuer: string;
  readonly audience: string;
  readonly accessTtlSeconds: number;
  readonly refreshTtlSeconds: number;
  /** Failed logins allowed per account within `throttleWindowSeconds`; past it, the account waits the window out. */
  readonly maxFailures: number;
  /**
   * Failed logins allowed per client address within the window (many people may share one address behind a
   * NAT, so well above the per-account limit). Past `maxFailures` from one address, each further attempt
   * from it waits a delay that doubles with every failure (1 s, 2 s, 4 s, ... at most `maxAddressDelaySeconds`).
   */
  readonly maxAddressFailures: number;
  readonly maxAddressDelaySeconds: number;
  readonly throttleWindowSeconds: number;
}

export const DEFAULT_AUTH: Omit<AuthSettings, "secret"> = {
  issuer: "agent-sandbox",
  audience: "agent-sandbox-api",
  accessTtlSeconds: 15 * 60,
  refreshTtlSeconds: 30 * 24 * 3600,
  maxFailures: 5,
  maxAddressFailures: 50,
  maxAddressDelaySeconds: 60,
  throttleWindowSeconds: 15 * 60,
};

const ALGORITHM = "HS256";
const INVALID_LOGIN = "invalid email or password";

/**
 * The head of a family may be presented again once the access token it last bought has less than this
 * share of its lifetime left: a client that refreshes a little early (on `expires_in`, a timer that
 * started late) still passes, while two holders of one token, each keeping an access token alive, do not.
 */
const REUSE_LEEWAY = 0.1;

const REFUSED_REFRESH = {
  unknown: "refresh token is not valid",
  expired: "refresh token has expired (or its account is gone); log in again",
  revoked: "refresh token belongs to a session that has ended (logged out or revoked); log in again",
  replaced:
    "refresh token was already used; its session has been revoked, log in again (a newer refresh token of this session had been presented, or this one was passed over)",
  early:
    "refresh token was already used; its session has been revoked, log in again (presented again while the access token it last gave was still fresh)",
} as const;

/**
 * argon2id (RFC 9106 via the OWASP-recommended parameters of the library); unlike bcrypt it reads the
 * whole password, so two long passwords sharing 72 bytes do not collide.
 */
export const hashPassword = (password: string) => argonHash(password);

// Verified against when the account does not exist, so an unknown email costs the same as a wrong password.
let dummyHash: Promise<string> | undefined;
const dummy = () => (dummyHash ??= argonHash(randomBytes(32).toString("hex")));

const sha256 = (value: string) => createHash("sha256").update(value).digest("hex");

/**
 * An API key: `sbx_` and 256 random bits (base64url), so that a leaked one is recognisable to secret
 * scanners and told apart from an access token (a JWT) at a glance.
 */
const API_KEY = /^sbx_[A-Za-z0-9_-]{43}$/;
/** What a key's lists show of it: enough to tell keys apart, far too little to guess the rest. */
const API_KEY_PREFIX_LENGTH = 12;
/** Live keys per user: a program leaking keys in a loop fills this, not the database. */
export const MAX_API_KEYS = 100;

/** Who a request comes from, and by which credential. */
export interface Caller {
  readonly userId: string;
  /** An API key's, or a signed-in session's (an access token). */
  readonly via: "api-key" | "session";
}

/** The credentials a request carries: its `Authorization` and `X-API-Key` headers. */
export interface Credentials {
  readonly authorization?: string;
  readonly apiKey?: string;
}

/** A request's credentials, from its headers as Node keys them (a header sent twice is a list: both given). */
export function credentialsOf(headers: Readonly<Record<string, string | string[] | undefined>>): Credentials {
  const one = (value: string | string[] | undefined) => (Array.isArray(value) ? value.join(", ") : value);
  return { authorization: one(headers.authorization), apiKey: one(headers["x-api-key"]) };
}

export interface TokenPair {
  readonly access_token: string;
  readonly refresh_token: string;
  readonly token_type: "Bearer";
  readonly expires_in: number;
}

export class Auth {
  /** A key for another purpose (e.g. the front door's cookies), derived from the signing secret. */
  derivedKey(purpose: string): Buffer {
    return Buffer.from(hkdfSync("sha256", this.settings.secret, "", `agent-sandbox ${purpose}`, 32));
  }

  constructor(
    /** The accounts' database (registration's rate limits and invites live there too). */
    readonly db: Database,
    private readonly settings: AuthSettings,
  ) {
    if (settings.secret.length < 32) throw new Error("the token signing secret must be at least 32 bytes");
    // One key object for every sign and verify (a raw secret is imported again on each call).
    this.key = createSecretKey(Buffer.from(settings.secret));
  }

  private readonly key: KeyObject;

  /** `admit` runs in the account's transaction (an invite is used up with it, or not at all). */
  async register(
    email: string,
    password: string,
    admit?: (tx: Queryable, userId: string) => Promise<void>,
  ): Promise<{ user_id: string }> {
    const id = randomUUID();
    const passwordHash = await hashPassword(password);
    return this.db.transaction(async (tx) => {
      if (!(await createUser(tx, { id, email: email.toLowerCase(), passwordHash })))
        throw new HttpError(409, "email_taken", "an account with this email already exists");
      await admit?.(tx, id);
      return { user_id: id };
    });
  }

  async login(email: string, password: string, address: string): Promise<TokenPair> {
    const keys = [`account:${email.toLowerCase()}`, `address:${address}`];
    await this.assertNotThrottled(keys[0]!, keys[1]!);
    const user = await loginAccount(this.db, email.toLowerCase());
    const valid = await argonVerify(user?.password_hash ?? (await dummy()), password).catch(() => false);
    if (!user || !valid) {
      await this.recordFailure(keys);
      throw new HttpError(401, "invalid_credentials", INVALID_LOGIN);
    }
    await clearLoginFailures(this.db, keys[0]!);
    return (await this.issue(this.db, user.id, randomUUID())).pair;
  }

  /**
   * Trades a refresh token for a new pair. The rule (docs/security.md, "Refresh tokens"): a family of
   * tokens (one login) that has never rotated lets its login's token be presented for its whole lifetime,
   * however often (a client may keep it and read only `access_token`), and any token issued to it
   * so far be presented once. The first issued token presented rotates the family: from then on only its
   * *head* (the newest token the client has used) and the newest token issued after it may be presented.
   * Presenting that newer token rotates again; presenting the head again is allowed once the access token
   * it last bought is nearly spent; anything else — an ancestor of a presented token, an issued token
   * the client passed over, the head again while its access token is still fresh — means two holders, and
   * revokes the whole family. Logout revokes it in every case.
   */
  async refresh(refreshToken: string): Promise<TokenPair> {
    type Outcome = { pair: TokenPair } | { refused: keyof typeof REFUSED_REFRESH };
    const outcome = await this.db.transaction(async (tx): Promise<Outcome> => {
      const hash = sha256(refreshToken);
      const familyId = await tokenFamily(tx, hash);
      if (familyId === undefined) return { refused: "unknown" };
      // The whole family, locked: whether one token may pass depends on its siblings.
      const family = await lockTokenFamily(tx, familyId);
      const token = family.find((row) => row.token_hash === hash)!;
      if (token.revoked) return { refused: "revoked" };
      // Never rotated: no token but the login's has been presented. The login's token then passes as often
      // as it comes (the seed's client keeps it; two tabs may send it at once), and every token issued so
      // far stays presentable until one of them is: that one rotates the family.
      const root = family[0]!;
      const keptFirst = token.id === root.id && !family.some((row) => row.head && row.id !== root.id);
      // A used token is the head until a newer one is used (then it is replaced), so `head` and
      // `replaced` together say which of the three a presented token is.
      const replay = token.replaced
        ? "replaced"
        : token.head && token.early && !keptFirst
          ? "early"
          : undefined;
      if (replay) {
        await revokeTokenFamily(tx, familyId);
        return { refused: replay };
      }
      if (token.expired || token.deleted) return { refused: "expired" };
      // From now on only this token and the one issued below may be presented (once rotated).
      if (!keptFirst) await replaceTokensExcept(tx, familyId, token.id);
      const { pair, accessExpiresAt } = await this.issue(tx, token.user_id, familyId);
      await recordTokenUse(tx, token.id, accessExpiresAt - this.settings.accessTtlSeconds * REUSE_LEEWAY);
      return { pair };
    });
    if ("pair" in outcome) return outcome.pair;
    throw new HttpError(401, "invalid_refresh_token", REFUSED_REFRESH[outcome.refused]);
  }

  /** Ends the session the refresh token belongs to. Unknown tokens are ignored (idempotent). */
  async logout(refreshToken: string): Promise<void> {
    await revokeFamilyOfToken(this.db, sha256(refreshToken));
  }

  /** Whether the user is one of `operators` (emails, compared in lower case). */
  async isOperator(userId: string, operators: ReadonlySet<string>): Promise<boolean> {
    if (operators.size === 0) return false;
    const email = await activeUserEmail(this.db, userId);
    return email !== undefined && operators.has(email.toLowerCase());
  }

  /**
   * The caller of a request: an API key (`X-API-Key`, or `Authorization: Bearer sbx_...`) or an access token
   * (`Authorization: Bearer <jwt>`) of a live account; 401 for anything else.
   */
  async caller(credentials: Credentials): Promise<Caller> {
    const { authorization, apiKey } = credentials;
    if (apiKey !== undefined) {
      if (authorization !== undefined)
        throw new HttpError(401, "unauthorized", "send one credential: X-API-Key or Authorization, not both");
      return { userId: await this.keyUser(apiKey, "X-API-Key"), via: "api-key" };
    }
    const bearer = /^Bearer (sbx_\S*)$/.exec(authorization ?? "")?.[1];
    if (bearer !== undefined)
      return { userId: await this.keyUser(bearer, "the bearer API key"), via: "api-key" };
    return { userId: await this.authenticate(authorization), via: "session" };
  }

  private async keyUser(key: string, where: string): Promise<string> {
    if (!API_KEY.test(key))
      throw new HttpError(
        401,
        "unauthorized",
        `${where} is not an API key (sbx_ and 43 base64url characters)`,
      );
    const userId = await apiKeyUser(this.db, sha256(key));
    if (userId === undefined)
      throw new HttpError(
        401,
        "unauthorized",
        `${where} is not a valid API key (unknown, revoked or expired)`,
      );
    return userId;
  }

  /** A new API key of the user's: the key itself is in this answer only (it is stored as its hash). */
  async createApiKey(
    userId: string,
    name: string,
    expiresInDays: number | undefined,
  ): Promise<ApiKeyRow & { key: string }> {
    const key = `sbx_${randomBytes(32).toString("base64url")}`;
    return this.db.transaction(async (tx) => {
      if ((await countApiKeysLocked(tx, userId)) >= MAX_API_KEYS)
        throw new HttpError(
          409,
          "too_many_api_keys",
          `an account may have at most ${MAX_API_KEYS} API keys; revoke one (DELETE /auth/api-keys/{keyId}) first`,
        );
      const row = await recordApiKey(tx, {
        id: randomUUID(),
        userId,
        name,
        prefix: key.slice(0, API_KEY_PREFIX_LENGTH),
        keyHash: sha256(key),
        expiresInDays,
      });
      return { ...row, key };
    });
  }

  listApiKeys(userId: string): Promise<ApiKeyRow[]> {
    return listApiKeys(this.db, userId);
  }

  /** Revokes the user's key at once (its next request is refused); false for no such key of the user's. */
  revokeApiKey(userId: string, id: string): Promise<boolean> {
    return revokeApiKey(this.db, userId, id);
  }

  /** The user id of a valid access token of a live account; 401 for anything else. */
  async authenticate(authorization: string | undefined): Promise<string> {
    const match = /^Bearer ([A-Za-z0-9._~+/-]+=*)$/.exec(authorization ?? "");
    if (!match) throw new HttpError(401, "unauthorized", "missing or malformed Authorization: Bearer header");
    let subject: string | undefined;
    try {
      const { payload } = await jwtVerify(match[1]!, this.key, {
        algorithms: [ALGORITHM],
        issuer: this.settings.issuer,
        audience: this.settings.audience,
        typ: "at+jwt",
        requiredClaims: ["sub", "exp", "iat"],
      });
      subject = payload.sub;
    } catch (error) {
      const expired = error instanceof joseErrors.JWTExpired;
      throw new HttpError(
        401,
        "unauthorized",
        expired ? "access token expired" : "access token is not valid",
      );
    }
    if (!(await isActiveUser(this.db, subject!)))
      throw new HttpError(401, "unauthorized", "access token is not valid");
    return subject!;
  }

  private async issue(
    db: Queryable,
    userId: string,
    familyId: string,
  ): Promise<{ pair: TokenPair; accessExpiresAt: number }> {
    const refreshToken = randomBytes(32).toString("base64url");
    await recordRefreshToken(db, {
      id: randomUUID(),
      userId,
      familyId,
      tokenHash: sha256(refreshToken),
      ttlSeconds: this.settings.refreshTtlSeconds,
    });
    // Explicit times: the expiry is also recorded (a re-presented refresh token waits for it).
    const issuedAt = Math.floor(Date.now() / 1000);
    const accessExpiresAt = issuedAt + this.settings.accessTtlSeconds;
    const accessToken = await new SignJWT({})
      .setProtectedHeader({ alg: ALGORITHM, typ: "at+jwt" })
      .setSubject(userId)
      .setIssuer(this.settings.issuer)
      .setAudience(this.settings.audience)
      .setIssuedAt(issuedAt)
      .setJti(randomUUID())
      .setExpirationTime(accessExpiresAt)
      .sign(this.key);
    return {
      pair: {
        access_token: accessToken,
        refresh_token: refreshToken,
        token_type: "Bearer",
        expires_in: this.settings.accessTtlSeconds,
      },
      accessExpiresAt,
    };
  }

  /** The seconds an address waits after its last failure, having failed `failures` times in the window. */
  addressDelaySeconds(failures: number): number {
    const over = failures - this.settings.maxFailures;
    return over <= 0 ? 0 : Math.min(2 ** (over - 1), this.settings.maxAddressDelaySeconds);
  }

  /**
   * 429 when the account has failed `maxFailures` times in the window (until the window ends), the address
   * `maxAddressFailures` times (likewise), or the address is still inside its progressive delay.
   */
  private async assertNotThrottled(account: string, address: string): Promise<void> {
    const rows = await recentLoginFailures(this.db, [account, address], this.settings.throttleWindowSeconds);
    const waits: { retry: number; why: string }[] = [];
    for (const row of rows) {
      if (row.key === account && row.failures >= this.settings.maxFailures)
        waits.push({ retry: row.window, why: "too many failed logins for this account" });
      if (row.key === address) {
        if (row.failures >= this.settings.maxAddressFailures)
          waits.push({ retry: row.window, why: "too many failed logins from this address" });
        const delay = this.addressDelaySeconds(row.failures) - row.since;
        if (delay > 0)
          waits.push({ retry: Math.ceil(delay), why: "failed logins from this address are slowed down" });
      }
    }
    if (waits.length === 0) return;
    const longest = waits.reduce((a, b) => (b.retry > a.retry ? b : a));
    throw new HttpError(429, "too_many_attempts", `${longest.why}; try again in ${longest.retry} s`, {
      retry_after: longest.retry,
    });
  }

  private async recordFailure(keys: string[]): Promise<void> {
    for (const key of keys) await recordLoginFailure(this.db, key, this.settings.throttleWindowSeconds);
  }
}
