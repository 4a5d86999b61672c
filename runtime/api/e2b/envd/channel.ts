// A queue a producer pushes into and one server stream reads as an async iterable: what joins a process's
// output or a directory's changes (callbacks) to a Connect handler (an async generator).

/** Items in their order, then an end (or an error); `onBacklog` says when the reader falls behind. */
export class Channel<T> implements AsyncIterable<T> {
  private readonly items: T[] = [];
  private waiting: (() => void) | undefined;
  private ended = false;
  private failure: unknown;

  /** `highWater`: queued items past which `onBacklog(true)` is called, and `onBacklog(false)` once read. */
  constructor(
    private readonly highWater = Infinity,
    private readonly onBacklog: (behind: boolean) => void = () => undefined,
  ) {}

  push(item: T): void {
    if (this.ended) return;
    this.items.push(item);
    if (this.items.length === this.highWater) this.onBacklog(true);
    this.wake();
  }

  end(failure?: unknown): void {
    if (this.ended) return;
    this.ended = true;
    this.failure = failure;
    this.wake();
  }

  get closed(): boolean {
    return this.ended;
  }

  private wake(): void {
    const waiting = this.waiting;
    this.waiting = undefined;
    waiting?.();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<T> {
    for (;;) {
      const item = this.items.shift();
      if (item !== undefined) {
        if (this.items.length === this.highWater - 1) this.onBacklog(false);
        yield item;
        continue;
      }
      if (this.ended) {
        if (this.failure !== undefined) throw this.failure;
        return;
      }
      await new Promise<void>((resolve) => (this.waiting = resolve));
    }
  }
}
