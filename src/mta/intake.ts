/**
 * Group commit for POST /send. One INSERT per request made every request wait for its own
 * WAL flush: intake ran at a few hundred requests per second while the queue's multi-row
 * enqueue does tens of thousands of jobs per second. Concurrent requests are collected and
 * written with one `enqueueMany` statement; each request is answered only after the
 * statement that holds its job has committed (the durability rule of mta.md is unchanged).
 *
 * Batching is "natural" rather than timed: with a statement slot free, what has arrived is
 * written on the next turn of the event loop (a lone request waits no timer); while every
 * slot is busy, arrivals accumulate and the next free slot writes them all (bounded by
 * count and bytes). Batches therefore grow with load and latency stays one commit at low load.
 */
import type { Queue } from '../shared/queue/queue.js';
import type { EnqueueInput } from '../shared/queue/types.js';

export interface GroupCommitOptions {
  /** Statements in flight at once (the rest of the pool stays free for workers). */
  maxInFlight: number;
  /** Jobs per statement at most. */
  maxItems: number;
  /** Approximate payload bytes per statement at most (one larger job still goes alone). */
  maxBytes: number;
}

/** Values measured with `npm run bench:mta` (docs/performance.md). */
export const INTAKE_BATCH: GroupCommitOptions = { maxInFlight: 4, maxItems: 500, maxBytes: 8 * 1024 * 1024 };

interface Waiter<P> {
  input: EnqueueInput<P>;
  bytes: number;
  resolve: (jobId: string) => void;
  reject: (err: unknown) => void;
}

/** SQLSTATE class 22 (data exception): one input the database refused, not the batch's fault. */
const isDataError = (err: unknown): boolean => typeof (err as { code?: unknown })?.code === 'string' && (err as { code: string }).code.startsWith('22');

export class GroupCommit<P> {
  private pending: Waiter<P>[] = [];
  private inFlight = 0;
  private scheduled = false;
  private drained: (() => void)[] = [];

  constructor(
    private readonly queue: Pick<Queue<P>, 'enqueueMany'>,
    private readonly opts: GroupCommitOptions = INTAKE_BATCH,
  ) {}

  /**
   * Resolves with the job id once the job is committed; for a dedupe key already used (in
   * the queue or earlier in the same batch) with the existing job's id.
   */
  enqueue(input: EnqueueInput<P>, bytes: number): Promise<string> {
    return new Promise<string>((resolve, reject) => {
      this.pending.push({ input, bytes, resolve, reject });
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
    // setImmediate runs after this turn's I/O callbacks: requests parsed in the same turn join.
    setImmediate(() => {
      this.scheduled = false;
      this.launch();
    });
  }

  private launch(): void {
    while (this.inFlight < this.opts.maxInFlight && this.pending.length > 0) {
      let n = 0;
      let bytes = 0;
      while (n < this.pending.length && n < this.opts.maxItems && (n === 0 || bytes + this.pending[n]!.bytes <= this.opts.maxBytes)) {
        bytes += this.pending[n]!.bytes;
        n++;
      }
      const batch = this.pending.splice(0, n);
      this.inFlight++;
      void this.write(batch).finally(() => {
        this.inFlight--;
        if (this.pending.length > 0) this.schedule();
        else if (this.inFlight === 0) for (const r of this.drained.splice(0)) r();
      });
    }
  }

  private async write(batch: Waiter<P>[]): Promise<void> {
    // A repeat inside the batch is written once and answered with the same job id.
    const index = new Map<string, number>();
    const inputs: EnqueueInput<P>[] = [];
    const slot: number[] = [];
    for (const w of batch) {
      const key = w.input.dedupeKey;
      const seen = key == null ? undefined : index.get(key);
      if (seen !== undefined) {
        slot.push(seen);
        continue;
      }
      if (key != null) index.set(key, inputs.length);
      slot.push(inputs.length);
      inputs.push(w.input);
    }
    try {
      const ids = await this.queue.enqueueMany(inputs);
      batch.forEach((w, i) => w.resolve(ids[slot[i]!]!));
    } catch (err) {
      if (inputs.length > 1 && isDataError(err)) {
        // One value the database refused must not fail the other requests: retry them one by one.
        const each = await Promise.all(inputs.map((input) => this.queue.enqueueMany([input]).then((ids) => ids[0]!, (e: unknown) => ({ err: e }))));
        batch.forEach((w, i) => {
          const r = each[slot[i]!]!;
          if (typeof r === 'string') w.resolve(r);
          else w.reject(r.err);
        });
      } else {
        for (const w of batch) w.reject(err);
      }
    }
  }
}
