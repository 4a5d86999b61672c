import { z } from "zod";
import { HttpError } from "../../errors.js";
import type { ApiKeyRow } from "../../store/api-keys.js";
import type { Auth } from "../auth.js";
import { MAX_API_KEYS } from "../auth.js";
import { EmptyBody } from "../projects/schemas.js";
import { route, type Routes } from "../route.js";
import { displayName } from "../validation.js";

export const CreateApiKeyRequest = z
  .object({
    /** What the key is for, shown in lists (`ci`, `my-agent`). */
    name: displayName(100),
    /** Left out: the key never expires (until revoked). */
    expires_in_days: z.int().min(1).max(3650).optional(),
  })
  .strict();

const ApiKeyFields = {
  id: z.uuid(),
  name: z.string(),
  prefix: z
    .string()
    .meta({ description: "the key's first characters, to tell keys apart", examples: ["sbx_Q3v9XkLm"] }),
  created_at: z.iso.datetime(),
  expires_at: z.iso.datetime().nullable(),
};

export const ApiKeyBody = z.object({
  ...ApiKeyFields,
  last_used_at: z.iso.datetime().nullable().meta({ description: "to the minute" }),
});

export const CreatedApiKeyBody = z.object({
  ...ApiKeyFields,
  key: z.string().meta({ description: "the key itself: shown in this answer only (it is stored hashed)" }),
});

export const ApiKeyListBody = z.object({ api_keys: z.array(ApiKeyBody) });

const ApiKeyParams = z.object({ keyId: z.uuid({ message: "must be an API key's id (a UUID)" }) }).strict();

export const createApiKeyRoute = route({
  method: "post",
  path: "/auth/api-keys",
  summary: "Make an API key (a long-lived, revocable credential for programs): with a signed-in session only",
  body: CreateApiKeyRequest,
  access: "user",
  apiKeys: false,
  responses: {
    201: { description: "made: the key is shown this once", body: CreatedApiKeyBody },
    403: "called with an API key: keys are made by a signed-in session",
    409: `the account has ${MAX_API_KEYS} keys already`,
  },
});

export const listApiKeysRoute = route({
  method: "get",
  path: "/auth/api-keys",
  summary: "The caller's API keys that still work (never the keys themselves)",
  access: "user",
  responses: { 200: { description: "the keys, oldest first", body: ApiKeyListBody } },
});

export const revokeApiKeyRoute = route({
  method: "delete",
  path: "/auth/api-keys/{keyId}",
  summary: "Revoke one of the caller's API keys: its next request is refused",
  params: ApiKeyParams,
  body: EmptyBody,
  bodyOptional: true,
  access: "user",
  responses: { 204: { description: "revoked" }, 404: "no such key of the caller's (or revoked already)" },
});

export const apiKeyRoutes = [createApiKeyRoute, listApiKeysRoute, revokeApiKeyRoute] as const;

const iso = (date: Date | null) => date?.toISOString() ?? null;
const view = (key: ApiKeyRow) => ({
  id: key.id,
  name: key.name,
  prefix: key.prefix,
  created_at: key.created_at.toISOString(),
  expires_at: iso(key.expires_at),
});

export function registerApiKeyRoutes(routes: Routes, auth: Auth): void {
  routes.handle(createApiKeyRoute, async ({ reply, userId, body }) => {
    const made = await auth.createApiKey(userId, body.name, body.expires_in_days);
    return reply.status(201).send({ ...view(made), key: made.key });
  });
  routes.handle(listApiKeysRoute, async ({ userId }) => ({
    api_keys: (await auth.listApiKeys(userId)).map((key) => ({
      ...view(key),
      last_used_at: iso(key.last_used_at),
    })),
  }));
  routes.handle(revokeApiKeyRoute, async ({ reply, userId, params }) => {
    if (!(await auth.revokeApiKey(userId, params.keyId)))
      throw new HttpError(404, "not_found", "API key not found (not the caller's, or revoked already)");
    return reply.status(204).send();
  });
}
