import { z } from "zod";
import { adminRoutes } from "./admin/routes.js";
import { agentRoutes } from "./agent/schemas.js";
import { agentConfigRoutes } from "./agent-config/schemas.js";
import { apiKeyRoutes } from "./auth/api-keys.js";
import { authRoutes } from "./auth/routes.js";
import { execRoutes } from "./exec/schemas.js";
import { fileRoutes } from "./files/schemas.js";
import { frontDoorApiRoutes } from "./front-door/routes.js";
import { createProjectRoute } from "./projects/create.js";
import { forkRoutes } from "./projects/fork.js";
import { projectRoutes } from "./projects/routes.js";
import { createProjectBody } from "./projects/schemas.js";
import { ErrorBody } from "./responses.js";
import type { Answer, RouteDeclaration } from "./route.js";
import { secretRoutes } from "./secrets/routes.js";
import { syncRoutes } from "./sync/routes.js";
import { terminalRoutes } from "./terminal/routes.js";
import { internalsRoutes } from "./internals.js";
import { mcpRoutes } from "./mcp/routes.js";

/** Every route of the API, by resource: the one source of the document. */
export const API_ROUTES: readonly RouteDeclaration[] = [
  ...authRoutes,
  ...apiKeyRoutes,
  ...agentConfigRoutes,
  ...projectRoutes,
  ...forkRoutes,
  ...secretRoutes,
  ...execRoutes,
  ...syncRoutes,
  ...fileRoutes,
  ...terminalRoutes,
  ...agentRoutes,
  ...frontDoorApiRoutes,
  ...adminRoutes,
  ...internalsRoutes,
  ...mcpRoutes,
];

/**
 * A signed-in route's schemes: a session's access token, or (where the route takes one) an API key; a route
 * for long-lived clients takes an API key only.
 */
const securityOf = (op: RouteDeclaration) =>
  op.apiKeys === false
    ? [{ bearer: [] }]
    : op.sessions === false
      ? [{ apiKey: [] }]
      : [{ bearer: [] }, { apiKey: [] }];

/** Whether a route is documented as signed in. */
const signedIn = (op: RouteDeclaration) => op.access !== "anyone" || op.documentedAuth === true;

/** A body limit in words: `8 MiB`. */
const sizeOf = (bytes: number) =>
  bytes % (1024 * 1024) === 0 ? `${bytes / (1024 * 1024)} MiB` : `${bytes / 1024} KiB`;

/**
 * Every status an operation can answer: its own, plus those its shape implies. Fastify parses a body
 * for POST and DELETE whatever the route, so those can always be malformed (400), too large (413) or of
 * another type than JSON (415).
 */
export function answersOf(op: RouteDeclaration): Record<number, Answer> {
  const hasBody = op.method !== "get";
  const answers: Record<number, Answer> = { ...op.responses };
  if (hasBody || op.params || op.query || op.headers)
    answers[400] = "invalid input: `details` names each field and what is wrong with it";
  if (signedIn(op)) answers[401] = "missing, malformed, expired or revoked access token";
  if (hasBody) {
    answers[413] = op.rawBody
      ? "body larger than agent-sandbox:runtime.files.maxBytes"
      : `body larger than ${op.bodyLimit ? sizeOf(op.bodyLimit) : "64 KiB"}`;
    answers[415] = `body of a content type other than ${op.rawBody ?? "application/json"}`;
  }
  // Node refuses a request line and headers past its limit (16 KiB) before any route sees them: a query far
  // beyond the document's lengths is one.
  answers[431] = "request line and headers larger than 16 KiB";
  if (op.database !== false) answers[503] = "the database is unavailable; try again shortly";
  answers[500] = "internal error: `request_id` finds it in the log";
  return answers;
}

/** A schema for embedding in the document: JSON Schema 2020-12 is OpenAPI 3.1's dialect already. */
const jsonSchema = (schema: z.ZodType, io: "input" | "output" = "input"): Record<string, unknown> => {
  const generated = { ...(z.toJSONSchema(schema, { io }) as Record<string, unknown>) };
  delete generated.$schema;
  return generated;
};

const ERROR_REF = { $ref: "#/components/schemas/Error" };

