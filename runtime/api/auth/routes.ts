import { z } from "zod";
import { PROJECT, type RateLimit, type RegistrationMode } from "../../../stacks/config.js";
import { HttpError } from "../../errors.js";
import type { Auth } from "../auth.js";
import {
  assertInviteUnused,
  INVITE_CODE,
  redeemInvite,
  type InviteClaims,
  type InviteCodes,
} from "../invites.js";
import { RateLimiter } from "../rate-limit.js";
import { chars } from "../validation.js";
import { route, type Routes } from "../route.js";
import { TokenPairBody, UserIdBody } from "../responses.js";

/**
 * An address as a mail server would take it (RFC 5321 dot-atom local part, a host name of labels without
 * `--`): every string this pattern and {@link EmailAddress}'s lengths allow is also a valid `format: email`
 * to JSON Schema validators, so the document's two keywords and this validator agree.
 */
const EMAIL_PATTERN =
  /^[A-Za-z0-9_'+-]+(?:\.[A-Za-z0-9_'+-]+)*@(?:[A-Za-z0-9]+(?:-[A-Za-z0-9]+)*\.)+[A-Za-z]{2,63}$/;

/** The lengths RFC 5321 bounds, which a pattern cannot count: 64 before the `@`, 63 a domain label. */
export const EmailAddress = z
  .email({ pattern: EMAIL_PATTERN, message: "must be an email address" })
  .max(254)
  // Checked on whatever reached them (a failed pattern does not stop zod's later checks).
  .refine((email) => (email.split("@")[0] ?? "").length <= 64, {
    message: "must have at most 64 characters before the @",
    abort: true,
  })
  .refine((email) => (email.split("@")[1] ?? "").split(".").every((label) => label.length <= 63), {
    message: "must have domain labels of at most 63 characters",
    abort: true,
  });

export const Credentials = z
  .object({
    email: EmailAddress,
    // Long enough to resist guessing; bounded so hashing cannot be used to burn CPU.
    password: chars(12, 1024),
  })
  .strict();

export const RegisterRequest = Credentials.extend({
  /** Required when registration is by invite (`npm run invite` mints one). */
  invite: z
    .string()
    .regex(INVITE_CODE, { message: "must be an invite code as `npm run invite` prints it" })
    .meta({ examples: ["Vb2kX9pQeR1s0Lw3mZt7Aa.1795000000.q0R8pXb7y1dG2hJ4kL6mN8pQ0rS2tU4vW6xY8zA0bC2"] })
    .optional(),
}).strict();

export const LoginRequest = Credentials.extend({ password: chars(1, 1024) }).strict();

export const RefreshRequest = z.object({ refresh_token: chars(1, 512) }).strict();

export const registerRoute = route({
  method: "post",
  path: "/auth/register",
  summary: "Create an account (agent-sandbox:runtime.registration: open, invite or closed)",
  body: RegisterRequest,
  access: "anyone",
  responses: {
    201: { description: "created", body: UserIdBody },
    403: "registration closed, or an invite code needed, not valid, expired or used",
    409: "email taken",
    429: "too many registrations from this address (agent-sandbox:runtime.rateLimits.register)",
  },
});

export const loginRoute = route({
  method: "post",
  path: "/auth/login",
  summary: "Log in: access and refresh tokens",
  body: LoginRequest,
  access: "anyone",
  responses: {
    200: { description: "tokens", body: TokenPairBody },
    401: "invalid email or password",
    429: "too many failed logins for this account or address",
  },
});

export const refreshRoute = route({
  method: "post",
  path: "/auth/refresh",
  summary: "Rotate a refresh token",
  body: RefreshRequest,
  access: "anyone",
  responses: { 200: { description: "tokens", body: TokenPairBody }, 401: "invalid, expired or reused" },
});

export const logoutRoute = route({
  method: "post",
  path: "/auth/logout",
  summary: "End the session",
  body: RefreshRequest,
  access: "anyone",
  responses: { 204: { description: "done" } },
});

export const meRoute = route({
  method: "get",
  path: "/auth/me",
  summary: "The caller",
  access: "user",
  responses: { 200: { description: "user", body: UserIdBody } },
});

/** The routes above, in the document's order. */
export const authRoutes = [registerRoute, loginRoute, refreshRoute, logoutRoute, meRoute] as const;

export interface RegistrationOptions {
  readonly mode: RegistrationMode;
  /** Verifies invite codes: required in `invite` mode. */
  readonly invites?: InviteCodes;
  /** Accounts per client address. */
  readonly rate: RateLimit;
}

const MODE_KEY = `${PROJECT}:runtime.registration`;

/** The account routes: register, login, refresh (rotating), plus logout and the caller's identity. */
export function registerAuthRoutes(routes: Routes, auth: Auth, registration: RegistrationOptions): void {
  const { mode, invites } = registration;
  if (mode === "invite" && !invites) throw new Error(`${MODE_KEY} is invite, but no invite key was given`);
  const limiter = new RateLimiter(
    auth.db,
    "register",
    registration.rate,
    `${PROJECT}:runtime.rateLimits.register`,
    "registrations from this address",
  );

  /** Whether this request may make an account at all: the mode first, the budget second, then work. */
  const admission = (invite: string | undefined): InviteClaims | undefined => {
    switch (mode) {
      case "open":
        return undefined;
      case "closed":
        throw new HttpError(
          403,
          "registration_closed",
          `registration is closed on this platform (${MODE_KEY} is closed); ask its operator for an account`,
        );
      case "invite":
        if (invite === undefined)
          throw new HttpError(
            403,
            "invite_required",
            `registration needs an invite code (${MODE_KEY} is invite); ask the platform's operator for one`,
          );
        return invites!.verify(invite);
      default: {
        const never: never = mode;
        throw new Error(`unknown registration mode ${String(never)}`);
      }
    }
  };

  routes.handle(registerRoute, async ({ request, reply, body: { email, password, invite } }) => {
    const claims = admission(invite);
    await limiter.take(request.ip);
    if (claims) await assertInviteUnused(auth.db, claims);
    const created = await auth.register(
      email,
      password,
      claims ? (tx, userId) => redeemInvite(tx, claims, userId) : undefined,
    );
    return reply.status(201).send(created);
  });
  routes.handle(loginRoute, ({ request, body }) => auth.login(body.email, body.password, request.ip));
  routes.handle(refreshRoute, ({ body }) => auth.refresh(body.refresh_token));
  routes.handle(logoutRoute, async ({ reply, body }) => {
    await auth.logout(body.refresh_token);
    return reply.status(204).send();
  });
  routes.handle(meRoute, ({ userId }) => ({ user_id: userId }));
}
