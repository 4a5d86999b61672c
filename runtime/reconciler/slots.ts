/**
 * The operations a reconciler runs at once (`maxConcurrent`). An operation waiting on a tenant (its final
 * backup, room on the state backend) gives its slot back meanwhile, so a sandbox that stalls cannot stall
 * everyone else's work, and takes one again before it goes on: before any newly claimed operation.
 */
export class Slots {
  private busy = 0;
  private readonly waiters: (() => void)[] = [];

  /** `onFree`: called when a slot is free for a new operation (the worker claims another). */
  constructor(
    private readonly max: number,
    private readonly onFree: () => void,
  ) {}

  /** Whether a new operation may take a slot now (none is free while a returning operation waits for one). */
  get free(): boolean {
    return this.busy + this.waiters.length < this.max;
  }

  take(): void {
    this.busy += 1;
  }

  release(): void {
    const next = this.waiters.shift();
    if (next) return next(); // the slot passes straight to an operation coming back from its tenant
    this.busy -= 1;
    this.onFree();
  }

  /** Runs `work` (a wait on a tenant) without holding a slot, and takes one again before returning. */
  async outside<T>(work: () => Promise<T>): Promise<T> {
    this.release();
    try {
      return await work();
    } finally {
      if (this.busy < this.max) this.busy += 1;
      else await new Promise<void>((resolve) => this.waiters.push(resolve));
    }
  }
}
