import { hash as argonHash, verify as argonVerify } from "@node-rs/argon2";
import { createHash, createSecretKey, randomBytes, randomUUID, type KeyObject } from "node:crypto";
import { errors as joseErrors, jwtVerify, SignJWT } from "jose";
import type { Database, Queryable } from "../db.js";
import { HttpError } from "../errors.js";

export interface AuthSettings {
  /** HMAC key of the access tokens (HS256, pinned); at least 32 bytes. */
  readonly secret: Uint8Array;
  readonly issuer: string;
  readonly audience: string;
  readonly accessTtlSeconds: number;
  readonly refreshTtlSeconds: number;
  /** Failed logins allowed per account and per address within `throttleWindowSeconds`. */
  readonly maxFailures: number;
  readonly throttleWindowSeconds: number;
}

export const DEFAULT_AUTH: Omit<AuthSettings, "secret"> = {
  issuer: "agent-sandbox",
  audience: "agent-sandbox-api",
  accessTtlSeconds: 15 * 60,
  refreshTtlSeconds: 30 * 24 * 3600,
  maxFailures: 5,
  throttleWindowSeconds: 15 * 60,
};

const ALGORITHM = "HS256";
const INVALID_LOGIN = "invalid email or password";

/**
 * argon2id (RFC 9106 via the OWASP-recommended parameters of the library); unlike bcrypt it reads the
 * whole password, so two long passwords sharing 72 bytes do not collide.
 */
export const hashPassword = (password: string) => argonHash(password);

// Verified against when the account does not exist, so an unknown email costs the same as a wrong password.
let dummyHash: Promise<string> | undefined;
const dummy = () => (dummyHash ??= argonHash(randomBytes(32).toString("hex")));

const sha256 = (value: string) => createHash("sha256").update(value).digest("hex");

export interface TokenPair {
  readonly access_token: string;
  readonly refresh_token: string;
  readonly token_type: "Bearer";
  readonly expires_in: number;
}

export class Auth {
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
      const { rows } = await tx.query<{ id: string }>(
        "insert into users (id, email, password_hash) values ($1, $2, $3) on conflict (email) do nothing returning id",
        [id, email.toLowerCase(), passwordHash],
      );
      if (!rows[0]) throw new HttpError(409, "email_taken", "an account with this email already exists");
      await admit?.(tx, id);
      return { user_id: id };
    });
  }

  async login(email: string, password: string, address: string): Promise<TokenPair> {
    const keys = [`account:${email.toLowerCase()}`, `address:${address}`];
    await this.assertNotThrottled(keys);
    const { rows } = await this.db.query<{ id: string; password_hash: string }>(
      "select id, password_hash from users where email = $1 and deleted_at is null",
      [email.toLowerCase()],
    );
    const user = rows[0];
    const valid = await argonVerify(user?.password_hash ?? (await dummy()), password).catch(() => false);
    if (!user || !valid) {
      await this.recordFailure(keys);
      throw new HttpError(401, "invalid_credentials", INVALID_LOGIN);
    }
    await this.db.query("delete from login_failures where key = $1", [keys[0]]);
    return this.issue(this.db, user.id, randomUUID());
  }

  /**
   * Rotates a refresh token: the presented one is used up and a new one of the same family issued. A
   * token presented again (stolen, or replayed) revokes its whole family, the thief's and the owner's.
   */
  async refresh(refreshToken: string): Promise<TokenPair> {
    const outcome = await this.db.transaction(async (tx) => {
      const { rows } = await tx.query<{
        id: string;
        user_id: string;
        family_id: string;
        used_at: Date | null;
        revoked_at: Date | null;
        expired: boolean;
        deleted: boolean;
      }>(
        `select t.id, t.user_id, t.family_id, t.used_at, t.revoked_at, t.expires_at < now() as expired,
                u.deleted_at is not null as deleted
           from refresh_tokens t join users u on u.id = t.user_id
          where t.token_hash = $1 for update of t`,
        [sha256(refreshToken)],
      );
      const token = rows[0];
      if (!token) return { error: "unknown" as const };
      if (token.used_at || token.revoked_at) {
        await tx.query(
          "update refresh_tokens set revoked_at = coalesce(revoked_at, now()) where family_id = $1",
          [token.family_id],
        );
        return { error: "reused" as const };
      }
      if (token.expired || token.deleted) return { error: "expired" as const };
      await tx.query("update refresh_tokens set used_at = now() where id = $1", [token.id]);
      return { pair: await this.issue(tx, token.user_id, token.family_id) };
    });
    if ("pair" in outcome && outcome.pair) return outcome.pair;
    throw new HttpError(
      401,
      "invalid_refresh_token",
      outcome.error === "reused"
        ? "refresh token was already used; its session has been revoked, log in again"
        : "refresh token is not valid",
    );
  }

  /** Ends the session the refresh token belongs to. Unknown tokens are ignored (idempotent). */
  async logout(refreshToken: string): Promise<void> {
    await this.db.query(
      `update refresh_tokens set revoked_at = coalesce(revoked_at, now())
        where family_id = (select family_id from refresh_tokens where token_hash = $1)`,
      [sha256(refreshToken)],
    );
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
    const { rows } = await this.db.query("select 1 from users where id = $1 and deleted_at is null", [
      subject,
    ]);
    if (rows.length === 0) throw new HttpError(401, "unauthorized", "access token is not valid");
    return subject!;
  }

  private async issue(db: Queryable, userId: string, familyId: string): Promise<TokenPair> {
    const refreshToken = randomBytes(32).toString("base64url");
    await db.query(
      `insert into refresh_tokens (id, user_id, family_id, token_hash, expires_at)
       values ($1, $2, $3, $4, now() + $5 * interval '1 second')`,
      [randomUUID(), userId, familyId, sha256(refreshToken), this.settings.refreshTtlSeconds],
    );
    const accessToken = await new SignJWT({})
      .setProtectedHeader({ alg: ALGORITHM, typ: "at+jwt" })
      .setSubject(userId)
      .setIssuer(this.settings.issuer)
      .setAudience(this.settings.audience)
      .setIssuedAt()
      .setJti(randomUUID())
      .setExpirationTime(`${this.settings.accessTtlSeconds}s`)
      .sign(this.key);
    return {
      access_token: accessToken,
      refresh_token: refreshToken,
      token_type: "Bearer",
      expires_in: this.settings.accessTtlSeconds,
    };
  }

  private async assertNotThrottled(keys: string[]): Promise<void> {
    const { rows } = await this.db.query<{ failures: number; retry: number }>(
      `select failures, ceil(extract(epoch from (first_at + $2 * interval '1 second' - now())))::int as retry
         from login_failures where key = any($1) and first_at > now() - $2 * interval '1 second'`,
      [keys, this.settings.throttleWindowSeconds],
    );
    const blocked = rows.filter((row) => row.failures >= this.settings.maxFailures);
    if (blocked.length > 0) {
      const retry = Math.max(...blocked.map((row) => row.retry));
      throw new HttpError(429, "too_many_attempts", `too many failed logins; try again in ${retry} s`, {
        retry_after: retry,
      });
    }
  }

  private async recordFailure(keys: string[]): Promise<void> {
    for (const key of keys) {
      await this.db.query(
        `insert into login_failures (key, failures, first_at) values ($1, 1, now())
         on conflict (key) do update set
           failures = case when login_failures.first_at > now() - $2 * interval '1 second' then login_failures.failures + 1 else 1 end,
           first_at = case when login_failures.first_at > now() - $2 * interval '1 second' then login_failures.first_at else now() end`,
        [key, this.settings.throttleWindowSeconds],
      );
    }
  }
}
