// Which failed operations run again rather than fail: those whose cause was not theirs. A new attempt
// recovers the stack first (runtime/tenants/stack-recovery.ts).

/** Attempts an operation gets when its shared provider or its engine dies under it. */
export const MAX_PROVIDER_ATTEMPTS = 3;
/** Attempts an operation gets while its state backend runs out of space again and again. */
export const MAX_STATE_SPACE_ATTEMPTS = 10;
/** Attempts an operation gets while its sandboxes' cluster goes away again and again. */
export const MAX_CLUSTER_ATTEMPTS = 10;

/** What is known of a failed attempt. */
export interface FailedAttempt {
  readonly attempt: number;
  readonly cancelled: boolean;
  /** The state backend was out of space; `room`: there is room again (the attempt waited for it). */
  readonly stateBackendFull: boolean;
  readonly room: boolean;
  /**
   * The platform its sandbox runs on (a cluster's API server) was out of reach; `back`: it answers again
   * (the attempt waited for it).
   */
  readonly clusterUnreachable: boolean;
  readonly clusterBack: boolean;
  /** The shared provider exited during the attempt. */
  readonly providerExited: boolean;
  /** The attempt's engine was killed, or left a dead engine's lock (asked only when it matters). */
  readonly engineDied: () => Promise<boolean>;
}

/**
 * Why the attempt runs again, or undefined when it fails: the shared provider or its own engine died under
 * it (killed, out of memory; an engine before it took the stack's lock or after), which is not the
 * operation's fault, a bounded number of times; or it waited for room on a full state backend and got it;
 * or for its cluster, gone during it, to answer again.
 */
export async function retryReason(failed: FailedAttempt): Promise<string | undefined> {
  if (failed.cancelled) return undefined;
  if (failed.stateBackendFull) return failed.room ? "its state backend had no space left" : undefined;
  if (failed.clusterUnreachable)
    return failed.clusterBack ? "its cluster's API server was out of reach" : undefined;
  if (failed.attempt >= MAX_PROVIDER_ATTEMPTS) return undefined;
  if (failed.providerExited) return "the shared provider exited during it";
  if (await failed.engineDied()) return "its engine died during it";
  return undefined;
}