/** The query parameters a request must give (the rest are optional or have defaults). */
const queryRequired = (schema: z.ZodType | undefined): string[] =>
  schema ? (((jsonSchema(schema) as { required?: string[] }).required ?? []) as string[]) : [];

function response(status: number, answer: Answer) {
  if (typeof answer === "string")
    return {
      description: answer,
      ...(status === 429 || status === 503
        ? {
            headers: {
              "Retry-After": { description: "seconds until a retry can pass", schema: { type: "integer" } },
            },
          }
        : {}),
      content: { "application/json": { schema: ERROR_REF } },
    };
  return {
    description: answer.description,
    ...(answer.body
      ? {
          content: {
            [answer.contentType ?? "application/json"]: { schema: jsonSchema(answer.body, "output") },
          },
        }
      : {}),
  };
}

/**
 * OpenAPI 3.1, generated from the same schemas that validate the requests and type the answers;
 * `backends`: the kinds a create may name (the runtime's registry; the platform's three by default).
 */
export function openApiDocument(version: string, backends?: readonly [string, ...string[]]) {
  const paths: Record<string, Record<string, unknown>> = {};
  const createBody = backends && createProjectBody(backends);
  for (const listed of API_ROUTES) {
    const op = createBody && listed === createProjectRoute ? { ...listed, body: createBody } : listed;
    const properties = (schema: z.ZodType | undefined) =>
      schema ? (jsonSchema(schema) as { properties: Record<string, unknown> }).properties : {};
    const parameters = [
      ...Object.entries(properties(op.params)).map(([name, schema]) => ({
        name,
        in: "path",
        required: true,
        schema,
      })),
      ...Object.entries(properties(op.query)).map(([name, schema]) => ({
        name,
        in: "query",
        required: queryRequired(op.query).includes(name),
        schema,
      })),
      ...Object.entries(op.headers ?? {}).map(([name, schema]) => ({
        name,
        in: "header",
        required: !schema.safeParse(undefined).success,
        schema: jsonSchema(schema),
      })),
    ];
    (paths[op.path] ??= {})[op.method] = {
      summary: op.summary,
      ...(signedIn(op) ? { security: op.security ?? securityOf(op) } : {}),
      ...(parameters.length > 0 ? { parameters } : {}),
      ...(op.rawBody
        ? {
            requestBody: {
              required: true,
              content: { [op.rawBody]: { schema: { type: "string", format: "binary" } } },
            },
          }
        : {}),
      ...(op.body
        ? {
            requestBody: {
              required: !op.bodyOptional,
              content: { "application/json": { schema: jsonSchema(op.body) } },
            },
          }
        : {}),
      responses: Object.fromEntries(
        Object.entries(answersOf(op)).map(([status, answer]) => [status, response(Number(status), answer)]),
      ),
    };
  }
  return {
    openapi: "3.1.0",
    info: {
      title: "Agent Sandbox Platform API",
      version,
      description:
        "Every error is `{error, message, details?}`. A documented path asked with a method it does not " +
        "serve answers 405 with an `Allow` header (components.responses.MethodNotAllowed); an unknown path, 404.",
    },
    components: {
      securitySchemes: {
        bearer: {
          type: "http",
          scheme: "bearer",
          description:
            "a signed-in session's access token (a JWT from POST /auth/login), or, where the route takes API keys, an API key (sbx_...)",
        },
        apiKey: {
          type: "apiKey",
          in: "header",
          name: "X-API-Key",
          description: "an API key (POST /auth/api-keys); revocable, long-lived",
        },
        metricsToken: {
          type: "http",
          scheme: "bearer",
          description:
            "the runtime's metrics token: AGENT_SANDBOX_METRICS_TOKEN, or the file metrics.token in its data directory",
        },
      },
      schemas: { Error: jsonSchema(ErrorBody, "output") },
      responses: {
        MethodNotAllowed: {
          description: "the path exists, but not with this method",
          headers: { Allow: { description: "the methods the path serves", schema: { type: "string" } } },
          content: { "application/json": { schema: ERROR_REF } },
        },
      },
    },
    paths,
  };
}
