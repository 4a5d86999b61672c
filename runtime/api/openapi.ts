import { z } from "zod";
import { LoginRequest, RefreshRequest, RegisterRequest } from "./auth-routes.js";
import {
  CreateProjectBody,
  createProjectBody,
  EmptyBody,
  IdempotencyKey,
  PreferHeader,
  ProjectParams,
  RestoreBody,
  SnapshotBody,
} from "./project-routes.js";
import { JobParams, OperationParams } from "./admin-routes.js";
import { PatchProjectBody } from "./project-settings.js";
import { SyncAnswer, SyncBody } from "./sync-routes.js";
import {
  AdminJobsBody,
  AdminPoolBody,
  AdminOperationsBody,
  AdminProjectsBody,
  CancelBody,
  JobRunBody,
  UnstallBody,
  AuditPageBody,
  BackupStatusBody,
  ErrorBody,
  HealthBody,
  ProjectBody,
  ProjectListBody,
  SessionListBody,
  DriftBody,
  SnapshotListBody,
  TokenPairBody,
  UserIdBody,
} from "./responses.js";
import { AuditQuery, SessionParams } from "./terminal-routes.js";
import { FrontDoorSessionAnswer, FrontDoorSessionBody, FrontDoorTicketQuery } from "./front-door-routes.js";
import {
  GatewayQuery,
  GatewayRequestsBody,
  PutSecretBody,
  SecretChangeBody,
  SecretListBody,
  SecretParams,
} from "./secret-routes.js";
import {
  ExecAuditBody,
  ExecAuditQuery,
  ExecBody,
  ExecResultBody,
  ExecStreamBody,
  ProcessBody,
  ProcessListBody,
  ProcessOutputBody,
  ProcessOutputQuery,
  PortsBody,
  ProcessParams,
  SignalBody,
  SignalResultBody,
} from "./exec-routes.js";
import {
  ARCHIVE_CONTENT_TYPE,
  ArchiveWrittenBody,
  DeleteQuery,
  FILE_CONTENT_TYPE,
  FileDeletedBody,
  FileListBody,
  FileQuery,
  FileWrittenBody,
  ListingQuery,
  ListQuery,
  WriteQuery,
} from "./file-routes.js";

/** One answer: an error (`{error, message, details?}`) when only a description is given. */
type Answer =
  string | { readonly description: string; readonly body?: z.ZodType; readonly contentType?: string };

interface Operation {
  readonly method: "get" | "post" | "put" | "patch" | "delete";
  readonly path: string;
  readonly summary: string;
  readonly body?: z.ZodType;
  /** A body of raw bytes of this content type instead of JSON, up to agent-sandbox:runtime.files.maxBytes. */
  readonly rawBody?: string;
  /** The route's own JSON body limit, where it is not the API's 64 KiB. */
  readonly bodyLimit?: string;
  /** The body may be left out (its schema has a default, or takes nothing). */
  readonly bodyOptional?: boolean;
  readonly params?: z.ZodType;
  readonly query?: z.ZodType;
  /** Header parameters, by the name clients send. */
  readonly headers?: Readonly<Record<string, z.ZodType>>;
  readonly auth: boolean;
  /** Where `auth` is not the bearer JWT alone: the schemes that open it, any one of them. */
  readonly security?: readonly Readonly<Record<string, readonly string[]>>[];
  /** Answers from the database (503 while it is unavailable); all but the two that never ask it. */
  readonly database?: false;
  /**
   * What this route answers on its own. What every route of its kind answers (401, 400, 413, 415, 503,
   * 500) is added by {@link answersOf}, from the operation's shape.
   */
  readonly responses: Readonly<Record<number, Answer>>;
}

const project = { description: "the project", body: ProjectBody };
const recorded = { description: "recorded; the reconciler carries it out", body: ProjectBody };
const notFound = "no such project (another user's project is one)";
const adminOnly = "not an operator (answered as for an unknown path)";
const notRunning = "the sandbox is not running: `details.status` names the project's status";
const noProcess = "no such project, or no such background process of it in this runtime";
const fileAnswers = {
  403: "the agent may not read or write there (`path_outside`: the path resolves out of /home/agent and /workspace)",
  404: "no such project, or no such file or directory",
  409: `${notRunning}; or the path is a directory where a file is asked for, names the root itself, or could not be written`,
} as const;
const binary = z.string().meta({ format: "binary" });

