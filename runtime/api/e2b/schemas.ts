import { z } from "zod";
import { E2bConfig } from "../../../stacks/config.js";
import type { E2bListCursor } from "../../store/e2b-sandboxes.js";
import { route } from "../route.js";
import { MAX_FORKS } from "../../tenants/fork.js";
import { chars } from "../validation.js";

// The E2B control plane's input, as E2B's SDKs send it (E2B's published API: e2b-dev/infra spec/openapi.yml).
// These routes follow E2B's API, not ours: declared through the route layer (the caller and the input are
// checked before any handler), documented in docs/e2b.md, and left out of /openapi.json.

/** Metadata, as E2B keeps it: string to string, a few short pairs. */
const Metadata = z
  .record(chars(1, 128), z.string().max(1024, { message: "must be at most 1024 characters" }))
  .refine((pairs) => Object.keys(pairs).length <= 64, { message: "must have at most 64 keys" });

/** Environment variables every command of the sandbox gets (envd applies them). */
const EnvVars = z
  .record(
    z.string().regex(/^[A-Za-z_][A-Za-z0-9_]{0,255}$/, {
      message: "must be an environment variable name ([A-Za-z_][A-Za-z0-9_]*, at most 256 characters)",
    }),
    z.string().max(32_768, { message: "must be at most 32768 characters" }),
  )
  .refine((vars) => Object.keys(vars).length <= 256, { message: "must have at most 256 variables" });

/** A field of E2B's API this platform does not offer: refused naming it and why, never ignored. */
const unsupported = (why: string) => z.never({ message: why }).optional();

/** A timeout in seconds, from 0 up to `max` (agent-sandbox:runtime.e2b.maxTimeoutSeconds). */
const timeoutSeconds = (max: number) =>
  z
    .number({ message: "must be a number of seconds" })
    .int({ message: "must be a whole number of seconds" })
    .min(0, { message: "must be 0 or more seconds" })
    .max(max, { message: `must be at most ${max} seconds (agent-sandbox:runtime.e2b.maxTimeoutSeconds)` });

/** POST /e2b/v2/sandboxes's body, its timeout bounded by `max`. */
export function newSandboxBody(max: number) {
  return z
    .object({
      templateID: chars(1, 200),
      timeout: timeoutSeconds(max).optional(),
      /** At the timeout, stop the sandbox instead of deleting it. */
      autoPause: z.boolean().optional(),
      /** A stopped sandbox keeps its home, never its memory: accepted, and nothing more is kept. */
      autoPauseMemory: z.boolean().optional(),
      /** With autoPause: paused, the sandbox is woken by its envd's traffic (from its kept home). */
      autoResume: z.object({ enabled: z.boolean() }).strict().optional(),
      /** Every sandbox here is secured (envd takes its access token), whatever is asked. */
      secure: z.boolean().optional(),
      metadata: Metadata.optional(),
      envVars: EnvVars.optional(),
      mcp: z.null().optional(),
      allow_internet_access: unsupported(
        "not supported: a sandbox's egress is its project's allowlist (PATCH /projects/{id})",
      ),
      network: unsupported(
        "not supported: a sandbox's egress is its project's allowlist (PATCH /projects/{id})",
      ),
      iam: unsupported("not supported on this platform"),
      volumeMounts: unsupported("not supported: each sandbox has its own home, kept across stops"),
    })
    .strict()
    .refine((body) => !body.autoResume?.enabled || body.autoPause === true, {
      message:
        "can be enabled only with autoPause (lifecycle.onTimeout 'pause'): only a paused sandbox resumes",
      path: ["autoResume"],
    });
}
const DEFAULTS = E2bConfig.parse({});
export const NewSandboxBody = newSandboxBody(DEFAULTS.maxTimeoutSeconds);

/** POST /e2b/sandboxes/{sandboxID}/timeout's body. */
export function timeoutBody(max: number) {
  return z.object({ timeout: timeoutSeconds(max) }).strict();
}

