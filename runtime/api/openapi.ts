import { z } from "zod";
import { Credentials, RefreshRequest } from "./auth-routes.js";
import { CreateProjectBody, ProjectParams, RestoreBody, SnapshotBody } from "./project-routes.js";
import { AuditQuery, SessionParams } from "./terminal-routes.js";

interface Operation {
  readonly method: "get" | "post" | "delete";
  readonly path: string;
  readonly summary: string;
  readonly body?: z.ZodType;
  /** The body may be left out (its schema has a default). */
  readonly bodyOptional?: boolean;
  readonly params?: z.ZodType;
  readonly query?: z.ZodType;
  readonly auth: boolean;
  readonly responses: Record<string, string>;
}

/** Every route of the API with the zod schemas that validate it: the one source of the document. */
export const API_OPERATIONS: readonly Operation[] = [
  {
    method: "post",
    path: "/auth/register",
    summary: "Create an account",
    body: Credentials,
    auth: false,
    responses: { 201: "created", 400: "invalid input", 409: "email taken" },
  },
  {
    method: "post",
    path: "/auth/login",
    summary: "Log in: access and refresh tokens",
    body: Credentials,
    auth: false,
    responses: { 200: "tokens", 401: "invalid email or password", 429: "throttled" },
  },
  {
    method: "post",
    path: "/auth/refresh",
    summary: "Rotate a refresh token",
    body: RefreshRequest,
    auth: false,
    responses: { 200: "tokens", 401: "invalid, expired or reused" },
  },
  {
    method: "post",
    path: "/auth/logout",
    summary: "End the session",
    body: RefreshRequest,
    auth: false,
    responses: { 204: "done" },
  },
  {
    method: "get",
    path: "/auth/me",
    summary: "The caller",
    auth: true,
    responses: { 200: "user", 401: "not authenticated" },
  },
  {
    method: "get",
    path: "/projects",
    summary: "The caller's projects",
    auth: true,
    responses: { 200: "projects", 401: "not authenticated" },
  },
  {
    method: "post",
    path: "/projects",
    summary: "Create a project (Idempotency-Key honoured)",
    body: CreateProjectBody,
    auth: true,
    responses: { 202: "recorded", 200: "idempotent repeat", 400: "invalid input", 409: "no capacity" },
  },
  {
    method: "get",
    path: "/projects/{id}",
    summary: "A project, its status and current operation",
    params: ProjectParams,
    auth: true,
    responses: { 200: "project", 404: "not found" },
  },
  {
    method: "post",
    path: "/projects/{id}/start",
    summary: "Start the sandbox",
    params: ProjectParams,
    auth: true,
    responses: { 202: "recorded", 404: "not found" },
  },
  {
    method: "post",
    path: "/projects/{id}/stop",
    summary: "Stop the sandbox",
    params: ProjectParams,
    auth: true,
    responses: { 202: "recorded", 404: "not found" },
  },
  {
    method: "post",
    path: "/projects/{id}/snapshot",
    summary: "Final backup, then commit the sandbox's system state and push it (the newest 5 are kept)",
    params: ProjectParams,
    body: SnapshotBody,
    bodyOptional: true,
    auth: true,
    responses: { 202: "recorded", 400: "invalid input", 404: "not found" },
  },
  {
    method: "post",
    path: "/projects/{id}/restore",
    summary: "Run a snapshot (the newest unless named) on the project's volume, and start it",
    params: ProjectParams,
    body: RestoreBody,
    bodyOptional: true,
    auth: true,
    responses: { 202: "recorded", 400: "invalid input", 404: "project or snapshot not found" },
  },
  {
    method: "get",
    path: "/projects/{id}/snapshots",
    summary: "The project's snapshots, newest first",
    params: ProjectParams,
    auth: true,
    responses: { 200: "snapshots", 404: "not found" },
  },
  {
    method: "get",
    path: "/projects/{id}/backup-status",
    summary: "Last backup time, result and size on the backup remote",
    params: ProjectParams,
    auth: true,
    responses: { 200: "backup status", 404: "not found" },
  },
  {
    method: "get",
    path: "/projects/{id}/audit",
    summary: "Every input frame typed in the project's terminals, with user and time (append-only)",
    params: ProjectParams,
    query: AuditQuery,
    auth: true,
    responses: { 200: "entries and next_after", 400: "invalid input", 404: "not found" },
  },
  {
    method: "get",
    path: "/projects/{id}/sessions",
    summary: "The project's terminal sessions, newest first",
    params: ProjectParams,
    auth: true,
    responses: { 200: "sessions", 404: "not found" },
  },
  {
    method: "get",
    path: "/projects/{id}/sessions/{sessionId}",
    summary: "A session's asciinema v2 recording (application/x-asciicast)",
    params: SessionParams,
    auth: true,
    responses: { 200: "the recording", 404: "not found" },
  },
  {
    method: "delete",
    path: "/projects/{id}",
    summary: "Delete the project and its sandbox",
    params: ProjectParams,
    auth: true,
    responses: { 202: "recorded", 404: "not found" },
  },
  {
    method: "get",
    path: "/healthz",
    summary: "Readiness of every prerequisite",
    auth: false,
    responses: { 200: "ready", 503: "not ready" },
  },
  {
    method: "get",
    path: "/metrics",
    summary: "Prometheus metrics: requests, operations by state, reconciler queue depth",
    auth: false,
    responses: { 200: "text exposition format" },
  },
  {
    method: "get",
    path: "/openapi.json",
    summary: "This document",
    auth: false,
    responses: { 200: "OpenAPI 3.1" },
  },
];

/** A schema for embedding in the document: JSON Schema 2020-12 is OpenAPI 3.1's dialect already. */
const jsonSchema = (schema: z.ZodType): Record<string, unknown> => {
  const generated = { ...(z.toJSONSchema(schema, { io: "input" }) as Record<string, unknown>) };
  delete generated.$schema;
  return generated;
};

/** OpenAPI 3.1, generated from the same schemas that validate the requests. */
export function openApiDocument(version: string) {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const op of API_OPERATIONS) {
    const params = op.params
      ? (jsonSchema(op.params) as { properties: Record<string, unknown> }).properties
      : {};
    const query = op.query
      ? (jsonSchema(op.query) as { properties: Record<string, unknown> }).properties
      : {};
    (paths[op.path] ??= {})[op.method] = {
      summary: op.summary,
      ...(op.auth ? { security: [{ bearer: [] }] } : {}),
      ...(op.params || op.query
        ? {
            parameters: [
              ...Object.entries(params).map(([name, schema]) => ({
                name,
                in: "path",
                required: true,
                schema,
              })),
              ...Object.entries(query).map(([name, schema]) => ({
                name,
                in: "query",
                required: false,
                schema,
              })),
            ],
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
        Object.entries(op.responses).map(([status, description]) => [status, { description }]),
      ),
    };
  }
  return {
    openapi: "3.1.0",
    info: { title: "Agent Sandbox Platform API", version },
    components: { securitySchemes: { bearer: { type: "http", scheme: "bearer", bearerFormat: "JWT" } } },
    paths,
  };
}