/** Every route of the API with the zod schemas that validate it: the one source of the document. */
export const API_OPERATIONS: readonly Operation[] = [
  {
    method: "post",
    path: "/auth/register",
    summary: "Create an account (agent-sandbox:runtime.registration: open, invite or closed)",
    body: RegisterRequest,
    auth: false,
    responses: {
      201: { description: "created", body: UserIdBody },
      403: "registration closed, or an invite code needed, not valid, expired or used",
      409: "email taken",
      429: "too many registrations from this address (agent-sandbox:runtime.rateLimits.register)",
    },
  },
  {
    method: "post",
    path: "/auth/login",
    summary: "Log in: access and refresh tokens",
    body: LoginRequest,
    auth: false,
    responses: {
      200: { description: "tokens", body: TokenPairBody },
      401: "invalid email or password",
      429: "too many failed logins for this account or address",
    },
  },
  {
    method: "post",
    path: "/auth/refresh",
    summary: "Rotate a refresh token",
    body: RefreshRequest,
    auth: false,
    responses: { 200: { description: "tokens", body: TokenPairBody }, 401: "invalid, expired or reused" },
  },
  {
    method: "post",
    path: "/auth/logout",
    summary: "End the session",
    body: RefreshRequest,
    auth: false,
    responses: { 204: { description: "done" } },
  },
  {
    method: "get",
    path: "/auth/me",
    summary: "The caller",
    auth: true,
    responses: { 200: { description: "user", body: UserIdBody } },
  },
  {
    method: "get",
    path: "/projects",
    summary: "The caller's projects",
    auth: true,
    responses: { 200: { description: "projects", body: ProjectListBody } },
  },
  {
    method: "post",
    path: "/projects",
    summary:
      "Create a project (Idempotency-Key honoured); the answer waits for the sandbox up to agent-sandbox:runtime.createWaitSeconds (less with Prefer)",
    body: CreateProjectBody,
    headers: { "Idempotency-Key": IdempotencyKey, Prefer: PreferHeader },
    auth: true,
    responses: {
      201: {
        description:
          "created and running within the wait (seed 000's answer: `running`, `ssh` with the private key shown this once, `terminal_url`)",
        body: ProjectBody,
      },
      202: {
        description:
          "recorded, not running when the wait ended (or at once with Prefer: respond-async): follow GET /projects/{id}; with the SSH private key (shown this once)",
        body: ProjectBody,
      },
      200: { description: "idempotent repeat, with the same key", body: ProjectBody },
      403: "project quota reached (agent-sandbox:runtime.projectQuota)",
      409: "no subnet or SSH port left, or the Idempotency-Key was used for another request",
      429: "too many creations (agent-sandbox:runtime.rateLimits.createProject)",
    },
  },
  {
    method: "get",
    path: "/projects/{id}",
    summary: "A project, its status and current operation",
    params: ProjectParams,
    auth: true,
    responses: { 200: project, 404: notFound },
  },
  {
    method: "patch",
    path: "/projects/{id}",
    summary:
      "Change a live project: allowlist (no restart), limits (in place), image (next start, or now with restart), protected paths; idle shutdown, drift remediation",
    params: ProjectParams,
    body: PatchProjectBody,
    auth: true,
    responses: {
      200: { description: "project settings changed; nothing to apply to the sandbox", body: ProjectBody },
      202: { description: "recorded; an update of the sandbox's stack applies it", body: ProjectBody },
      404: notFound,
      409: "the image named is not on this platform's engine (`details.image`)",
    },
  },
  {
    method: "get",
    path: "/projects/{id}/secrets",
    summary: "The project's secrets by name, delivery and update time (never their values)",
    params: ProjectParams,
    auth: true,
    responses: { 200: { description: "the secrets", body: SecretListBody }, 404: notFound },
  },
  {
    method: "put",
    path: "/projects/{id}/secrets/{name}",
    summary:
      "Set a secret (write-only; sealed; delivered by an update of the stack as /run/secrets/<name> and an environment variable, or, for model-API keys, by the credential gateway only)",
    params: SecretParams,
    body: PutSecretBody,
    auth: true,
    responses: {
      202: { description: "stored; the update in `operation` delivers it", body: SecretChangeBody },
      404: notFound,
      409: "the project has as many secrets as it may, or `delivery` is gateway for a name that is no model-API key",
    },
  },
  {
    method: "delete",
    path: "/projects/{id}/secrets/{name}",
    summary: "Delete a secret; the update in `operation` removes it from the sandbox",
    params: SecretParams,
    body: EmptyBody,
    bodyOptional: true,
    auth: true,
    responses: {
      202: { description: "deleted; the update in `operation` removes its files", body: SecretChangeBody },
      404: "no such project, or no such secret",
    },
  },
  {
    method: "get",
    path: "/projects/{id}/gateway/requests",
    summary: "Requests the credential gateway forwarded for the project, newest first (never the key)",
    params: ProjectParams,
    query: GatewayQuery,
    auth: true,
    responses: { 200: { description: "the requests", body: GatewayRequestsBody }, 404: notFound },
  },
  {
    method: "post",
    path: "/projects/{id}/exec",
    summary:
      "Run a command in the sandbox as the agent: the answer when it ends (output capped at agent-sandbox:runtime.exec.bufferedOutputBytes per stream, `truncated`), or with `background` at once; a timeout kills its whole process tree, and so does a client that leaves; audited",
    params: ProjectParams,
    body: ExecBody,
    bodyLimit: "8 MiB",
    auth: true,
    responses: {
      200: { description: "it ended (its exit code; 127: no such command)", body: ExecResultBody },
      202: {
        description: "started in the background: follow /projects/{id}/processes/{execId}",
        body: ProcessBody,
      },
      404: notFound,
      409: notRunning,
      429: "the project runs as many background processes as agent-sandbox:runtime.exec.maxBackgroundProcesses allows",
    },
  },
  {
    method: "post",
    path: "/projects/{id}/exec/stream",
    summary:
      "Run a command as POST /projects/{id}/exec does, its output streamed as it comes: NDJSON lines `start`, `stdout`/`stderr` (in order), then `exit` (or `error`); a client that leaves kills the command",
    params: ProjectParams,
    body: ExecStreamBody,
    bodyLimit: "8 MiB",
    auth: true,
    responses: {
      200: {
        description: "one JSON object per line (ExecStreamEvent: start, stdout, stderr, exit, error)",
        body: z.string(),
        contentType: "application/x-ndjson",
      },
      404: notFound,
      409: notRunning,
    },
  },
  {
    method: "get",
    path: "/projects/{id}/processes",
    summary: "The project's background processes started through this runtime, newest first",
    params: ProjectParams,
    auth: true,
    responses: { 200: { description: "the processes", body: ProcessListBody }, 404: notFound },
  },
  // Listed before GET/DELETE …/{execId}: the document's order is the conformance test's, which signals its
  // one background process before it deletes it.
  {
    method: "post",
    path: "/projects/{id}/processes/{execId}/signal",
    summary: "Signal a background process's process groups (KILL: its whole tree)",
    params: ProcessParams,
    body: SignalBody,
    auth: true,
    responses: {
      200: { description: "signalled: how many processes", body: SignalResultBody },
      404: noProcess,
      409: "the process has exited, or the sandbox is not running",
    },
  },
  {
    method: "get",
    path: "/projects/{id}/processes/{execId}",
    summary:
      "A background process: its state, and its output (both streams in order) from a byte offset; the newest agent-sandbox:runtime.exec.backgroundOutputBytes are kept, and agent-sandbox:runtime.exec.backgroundOutputBytesPerProject of all the project's together",
    params: ProcessParams,
    query: ProcessOutputQuery,
    auth: true,
    responses: { 200: { description: "state and output", body: ProcessOutputBody }, 404: noProcess },
  },
  {
    method: "delete",
    path: "/projects/{id}/processes/{execId}",
    summary:
      "Kill a background process's whole tree and forget it: answers its end once it has exited; afterwards it is a 404",
    params: ProcessParams,
    body: EmptyBody,
    bodyOptional: true,
    auth: true,
    responses: { 200: { description: "its end", body: ProcessBody }, 404: noProcess },
  },
  {
    method: "get",
    path: "/projects/{id}/ports",
    summary: "The TCP and UDP ports listening inside the sandbox (address, port, protocol)",
    params: ProjectParams,
    auth: true,
    responses: { 200: { description: "the ports", body: PortsBody }, 404: notFound, 409: notRunning },
  },
  {
    method: "get",
    path: "/projects/{id}/sync",
    summary:
      "The sync mode (manual, auto-commit, auto-idle) and interval the sandbox's sync daemon follows, read from the running sandbox",
    params: ProjectParams,
    auth: true,
    responses: { 200: { description: "the setting", body: SyncAnswer }, 404: notFound, 409: notRunning },
  },
  {
    method: "put",
    path: "/projects/{id}/sync",
    summary:
      "Set the sync mode: written where the sandbox's sync daemon reads it (the agent's home, kept across stop, start and restore); the daemon follows at once",
    params: ProjectParams,
    body: SyncBody,
    auth: true,
    responses: {
      200: { description: "the setting now in force", body: SyncAnswer },
      403: "the agent may not write the setting in its home (a protected path covers ~/.config, or the home is read-only)",
      404: notFound,
      409: notRunning,
    },
  },
  {
    method: "get",
    path: "/projects/{id}/execs",
    summary:
      "The audit of commands run through the API, newest first: who, argv, cwd, environment names, exit code, duration, byte counts, timeout (never stdin, output or environment values)",
    params: ProjectParams,
    query: ExecAuditQuery,
    auth: true,
    responses: { 200: { description: "the execs", body: ExecAuditBody }, 404: notFound },
  },
  {
    method: "put",
    path: "/projects/{id}/files/content",
    summary:
      "Write a file atomically (a temporary file renamed over it) as the agent, with `mode`; parent directories are made; the body is its bytes",
    params: ProjectParams,
    query: WriteQuery,
    rawBody: FILE_CONTENT_TYPE,
    auth: true,
    responses: {
      200: { description: "written: the resolved path, size and mode", body: FileWrittenBody },
      ...fileAnswers,
    },
  },
  {
    method: "get",
    path: "/projects/{id}/files/content",
    summary: "A file's bytes (at most agent-sandbox:runtime.files.maxBytes), read as the agent",
    params: ProjectParams,
    query: FileQuery,
    auth: true,
    responses: {
      200: { description: "the file's bytes", body: binary, contentType: FILE_CONTENT_TYPE },
      413: "the file is larger than agent-sandbox:runtime.files.maxBytes",
      ...fileAnswers,
    },
  },
  {
    method: "get",
    path: "/projects/{id}/files",
    summary:
      "List a directory (default: the workspace root), or stat a file: names, types, sizes, modes, modification times, symlink targets; at most agent-sandbox:runtime.files.maxListEntries entries an answer, `next_cursor` goes on",
    params: ProjectParams,
    query: ListingQuery,
    auth: true,
    responses: { 200: { description: "the entries", body: FileListBody }, ...fileAnswers },
  },
  {
    method: "delete",
    path: "/projects/{id}/files",
    summary: "Delete a file, a symlink (not its target), or with recursive=true a directory",
    params: ProjectParams,
    query: DeleteQuery,
    body: EmptyBody,
    bodyOptional: true,
    auth: true,
    responses: { 200: { description: "deleted", body: FileDeletedBody }, ...fileAnswers },
  },
  {
    method: "put",
    path: "/projects/{id}/files/archive",
    summary:
      "Unpack a tar stream into a directory (default: the workspace root; made when missing) as the agent: modes as archived, owned by the agent",
    params: ProjectParams,
    query: ListQuery,
    rawBody: ARCHIVE_CONTENT_TYPE,
    auth: true,
    responses: {
      200: { description: "unpacked: how many entries", body: ArchiveWrittenBody },
      ...fileAnswers,
    },
  },
  {
    method: "get",
    path: "/projects/{id}/files/archive",
    summary: "A directory (default: the workspace root) or a file as a tar stream",
    params: ProjectParams,
    query: ListQuery,
    auth: true,
    responses: {
      200: { description: "a tar stream", body: binary, contentType: ARCHIVE_CONTENT_TYPE },
      ...fileAnswers,
    },
  },
  {
    method: "post",
    path: "/projects/{id}/start",
    summary: "Start the sandbox",
    params: ProjectParams,
    body: EmptyBody,
    bodyOptional: true,
    auth: true,
    responses: { 202: recorded, 404: notFound },
  },
  {
    method: "post",
    path: "/projects/{id}/stop",
    summary: "Stop the sandbox",
    params: ProjectParams,
    body: EmptyBody,
    bodyOptional: true,
    auth: true,
    responses: { 202: recorded, 404: notFound },
  },
  {
    method: "post",
    path: "/projects/{id}/snapshot",
    summary: "Final backup, then commit the sandbox's system state and push it (the newest 5 are kept)",
    params: ProjectParams,
    body: SnapshotBody,
    bodyOptional: true,
    auth: true,
    responses: { 202: recorded, 404: notFound },
  },
  {
    method: "post",
    path: "/projects/{id}/restore",
    summary: "Run a snapshot (the newest unless named) on the project's volume, and start it",
    params: ProjectParams,
    body: RestoreBody,
    bodyOptional: true,
    auth: true,
    responses: {
      202: recorded,
      404: notFound,
      409: "the project has no snapshot of the tag named (`details.snapshot`)",
    },
  },
  {
    method: "get",
    path: "/projects/{id}/snapshots",
    summary: "The project's snapshots, newest first",
    params: ProjectParams,
    auth: true,
    responses: { 200: { description: "snapshots", body: SnapshotListBody }, 404: notFound },
  },
  {
    method: "get",
    path: "/admin/projects",
    summary: "Operators: every live project with its owner, status, drift and last operation",
    auth: true,
    responses: { 200: { description: "projects", body: AdminProjectsBody }, 404: adminOnly },
  },
  {
    method: "get",
    path: "/admin/operations",
    summary: "Operators: the operations queue (waiting and running)",
    auth: true,
    responses: { 200: { description: "operations", body: AdminOperationsBody }, 404: adminOnly },
  },
  {
    method: "post",
    path: "/admin/operations/{operationId}/cancel",
    summary: "Operators: cancel an operation (a waiting one now; a running one's engine is aborted)",
    params: OperationParams,
    body: EmptyBody,
    bodyOptional: true,
    auth: true,
    responses: {
      202: { description: "cancelled or asked to stop", body: CancelBody },
      404: "no such operation, or not an operator",
      409: "the operation has already finished",
    },
  },
  {
    method: "post",
    path: "/admin/projects/{id}/unstall",
    summary: "Operators: clear a project's stalled drift checks, so that sweeps check it again",
    params: ProjectParams,
    body: EmptyBody,
    bodyOptional: true,
    auth: true,
    responses: {
      200: { description: "cleared", body: UnstallBody },
      404: "no such project, or not an operator",
    },
  },
  {
    method: "get",
    path: "/admin/jobs",
    summary: "Operators: each background job's last run (start, duration, outcome) and its totals",
    auth: true,
    responses: { 200: { description: "jobs", body: AdminJobsBody }, 404: adminOnly },
  },
  {
    method: "get",
    path: "/admin/pool",
    summary:
      "Operators: the warm pool (members ready, being made, failed; claims and misses; why it is short)",
    auth: true,
    responses: { 200: { description: "the pool", body: AdminPoolBody }, 404: adminOnly },
  },
  {
    method: "post",
    path: "/admin/jobs/{job}/run",
    summary:
      "Operators: run a background job now (drift-sweep, idle-shutdown, sandbox-revival); one already running is not started twice",
    params: JobParams,
    body: EmptyBody,
    bodyOptional: true,
    auth: true,
    responses: {
      200: { description: "the run", body: JobRunBody },
      404: "not an operator, or a job this runtime does not run",
    },
  },
  {
    method: "get",
    path: "/projects/{id}/drift",
    summary: "The last drift check of the project's stack: each resource changed or deleted out of band",
    params: ProjectParams,
    auth: true,
    responses: { 200: { description: "drift", body: DriftBody }, 404: notFound },
  },
  {
    method: "get",
    path: "/projects/{id}/backup-status",
    summary: "Last backup time, result and size on the backup remote",
    params: ProjectParams,
    auth: true,
    responses: { 200: { description: "backup status", body: BackupStatusBody }, 404: notFound },
  },
  {
    method: "get",
    path: "/projects/{id}/audit",
    summary: "Every input frame typed in the project's terminals, with user and time (append-only)",
    params: ProjectParams,
    query: AuditQuery,
    auth: true,
    responses: { 200: { description: "entries and next_after", body: AuditPageBody }, 404: notFound },
  },
  {
    method: "get",
    path: "/projects/{id}/sessions",
    summary: "The project's terminal sessions, newest first",
    params: ProjectParams,
    auth: true,
    responses: { 200: { description: "sessions", body: SessionListBody }, 404: notFound },
  },
  {
    method: "get",
    path: "/projects/{id}/sessions/{sessionId}",
    summary: "A session's asciinema v2 recording",
    params: SessionParams,
    auth: true,
    responses: {
      200: { description: "the recording", body: z.string(), contentType: "application/x-asciicast" },
      404: "no such project or session, or its recording is gone",
    },
  },
  {
    method: "delete",
    path: "/projects/{id}",
    summary: "Delete the project and its sandbox",
    params: ProjectParams,
    body: EmptyBody,
    bodyOptional: true,
    auth: true,
    responses: { 202: recorded, 404: notFound },
  },
  {
    method: "get",
    path: "/healthz",
    summary:
      "Readiness: `status` to anyone; each prerequisite's check (versions, paths) to a caller on the runtime's own host, an operator's access token or the metrics token",
    auth: false,
    database: false,
    responses: {
      200: { description: "ready", body: HealthBody },
      401: "an Authorization header that is neither a valid access token nor the metrics token",
      503: { description: "not ready", body: HealthBody },
    },
  },
  {
    method: "get",
    path: "/metrics",
    summary:
      "Prometheus metrics: requests, operations by state, reconciler queue depth. For the metrics token, an operator's access token, or a caller on the runtime's own host",
    auth: true,
    security: [{ bearer: [] }, { metricsToken: [] }],
    responses: {
      200: { description: "text exposition format 0.0.4", body: z.string(), contentType: "text/plain" },
      403: "the access token of someone not an operator (agent-sandbox:runtime.admins)",
    },
  },
  {
    method: "post",
    path: "/projects/{id}/front-door/session",
    summary:
      "A one-time URL (60 s) on a front-door route's own host; opening it sets a host-scoped HttpOnly cookie (an hour) that lets the owner through to the sandbox's dev server (docs/front-door.md)",
    params: ProjectParams,
    body: FrontDoorSessionBody,
    bodyOptional: true,
    auth: true,
    responses: {
      200: { description: "the one-time URL and the route's own URL", body: FrontDoorSessionAnswer },
      404: "no such project of the caller's, or no declared port of this name",
      409: "the project declares no front-door ports, or this platform runs no front door",
    },
  },
  {
    method: "get",
    path: "/front-door/session/{id}",
    summary:
      "Caddy, for `/__sbx/session?ticket=` on a route's host: redeems the one-time ticket, sets the cookie, redirects to `/`",
    params: ProjectParams,
    query: FrontDoorTicketQuery,
    auth: false,
    responses: {
      302: { description: "the cookie is set; Location: /", body: z.string(), contentType: "text/plain" },
      404: { description: "a bad, expired or used ticket", body: z.string(), contentType: "text/html" },
    },
  },
  {
    method: "get",
    path: "/front-door/auth/{id}",
    summary:
      "Caddy's forward-auth before every front-door request: 200 lets the cookie's owner through; 404 for anyone else (the project's existence is not revealed); 503 with a page naming the state when the sandbox is not running",
    params: ProjectParams,
    auth: false,
    responses: {
      200: { description: "the owner: go on to the sandbox", body: z.string(), contentType: "text/plain" },
      404: {
        description: "no cookie, a bad one, or not the owner",
        body: z.string(),
        contentType: "text/html",
      },
      503: { description: "the 'not running' page", body: z.string(), contentType: "text/html" },
    },
  },
  {
    method: "get",
    path: "/openapi.json",
    summary: "This document",
    auth: false,
    database: false,
    responses: { 200: { description: "OpenAPI 3.1", body: z.object({}).loose() } },
  },
];

/**
 * Every status an operation can answer: its own, plus those its shape implies. Fastify parses a body
 * for POST and DELETE whatever the route, so those can always be malformed (400), too large (413) or of
 * another type than JSON (415).
 */
export function answersOf(op: Operation): Record<number, Answer> {
  const hasBody = op.method !== "get";
  const answers: Record<number, Answer> = { ...op.responses };
  if (hasBody || op.params || op.query || op.headers)
    answers[400] = "invalid input: `details` names each field and what is wrong with it";
  if (op.auth) answers[401] = "missing, malformed, expired or revoked access token";
  if (hasBody) {
    answers[413] = op.rawBody
      ? "body larger than agent-sandbox:runtime.files.maxBytes"
      : `body larger than ${op.bodyLimit ?? "64 KiB"}`;
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
      ...(status === 429
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
  for (const listed of API_OPERATIONS) {
    const op = createBody && listed.body === CreateProjectBody ? { ...listed, body: createBody } : listed;
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
      ...(op.auth ? { security: op.security ?? [{ bearer: [] }] } : {}),
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
        bearer: { type: "http", scheme: "bearer", bearerFormat: "JWT" },
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
