/** A screen of the console: built detached, attached by the router, disposed when the route changes. */
export interface View {
  readonly title: string;
  readonly element: HTMLElement;
  /** After the element is in the document (focus, measuring, starting polls). */
  mounted?(): void;
  /** Stops polls and closes sockets. */
  dispose?(): void;
}

export interface Poller {
  /** Runs the task again as soon as the current run (if any) is over. */
  now(): void;
  stop(): void;
}

/**
 * Calls `task` now and then every `intervalMs` after each call settles (never two at once), until
 * stopped. A hidden tab does not poll; it catches up when shown again.
 */
export function poll(task: () => Promise<void>, intervalMs: number): Poller {
  let timer: ReturnType<typeof setTimeout> | undefined;
  let running = false;
  let again = false;
  let stopped = false;
  const tick = async () => {
    timer = undefined;
    if (stopped) return;
    running = true;
    if (!document.hidden) await task().catch(() => undefined);
    running = false;
    if (stopped) return;
    if (again) {
      again = false;
      void tick();
    } else timer = setTimeout(() => void tick(), intervalMs);
  };
  const now = () => {
    if (stopped) return;
    if (running) again = true;
    else {
      if (timer !== undefined) clearTimeout(timer);
      void tick();
    }
  };
  const onVisible = () => {
    if (!document.hidden) now();
  };
  document.addEventListener("visibilitychange", onVisible);
  void tick();
  return {
    now,
    stop() {
      stopped = true;
      if (timer !== undefined) clearTimeout(timer);
      document.removeEventListener("visibilitychange", onVisible);
    },
  };
}