/** POST /e2b/v2/sandboxes/{sandboxID}/connect's body: the timeout from now (the default when absent). */
export function connectBody(max: number) {
  return z
    .object({
      timeout: timeoutSeconds(max).optional(),
      /** `false`: resume without memory (a reboot); a running sandbox has nothing to resume. */
      memory: z.boolean().optional(),
    })
    .strict();
}

/** Any id the SDK sends: one that is not the caller's sandbox is a 404, as E2B answers it. */
export const SandboxParams = z.object({ sandboxID: chars(1, 100) }).strict();

/** The SDK's metadata filter: `key=value&...` (URLSearchParams), each key and value URI-encoded once more. */
const MetadataFilter = z
  .string()
  .max(8192, { message: "must be at most 8192 characters" })
  .transform((query, ctx) => {
    try {
      return Object.fromEntries(
        [...new URLSearchParams(query)].map(([key, value]) => [
          decodeURIComponent(key),
          decodeURIComponent(value),
        ]),
      );
    } catch {
      ctx.issues.push({
        code: "custom",
        message: "must be key=value pairs joined by &, each key and value URL-encoded",
        input: query,
      });
      return z.NEVER;
    }
  });

const STATES = ["running", "paused"] as const;
/** `running,paused` (the SDK's form, not exploded), or the parameter repeated. */
const StateFilter = z.preprocess(
  (value) => [value].flat().flatMap((v) => (typeof v === "string" ? v.split(",") : [v])),
  z.array(z.enum(STATES, { message: "must be running or paused (comma-separated)" })).min(1),
);

/** A page's cursor as the API hands it out (`x-next-token`): opaque to clients. */
export const encodeCursor = (cursor: E2bListCursor): string =>
  Buffer.from(JSON.stringify([cursor.createdAt, cursor.id])).toString("base64url");

const NextToken = z
  .string()
  .max(512, { message: "must be at most 512 characters" })
  .transform((token, ctx) => {
    try {
      const [createdAt, id] = JSON.parse(Buffer.from(token, "base64url").toString("utf8")) as unknown[];
      if (typeof createdAt === "string" && typeof id === "string" && !Number.isNaN(Date.parse(createdAt)))
        return { createdAt, id };
    } catch {
      // Refused below, as every other token that is not one of ours.
    }
    ctx.issues.push({
      code: "custom",
      message: "is not a token this API handed out (x-next-token)",
      input: token,
    });
    return z.NEVER;
  });

export const ListQuery = z
  .object({
    metadata: MetadataFilter.optional(),
    state: StateFilter.optional(),
    limit: z.coerce
      .number({ message: "must be a whole number from 1 to 100" })
      .int({ message: "must be a whole number from 1 to 100" })
      .min(1, { message: "must be a whole number from 1 to 100" })
      .max(100, { message: "must be a whole number from 1 to 100" })
      .default(100),
    nextToken: NextToken.optional(),
  })
  .strict();

const E2B = "E2B's API (docs/e2b.md)";

export const createSandboxRoute = route({
  method: "post",
  path: "/e2b/v2/sandboxes",
  summary: `${E2B}: create a sandbox (a project of the caller's) and answer once it runs`,
  body: NewSandboxBody,
  access: "user",
  responses: {
    201: "the sandbox runs: its id, envd version and envd access token",
    400: "an unknown template (the message lists this platform's), or a field out of bounds",
    403: "project quota reached",
    429: "too many creations",
    503: "the host has no subnet or SSH port left (the message names the config key; Retry-After)",
    504: "not running within agent-sandbox:runtime.e2b.createWaitSeconds (the project is deleted again)",
  },
});

export const listSandboxesRoute = route({
  method: "get",
  path: "/e2b/v2/sandboxes",
  summary: `${E2B}: the caller's sandboxes, oldest first, filtered by metadata and state; x-next-token pages`,
  query: ListQuery,
  access: "user",
  responses: { 200: "a page of sandboxes" },
});

export const getSandboxRoute = route({
  method: "get",
  path: "/e2b/sandboxes/{sandboxID}",
  summary: `${E2B}: one of the caller's sandboxes`,
  params: SandboxParams,
  access: "user",
  responses: { 200: "the sandbox", 404: "not the caller's sandbox, or none" },
});

