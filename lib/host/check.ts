/** One prerequisite's state, as `/healthz` and the bring-up report show it. */
export interface Check {
  readonly name: string;
  readonly ready: boolean;
  /** Where it is (socket, port, version) when ready; why not when it is not. */
  readonly detail: string;
}

/**
 * A piece of the host baseline. `probe` only observes (cheap enough for every `/healthz`);
 * `ensure` converges it to the desired state and is safe to run any number of times.
 */
export interface HostPart {
  readonly name: string;
  probe(): Promise<Check>;
  ensure(log: (line: string) => void): Promise<Check>;
}

/** Runs `probe` with a deadline, turning a hang or a throw into a not-ready check naming the cause. */
export async function probeWithin(part: Pick<HostPart, "name" | "probe">, timeoutMs: number): Promise<Check> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<Check>((resolve) => {
    timer = setTimeout(
      () => resolve({ name: part.name, ready: false, detail: `no answer within ${timeoutMs} ms` }),
      timeoutMs,
    );
  });
  try {
    return await Promise.race([
      part.probe().catch((error: Error) => ({ name: part.name, ready: false, detail: error.message })),
      timeout,
    ]);
  } finally {
    clearTimeout(timer);
  }
}
