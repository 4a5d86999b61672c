// Project secrets (PUT/DELETE /projects/{id}/secrets/{name}, GET /projects/{id}/secrets) and the credential
// gateway's log of a project (GET /projects/{id}/gateway/requests). Values go in and never come out.
import { z } from "zod";
import { GATEWAY_PROVIDERS, gatewayProviderOf } from "../../../components/tenant/secrets.js";
import type { Database } from "../../store/db.js";
import { HttpError } from "../../errors.js";
import type { SecretBox } from "../../secrets.js";
import { gatewayRequests } from "../../store/audit.js";
import { deleteSecret } from "../../store/secrets.js";
import { MAX_SECRET_BYTES, SECRET_NAME, listSecrets, putSecret } from "../../tenants/project-secrets.js";
import { requestOperation, TenantRequestError } from "../../tenants/service.js";
import { EmptyBody, ProjectParams } from "../projects/schemas.js";
import { chars } from "../validation.js";
import { route, type Routes } from "../route.js";
import { notFound } from "../answers.js";

export const SecretParams = z
  .object({
    id: z.uuid({ message: "must be a project id (UUID)" }),
    name: z
      .string()
      .regex(SECRET_NAME, {
        message:
          "must be 1-64 of A-Z, 0-9 and '_', not starting with a digit (an environment variable's name)",
      })
      .meta({ examples: ["ANTHROPIC_API_KEY", "NPM_TOKEN"] }),
  })
  .strict();

const Delivery = z.enum(["env", "file", "gateway"]).meta({
  description:
    "env: /run/secrets/<name> and a variable in the agent's shells; file: the file only; gateway (the default for ANTHROPIC_API_KEY, OPENAI_API_KEY, GEMINI_API_KEY): never inside the sandbox, added by the credential gateway",
});

export const PutSecretBody = z
  .object({
    // Counted in characters, as the document can state it: a quarter of the bytes stored, since a
    // character is at most 4 bytes in UTF-8. The NUL in the pattern is spelt \u0000, which every regex
    // dialect reads alike (`\0` is an octal escape to some).
    value: chars(1, MAX_SECRET_BYTES / 4).regex(/^[^\u0000]*$/, {
      message: "must not contain NUL characters",
    }),
    delivery: Delivery.optional(),
  })
  .strict();

export const SecretBody = z
  .object({ name: z.string(), delivery: Delivery, updated_at: z.iso.datetime() })
  .strict();
export const SecretListBody = z.object({ secrets: z.array(SecretBody) }).strict();
const OperationRef = z.object({ id: z.string(), kind: z.string(), state: z.string() }).strict();
export const SecretChangeBody = z
  .object({
    secret: z.object({
      name: z.string(),
      delivery: Delivery.optional(),
      updated_at: z.iso.datetime().optional(),
    }),
    /** The update of the tenant's stack that writes (or removes) its files. */
    operation: OperationRef,
  })
  .strict();

export const GatewayQuery = z
  .object({ limit: z.coerce.number().int().min(1).max(1000).default(100) })
  .strict();
export const GatewayRequestsBody = z
  .object({
    requests: z.array(
      z
        .object({
          at: z.iso.datetime(),
          provider: z.string(),
          host: z.string(),
          method: z.string(),
          path: z.string(),
          status: z.number().int().nullable(),
          request_bytes: z.number().int(),
          response_bytes: z.number().int(),
          duration_ms: z.number().int(),
          error: z.string().nullable(),
        })
        .strict(),
    ),
  })
  .strict();

export const listSecretsRoute = route({
  method: "get",
  path: "/projects/{id}/secrets",
  summary: "The project's secrets by name, delivery and update time (never their values)",
  params: ProjectParams,
  access: "owner",
  responses: { 200: { description: "the secrets", body: SecretListBody }, 404: notFound },
});

export const putSecretRoute = route({
  method: "put",
  path: "/projects/{id}/secrets/{name}",
  summary:
    "Set a secret (write-only; sealed; delivered by an update of the stack as /run/secrets/<name> and an environment variable, or, for model-API keys, by the credential gateway only)",
  params: SecretParams,
  body: PutSecretBody,
  access: "owner",
  responses: {
    202: { description: "stored; the update in `operation` delivers it", body: SecretChangeBody },
    404: notFound,
    409: "the project has as many secrets as it may, or `delivery` is gateway for a name that is no model-API key",
  },
});

export const deleteSecretRoute = route({
  method: "delete",
  path: "/projects/{id}/secrets/{name}",
  summary: "Delete a secret; the update in `operation` removes it from the sandbox",
  params: SecretParams,
  body: EmptyBody,
  bodyOptional: true,
  access: "owner",
  responses: {
    202: { description: "deleted; the update in `operation` removes its files", body: SecretChangeBody },
    404: "no such project, or no such secret",
  },
});

export const gatewayRequestsRoute = route({
  method: "get",
  path: "/projects/{id}/gateway/requests",
  summary: "Requests the credential gateway forwarded for the project, newest first (never the key)",
  params: ProjectParams,
  query: GatewayQuery,
  access: "owner",
  responses: { 200: { description: "the requests", body: GatewayRequestsBody }, 404: notFound },
});

/** The routes above, in the document's order. */
export const secretRoutes = [
  listSecretsRoute,
  putSecretRoute,
  deleteSecretRoute,
  gatewayRequestsRoute,
] as const;

export interface SecretRoutesOptions {
  readonly db: Database;
  readonly secrets: SecretBox;
}

export function registerSecretRoutes(routes: Routes, options: SecretRoutesOptions): void {
  const { db, secrets } = options;
  const update = async (projectId: string) => {
    try {
      const { operation } = await requestOperation(db, projectId, "update");
      return { id: operation.id, kind: operation.kind, state: operation.state };
    } catch (error) {
      if (error instanceof TenantRequestError) throw new HttpError(error.status, "not_found", error.message);
      throw error;
    }
  };

  routes.handle(listSecretsRoute, async ({ params: { id } }) => {
    return {
      secrets: (await listSecrets(db, id)).map((s) => ({
        name: s.name,
        delivery: s.delivery,
        updated_at: s.updatedAt,
      })),
    };
  });

  routes.handle(putSecretRoute, async ({ reply, params: { id, name }, body }) => {
    // A rule between the path and the body, which no schema of either states: well-formed input the
    // gateway cannot serve, so a conflict (409) naming the field, not a malformed request (400).
    if (body.delivery === "gateway" && gatewayProviderOf(name) === undefined)
      throw new HttpError(
        409,
        "gateway_unavailable",
        `delivery: gateway is for model-API keys only (${Object.values(GATEWAY_PROVIDERS)
          .map((p) => p.secret)
          .join(", ")}); ${name} is not one`,
        { field: "delivery", name },
      );
    let secret;
    try {
      secret = await putSecret(db, secrets, id, name, body.value, body.delivery);
    } catch (error) {
      if (error instanceof RangeError) throw new HttpError(409, "conflict", error.message);
      throw error;
    }
    const operation = await update(id);
    return reply.status(202).send({
      secret: { name: secret.name, delivery: secret.delivery, updated_at: secret.updatedAt },
      operation,
    });
  });

  routes.handle(deleteSecretRoute, async ({ reply, params: { id, name } }) => {
    if (!(await deleteSecret(db, id, name)))
      throw new HttpError(404, "not_found", `project ${id} has no secret ${name}`);
    return reply.status(202).send({ secret: { name }, operation: await update(id) });
  });

  routes.handle(gatewayRequestsRoute, async ({ params: { id }, query: { limit } }) => {
    return { requests: await gatewayRequests(db, id, limit) };
  });
}
