/**
 * Re-reads something held in memory, one read at a time. A request during a read makes it
 * read once more afterwards (the change may have committed too late for the read in flight),
 * however many requests came; concurrent callers share the run.
 *
 * invalidate() marks the reads in flight stale: a result whose read overlapped it is not
 * applied, so nothing read before a change can be installed after it.
 */
export interface CoalescingReloadOptions<T> {
  load: () => Promise<T>;
  /** Installs a result no invalidate() overlapped. */
  apply: (value: T) => void;
  /** Handles a failed read once for all callers, and the run resolves; without it the run rejects. */
  onError?: (err: unknown) => void;
}

export class CoalescingReload<T> {
  private generation = 0;
  private running: Promise<void> | null = null;
  private again = false;

  constructor(private readonly o: CoalescingReloadOptions<T>) {}

  /** Reads in flight are stale: their results are dropped. */
  invalidate(): void {
    this.generation++;
  }

  /** Reads now, or joins the run in flight and makes it read once more. */
  run(): Promise<void> {
    if (this.running) {
      this.again = true;
      return this.running;
    }
    // Started on the next microtask so that `running` is set before the loop can end.
    this.running = Promise.resolve().then(() => this.loop());
    return this.running;
  }

  /** Resolves once no run is in flight (never rejects). */
  async idle(): Promise<void> {
    await this.running?.catch(() => {});
  }

  private async loop(): Promise<void> {
    try {
      do {
        this.again = false;
        const generation = this.generation;
        let value: T;
        try {
          value = await this.o.load();
        } catch (err) {
          if (!this.o.onError) throw err;
          this.o.onError(err);
          return;
        }
        if (generation === this.generation) this.o.apply(value);
      } while (this.again);
    } finally {
      // In the same turn as the last check of `again`: a request after it starts a new run.
      this.running = null;
    }
  }
}
