// A request that needs a sandbox the platform put to sleep (runtime/tenants/wake.ts) wakes it and is held
// until it runs; one that finds it stopped by its owner is answered as before (409 naming its status).
import type { FastifyRequest } from "fastify";
import { HttpError } from "../errors.js";
import { SandboxNotRunningError } from "../sandbox/exec.js";
import type { Database } from "../store/db.js";
import { WAKE_WAIT_MS, wakeProject, WakeError } from "../tenants/wake.js";

/** Whether the client of `request` has gone (a held request stops waiting for it). */
export const clientGone = (request: FastifyRequest) => () => request.raw.socket?.destroyed === true;

/** A {@link WakeError} as the answer: 504 when the start goes on past the wait, 500 when it failed. */
export function wakeAnswer(error: unknown): unknown {
  if (!(error instanceof WakeError)) return error;
  return error.reason === "timeout"
    ? new HttpError(504, "wake_timeout", error.message)
    : new HttpError(500, "wake_failed", error.message);
}

/**
 * Runs `action`; when it finds the sandbox not running and the sandbox was asleep, wakes it (the request
 * held while it starts) and runs `action` once more. Anything else `action` throws is thrown as it was.
 */
export async function awake<T>(
  db: Database,
  request: FastifyRequest,
  projectId: string,
  action: () => Promise<T>,
): Promise<T> {
  try {
    return await action();
  } catch (error) {
    if (!(error instanceof SandboxNotRunningError) || error.reason !== undefined) throw error;
    const woken = await wakeProject(db, projectId, {
      timeoutMs: WAKE_WAIT_MS,
      gone: clientGone(request),
    }).catch((failure: unknown) => {
      throw wakeAnswer(failure);
    });
    if (!woken) throw error;
    request.log.info({ project: projectId }, "sandbox woken for a request");
    return await action();
  }
}
