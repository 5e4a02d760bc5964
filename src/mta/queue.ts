import { Queue } from '../shared/queue/queue.js';
import type { QueueOptions } from '../shared/queue/types.js';
import type { Services } from '../shared/services.js';

/** Queue policy of the MTA (mta.md → Queue). Group key: `<ipPool>:<recipientDomain>`. */
export const MTA_QUEUE: QueueOptions = {
  name: 'mta',
  maxAttempts: 5,
  backoffMs: [30_000, 120_000, 480_000, 1_800_000, 7_200_000],
  timeoutMs: 120_000,
  retainCompleted: 1_000,
  retainFailed: 5_000,
  // A claim by the instance that took the job in uses the payload it still holds (up to
  // 64 MB, a minute): the 100 KB email is not read back from PostgreSQL.
  payloadCache: { maxBytes: 64 * 2 ** 20, maxAgeMs: 60_000 },
};

export function createMtaQueue<P>(s: Pick<Services, 'db' | 'clock'>): Queue<P> {
  return new Queue<P>({ db: s.db, clock: s.clock, options: MTA_QUEUE });
}
