/**
 * Group commit: items submitted concurrently are written together by one `write` call (one
 * statement, one transaction or one request), and each caller is answered only after the
 * write that holds its item has finished — durability per item is unchanged, the commits
 * (and their WAL flushes) are shared.
 *
 * Batching is "natural" rather than timed: with a write slot free, what has arrived is written
 * on the next tick (a lone item waits no timer); while every slot is busy, arrivals accumulate
 * and the next free slot takes them all (bounded by count and bytes). Batches therefore grow
 * with load and latency stays one write at low load.
 *
 * Used by POST /send (src/mta/intake.ts), the MTA's event posts (notifier.ts) and delivery
 * log, the backend's MTA event webhook, and the outbound webhook worker's loads and records.
 */
export interface BatchOptions {
  /** Writes in flight at once (the rest of the connection pool stays free). */
  maxInFlight: number;
  /** Items per write at most. */
  maxItems: number;
  /** Approximate bytes per write at most (one larger item still goes alone); default: no bound. */
  maxBytes?: number;
  /**
   * When a free slot takes what has arrived. `immediate` (default): after this turn's I/O
   * callbacks, so requests parsed in the same turn join. `microtask`: right after the
   * current synchronous code, so calls made together (the jobs of one queue claim) join and
   * nothing waits for the event loop.
   */
  tick?: 'immediate' | 'microtask';
}

interface Waiter<I, O> {
  item: I;
  bytes: number;
  resolve: (out: O) => void;
  reject: (err: unknown) => void;
}

export class Batcher<I, O> {
  private pending: Waiter<I, O>[] = [];
  private inFlight = 0;
  private scheduled = false;
  private drained: (() => void)[] = [];

  /**
   * `write` returns one result per item, in order. When a write of several items fails and
   * `splitOnError(err)` says the failure may belong to one item, each item is written alone,
   * so one bad item does not fail the others.
   */
  constructor(
    private readonly write: (items: I[]) => Promise<O[]>,
    private readonly opts: BatchOptions,
    private readonly splitOnError: (err: unknown) => boolean = () => false,
  ) {}

  /** Resolves with the item's result once the write holding it has finished. */
  submit(item: I, bytes = 1): Promise<O> {
    return new Promise<O>((resolve, reject) => {
      this.pending.push({ item, bytes, resolve, reject });
      this.schedule();
    });
  }

  /** Resolves when nothing is pending or in flight (shutdown). */
  async drain(): Promise<void> {
    if (this.pending.length === 0 && this.inFlight === 0) return;
    await new Promise<void>((r) => this.drained.push(r));
  }

  private schedule(): void {
    if (this.scheduled || this.inFlight >= this.opts.maxInFlight || this.pending.length === 0) return;
    this.scheduled = true;
    const launch = () => {
      this.scheduled = false;
      this.launch();
    };
    if (this.opts.tick === 'microtask') queueMicrotask(launch);
    else setImmediate(launch);
  }

  private launch(): void {
    const maxBytes = this.opts.maxBytes ?? Infinity;
    while (this.inFlight < this.opts.maxInFlight && this.pending.length > 0) {
      let n = 0;
      let bytes = 0;
      while (n < this.pending.length && n < this.opts.maxItems && (n === 0 || bytes + this.pending[n]!.bytes <= maxBytes)) {
        bytes += this.pending[n]!.bytes;
        n++;
      }
      const batch = this.pending.splice(0, n);
      this.inFlight++;
      void this.run(batch).finally(() => {
        this.inFlight--;
        if (this.pending.length > 0) this.schedule();
        else if (this.inFlight === 0) for (const r of this.drained.splice(0)) r();
      });
    }
  }

  private async run(batch: Waiter<I, O>[]): Promise<void> {
    try {
      const out = await this.write(batch.map((w) => w.item));
      batch.forEach((w, i) => w.resolve(out[i]!));
    } catch (err) {
      if (batch.length > 1 && this.splitOnError(err)) {
        await Promise.all(
          batch.map((w) =>
            this.write([w.item]).then(
              (out) => w.resolve(out[0]!),
              (e: unknown) => w.reject(e),
            ),
          ),
        );
      } else {
        for (const w of batch) w.reject(err);
      }
    }
  }
}
