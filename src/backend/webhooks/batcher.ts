/**
 * Coalesces concurrent calls into one multi-row query: calls made while no run is in flight
 * start one on the next microtask (no added latency when idle); calls made during a run wait
 * for it and go together in the next one. Same scheme as the queue worker's outcome flush.
 */
export class Batcher<I, O> {
  private waiting: { item: I; resolve: (o: O) => void; reject: (e: unknown) => void }[] = [];
  private running = false;

  constructor(
    private readonly run: (items: I[]) => Promise<O[]>,
    private readonly max = 500,
  ) {}

  call(item: I): Promise<O> {
    return new Promise<O>((resolve, reject) => {
      this.waiting.push({ item, resolve, reject });
      if (!this.running && this.waiting.length === 1) queueMicrotask(() => void this.drain());
    });
  }

  private async drain(): Promise<void> {
    if (this.running) return;
    this.running = true;
    try {
      while (this.waiting.length > 0) {
        const batch = this.waiting.splice(0, this.max);
        try {
          const out = await this.run(batch.map((b) => b.item));
          batch.forEach((b, i) => b.resolve(out[i]));
        } catch (err) {
          for (const b of batch) b.reject(err);
        }
      }
    } finally {
      this.running = false;
    }
  }
}
