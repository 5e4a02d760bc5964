/**
 * Group commit for POST /send (the mechanism: src/shared/batch.ts). One INSERT per request
 * made every request wait for its own WAL flush: intake ran at a few hundred requests per
 * second while the queue's multi-row enqueue does tens of thousands of jobs per second.
 * Concurrent requests are written with one `enqueueMany` statement; each request is answered
 * only after the statement that holds its job has committed (mta.md's durability rule).
 */
import { Batcher, type BatchOptions } from '../shared/batch.js';
import type { Queue } from '../shared/queue/queue.js';
import type { EnqueueInput } from '../shared/queue/types.js';

export type GroupCommitOptions = BatchOptions;

/** Values measured with `npm run bench:mta` (docs/performance-history.md). */
export const INTAKE_BATCH: GroupCommitOptions = { maxInFlight: 4, maxItems: 500, maxBytes: 8 * 1024 * 1024 };

/** SQLSTATE class 22 (data exception): one input the database refused, not the batch's fault. */
const isDataError = (err: unknown): boolean => typeof (err as { code?: unknown })?.code === 'string' && (err as { code: string }).code.startsWith('22');

export class GroupCommit<P> {
  private readonly batcher: Batcher<EnqueueInput<P>, string>;

  constructor(queue: Pick<Queue<P>, 'enqueueMany'>, opts: GroupCommitOptions = INTAKE_BATCH) {
    // One statement per batch; a value the database refuses is retried alone (splitOnError).
    this.batcher = new Batcher((inputs) => enqueueDeduped(queue, inputs), opts, isDataError);
  }

  /**
   * Resolves with the job id once the job is committed; for a dedupe key already used (in
   * the queue or earlier in the same batch) with the existing job's id.
   */
  enqueue(input: EnqueueInput<P>, bytes: number): Promise<string> {
    return this.batcher.submit(input, bytes);
  }

  /** Resolves when nothing is pending or in flight (shutdown). */
  drain(): Promise<void> {
    return this.batcher.drain();
  }
}

/** A repeat inside the batch is written once and answered with the same job id. */
async function enqueueDeduped<P>(queue: Pick<Queue<P>, 'enqueueMany'>, batch: EnqueueInput<P>[]): Promise<string[]> {
  const index = new Map<string, number>();
  const inputs: EnqueueInput<P>[] = [];
  const slot: number[] = [];
  for (const input of batch) {
    const key = input.dedupeKey;
    const seen = key == null ? undefined : index.get(key);
    if (seen !== undefined) {
      slot.push(seen);
      continue;
    }
    if (key != null) index.set(key, inputs.length);
    slot.push(inputs.length);
    inputs.push(input);
  }
  const ids = await queue.enqueueMany(inputs);
  return slot.map((i) => ids[i]!);
}
