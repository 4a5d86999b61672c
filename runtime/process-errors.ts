// What the runtime does with an error nothing caught. One process serves every tenant's API calls,
// terminals, gateway requests and operations: Node's default (print and exit) would let one bad input from
// one sandbox stop all of them, and a loop of it keep the platform down. So an unhandled rejection or an
// uncaught exception is logged with its stack, counted in /metrics (agent_sandbox_unhandled_errors_total),
// and survived; each is a defect to fix at its cause, found by that log line and that counter.
//
// What still exits: an error that says Node's own state is broken (an internal assertion), where serving on
// would be serving from a process that can no longer be trusted. Out-of-memory is not catchable and ends the
// process as before; the supervisor (systemd, `npm run local`'s loop) starts it again.

/** Node's error codes after which the process must not go on. */
const FATAL_CODES = new Set(["ERR_INTERNAL_ASSERTION"]);

export interface ProcessErrorPolicyOptions {
  readonly log: (message: string, fields: Record<string, unknown>) => void;
  readonly count: (kind: "rejection" | "exception") => void;
  readonly exit?: (code: number) => void;
  readonly target?: NodeJS.Process;
}

/** Whether `error` leaves the process in a state it must not serve from. */
export function fatalProcessError(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === "string" && FATAL_CODES.has(code);
}

function describe(error: unknown): Record<string, unknown> {
  if (error instanceof Error)
    return {
      error: error.message,
      name: error.name,
      ...((error as { code?: unknown }).code ? { code: (error as { code?: unknown }).code } : {}),
      stack: error.stack,
    };
  return { error: String(error) };
}

/** Installs the policy on `target` (the process); returns what removes it. */
export function installProcessErrorPolicy(options: ProcessErrorPolicyOptions): () => void {
  const target = options.target ?? process;
  const exit = options.exit ?? ((code: number) => target.exit(code));
  const onRejection = (reason: unknown) => {
    options.count("rejection");
    options.log("unhandled rejection: logged and survived", { ...describe(reason), kind: "rejection" });
    if (fatalProcessError(reason)) exit(1);
  };
  const onException = (error: unknown, origin: string) => {
    options.count("exception");
    const fatal = fatalProcessError(error);
    options.log(
      `uncaught exception: ${fatal ? "the process cannot go on, exiting" : "logged and survived"}`,
      {
        ...describe(error),
        kind: "exception",
        origin,
      },
    );
    if (fatal) exit(1);
  };
  target.on("unhandledRejection", onRejection);
  target.on("uncaughtException", onException);
  return () => {
    target.off("unhandledRejection", onRejection);
    target.off("uncaughtException", onException);
  };
}
