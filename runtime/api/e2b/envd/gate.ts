// Which sandbox an envd request is for, and whether it may be served: the E2B SDK names the sandbox in
// `E2b-Sandbox-Id` and proves it may use it with the sandbox's envd access token (`X-Access-Token`). Every
// refusal is a ConnectError whose code the SDK maps to its own error classes; /files answers the same as an
// HTTP status (envdHttpStatus).
import { posix } from "node:path";
import { Code, ConnectError } from "@connectrpc/connect";
import type { FastifyBaseLogger } from "fastify";
import type { Auth } from "../../auth.js";
import type { Database } from "../../../store/db.js";
import { liveE2bSandbox } from "../../../store/e2b-sandboxes.js";
import { SandboxNotRunningError } from "../../../sandbox/exec.js";
import { AGENT_HOME, pathProblem } from "../../../sandbox/files.js";
import type { SandboxRunner, SandboxRunners } from "../../../sandbox/runner.js";
import type { ExecLimits } from "../../exec/schemas.js";
import type { FileLimits } from "../../files/schemas.js";
import { WAKE_WAIT_MS, wakeProject, WakeError } from "../../../tenants/wake.js";
import { isEnvdAccessToken } from "../access.js";

export interface EnvdOptions {
  readonly db: Database;
  readonly auth: Auth;
  /** Each project's sandbox, by its backend (runtime/sandbox/runner.ts): what exec and files use. */
  readonly sandboxes: SandboxRunners;
  readonly limits: { readonly exec: ExecLimits; readonly files: FileLimits };
  readonly log: FastifyBaseLogger;
}

/** A live E2B sandbox that a request may use. */
export interface EnvdSandbox {
  readonly projectId: string;
  /** The project's owner: who the audit says ran its commands. */
  readonly ownerId: string;
  /** The environment it was created with: set in every command it runs, under each command's own. */
  readonly envVars: Readonly<Record<string, string>>;
  readonly runner: SandboxRunner;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** The sandbox the headers name, once its access token is checked; a ConnectError says why not. */
export async function openSandbox(
  options: EnvdOptions,
  header: (name: string) => string | undefined,
): Promise<EnvdSandbox> {
  const id = header("e2b-sandbox-id");
  if (!id)
    throw new ConnectError("the E2b-Sandbox-Id header is missing: which sandbox?", Code.InvalidArgument);
  if (!UUID.test(id))
    throw new ConnectError(`sandbox ${id.slice(0, 64)} not found (a sandbox id is a UUID)`, Code.NotFound);
  const sandbox = await liveE2bSandbox(options.db, id.toLowerCase());
  if (!sandbox) throw new ConnectError(`sandbox ${id} not found`, Code.NotFound);
  const token = header("x-access-token");
  if (!isEnvdAccessToken(options.auth, sandbox.project_id, token))
    throw new ConnectError(
      token
        ? `the X-Access-Token is not sandbox ${id}'s envd access token`
        : `the X-Access-Token header is missing: sandbox ${id}'s envd needs its access token`,
      Code.Unauthenticated,
    );
  // Paused and asked to auto-resume: its traffic wakes it, the call held until it runs.
  let state = sandbox.state;
  if (state !== "running" && sandbox.auto_resume) {
    const woken = await wakeProject(options.db, sandbox.project_id, { timeoutMs: WAKE_WAIT_MS }).catch(
      (error: unknown) => {
        throw new ConnectError(
          `sandbox ${id} did not resume: ${(error as Error).message}`,
          error instanceof WakeError && error.reason === "timeout" ? Code.DeadlineExceeded : Code.Unavailable,
        );
      },
    );
    if (woken) state = (await liveE2bSandbox(options.db, sandbox.project_id))?.state ?? state;
  }
  if (state !== "running")
    throw new ConnectError(`sandbox ${id} is ${state}, not running`, Code.FailedPrecondition);
  try {
    const runner = await options.sandboxes(sandbox.project_id);
    return { projectId: sandbox.project_id, ownerId: sandbox.owner_id, envVars: sandbox.env_vars, runner };
  } catch (error) {
    throw notRunning(id, error);
  }
}

/** A sandbox that stopped under a call: FailedPrecondition naming it; anything else as it was. */
export function notRunning(id: string, error: unknown): unknown {
  if (error instanceof SandboxNotRunningError)
    return new ConnectError(`sandbox ${id} is not running: ${error.message}`, Code.FailedPrecondition);
  return error;
}

/**
 * The user a call runs as: E2B's default `user` (or none) is the sandbox's agent user; `root`, and anyone
 * else, is refused, since the platform runs nothing of a tenant's as root.
 */
export function checkUser(user: string | undefined): void {
  if (user === undefined || user === "" || user === "user" || user === "agent") return;
  if (user === "root")
    throw new ConnectError(
      "user root is not available: commands and files run as the sandbox's agent user (E2B's default user `user`)",
      Code.PermissionDenied,
    );
  throw new ConnectError(
    `unknown user ${user.slice(0, 64)}: the sandbox has one user, \`user\` (its agent)`,
    Code.InvalidArgument,
  );
}

/** The user of a Connect call: the SDK sends it as HTTP Basic credentials (`Basic base64(user:)`). */
export function basicUser(authorization: string | null | undefined): string | undefined {
  const match = /^Basic\s+([A-Za-z0-9+/=]+)$/i.exec(authorization ?? "");
  if (!match) return undefined;
  return Buffer.from(match[1]!, "base64").toString("utf8").split(":")[0];
}

/**
 * A path as the sandbox takes it: absolute as given (normalized), or relative to the agent's home. One the
 * platform's files rules refuse outright (empty, NUL, `..`, too long) is an InvalidArgument naming the field.
 */
export function sandboxPath(path: string, field = "path"): string {
  const resolved = path.startsWith("/") ? posix.normalize(path) : posix.join(AGENT_HOME, path);
  const problem = pathProblem(path) ?? pathProblem(resolved);
  if (problem) throw new ConnectError(`${field} ${path.slice(0, 100)} ${problem}`, Code.InvalidArgument);
  return resolved;
}

/** The HTTP status of each ConnectError code envd's HTTP endpoints (/files) answer with; others are 500s. */
const HTTP_STATUS: Partial<Record<Code, number>> = {
  [Code.InvalidArgument]: 400,
  [Code.Unauthenticated]: 401,
  [Code.PermissionDenied]: 403,
  [Code.NotFound]: 404,
  [Code.FailedPrecondition]: 409,
  [Code.AlreadyExists]: 409,
  [Code.ResourceExhausted]: 413,
};

export const envdHttpStatus = (code: Code): number => HTTP_STATUS[code] ?? 500;
