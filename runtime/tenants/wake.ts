// Waking a sandbox the platform put to sleep: a request that needs a sandbox stopped by the idle shutdown or
// paused (E2B's pause, or its timeout with autoPause) starts it and is held until it runs, instead of being
// refused. A stop the owner asked for stays a stop: only E2B's connect, which is a resume by definition,
// wakes that one too. Concurrent wakers share one start: its idempotency key is the stop it undoes.
import type { Database } from "../store/db.js";
import {
  getOperation,
  newestRunChange,
  operationFinishedOrAfter,
  PLATFORM_STOPS,
  type Operation,
} from "../store/operations.js";
import { requestOperation } from "./service.js";

export { E2B_PAUSE, E2B_TIMEOUT, IDLE_SHUTDOWN } from "../store/operations.js";
/** The prefix of a wake's start; the rest is the id of the stop it undoes. */
const WAKE = "wake-";
/** How long a request is held while the sandbox it needs wakes. */
export const WAKE_WAIT_MS = 120_000;
/** How often a wait looks at the operation when no finish event comes (a reconciler in another process). */
const POLL_MS = 500;

/** Why an operation waited for (a wake's start, a pause's stop) did not succeed: the caller answers with it. */
export class WakeError extends Error {
  constructor(
    readonly reason: "timeout" | "failed",
    message: string,
  ) {
    super(message);
    this.name = "WakeError";
  }
}

/**
 * Starts `projectId` if it is asleep, and waits (at most `timeoutMs`) until that start has finished.
 * Returns false, having done nothing, when the sandbox is not asleep: never stopped, stopped by its owner
 * (unless `anyStop`), or in another operation's hands; the caller then answers as it would have.
 * Throws {@link WakeError} when the start failed or did not finish in time (it goes on in the background).
 */
export async function wakeProject(
  db: Database,
  projectId: string,
  options: { timeoutMs: number; anyStop?: boolean; gone?: () => boolean },
): Promise<boolean> {
  const newest = await newestRunChange(db, projectId);
  if (!newest) return false;
  let start: Operation;
  if (newest.kind === "start" && newest.idempotency_key?.startsWith(WAKE)) {
    // Another waker's start, queued or finished: a finished one that left it stopped is not repeated.
    if (newest.state === "succeeded" || newest.state === "failed" || newest.state === "cancelled")
      return false;
    start = newest;
  } else {
    const platformStop = PLATFORM_STOPS.some((prefix) => newest.idempotency_key?.startsWith(prefix));
    const stopped = newest.kind === "stop" || (newest.kind === "snapshot" && platformStop);
    if (!stopped || newest.state !== "succeeded" || !(platformStop || options.anyStop)) return false;
    start = (await requestOperation(db, projectId, "start", `${WAKE}${newest.id}`)).operation;
  }
  await operationSettled(db, start, options);
  return true;
}

/**
 * Waits (at most `timeoutMs`) for `operation` to finish: succeeded returns, failed or cancelled throws a
 * {@link WakeError} naming it, as does the end of the wait (the operation goes on).
 */
export async function operationSettled(
  db: Database,
  operation: Operation,
  { timeoutMs, gone }: { timeoutMs: number; gone?: () => boolean },
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const now = (await getOperation(db, operation.id))!;
    if (now.state === "succeeded") return;
    if (now.state === "failed" || now.state === "cancelled")
      throw new WakeError(
        "failed",
        `the sandbox's ${now.kind} ${now.state}${now.error ? `: ${now.error}` : ""}`,
      );
    if (Date.now() >= deadline || gone?.())
      throw new WakeError(
        "timeout",
        `the sandbox's ${operation.kind} did not finish within ${Math.round(timeoutMs / 1000)} s; it goes on (operation ${operation.id})`,
      );
    await operationFinishedOrAfter(operation.project_id, Math.min(POLL_MS, deadline - Date.now()));
  }
}