export const killSandboxRoute = route({
  method: "delete",
  path: "/e2b/sandboxes/{sandboxID}",
  summary: `${E2B}: kill the sandbox (its project's delete)`,
  params: SandboxParams,
  access: "user",
  responses: { 204: "being deleted", 404: "not the caller's sandbox, or none" },
});

export const setTimeoutRoute = route({
  method: "post",
  path: "/e2b/sandboxes/{sandboxID}/timeout",
  summary: `${E2B}: the sandbox's timeout, from now`,
  params: SandboxParams,
  body: timeoutBody(DEFAULTS.maxTimeoutSeconds),
  access: "user",
  responses: { 204: "set", 404: "not the caller's sandbox, or none" },
});

export const connectSandboxRoute = route({
  method: "post",
  path: "/e2b/v2/sandboxes/{sandboxID}/connect",
  summary: `${E2B}: connect to a running sandbox, its timeout extended`,
  params: SandboxParams,
  body: connectBody(DEFAULTS.maxTimeoutSeconds).optional(),
  bodyOptional: true,
  access: "user",
  responses: {
    200: "the sandbox runs: its envd access token",
    201: "the sandbox was paused and is resumed (started from its kept home): its envd access token",
    404: "not the caller's sandbox, or none",
    409: "the sandbox is in the middle of another operation (stopping, being deleted)",
    500: "its start failed",
    504: "its start did not finish within runtime.e2b.createWaitSeconds (it goes on)",
  },
});

/** POST /e2b/sandboxes/{id}/pause's body: E2B's `memory` (keep memory) is accepted; a pause keeps the home. */
export const PauseBody = z.object({ memory: z.boolean().optional() }).strict();

export const pauseSandboxRoute = route({
  method: "post",
  path: "/e2b/sandboxes/{sandboxID}/pause",
  summary: `${E2B}: pause: the sandbox is stopped, its home kept (its processes end), until connect resumes it`,
  params: SandboxParams,
  body: PauseBody.optional(),
  bodyOptional: true,
  access: "user",
  responses: {
    204: "paused",
    404: "not the caller's sandbox, or none",
    409: "already paused, or in the middle of another operation",
    500: "its stop failed",
    504: "its stop did not finish within runtime.e2b.createWaitSeconds (it goes on)",
  },
});

/** POST /e2b/sandboxes/{sandboxID}/fork's body: how many (1-10), and their timeout from now. */
export function forkBody(max: number) {
  return z
    .object({
      count: z
        .number({ message: "must be a number of forks" })
        .int({ message: "must be a whole number of forks" })
        .min(1, { message: "must be at least 1" })
        .max(MAX_FORKS, { message: `must be at most ${MAX_FORKS} forks` })
        .optional(),
      timeout: timeoutSeconds(max).optional(),
    })
    .strict();
}

export const forkSandboxRoute = route({
  method: "post",
  path: "/e2b/sandboxes/{sandboxID}/fork",
  summary: `${E2B}: fork: count new sandboxes, each with the sandbox's home copied at one point (its processes and memory are not copied)`,
  params: SandboxParams,
  body: forkBody(DEFAULTS.maxTimeoutSeconds).optional(),
  bodyOptional: true,
  access: "user",
  responses: {
    201: "one entry per fork, each `{sandbox}` once it runs or `{error}` (it is then deleted)",
    403: "the forks would pass the project quota; none is made",
    404: "not the caller's sandbox, or none",
    409: "the sandbox is neither running nor paused, or its home cannot be copied",
    429: "too many creations",
  },
});

/** The control plane's routes: registered on the API's port, not in /openapi.json. */
export const e2bControlRoutes = [
  createSandboxRoute,
  listSandboxesRoute,
  getSandboxRoute,
  killSandboxRoute,
  setTimeoutRoute,
  connectSandboxRoute,
  pauseSandboxRoute,
  forkSandboxRoute,
] as const;
