import { totalmem } from 'node:os';
import { Queue } from '../shared/queue/queue.js';
import type { QueueOptions } from '../shared/queue/types.js';
import type { Services } from '../shared/services.js';
import { DEFAULT_POLICY } from './policy.js';

/** Queue policy of the MTA (mta.md → Queue). Group key: `<ipPool>:<recipientDomain>`. */
export const MTA_QUEUE: QueueOptions = {
  name: 'mta',
  // Tries, not retries: the first try and policy.queue.retries retries (30 s … 2 h, each once).
  maxAttempts: 1 + DEFAULT_POLICY.queue.retries,
  backoffMs: DEFAULT_POLICY.queue.backoffMs,
  timeoutMs: 120_000,
  retainCompleted: 1_000,
  retainFailed: 5_000,
  // A claim by the instance that took the job in uses the payload it still holds (a minute at
  // most): the 100 KB email is not read back from PostgreSQL, decompressed and parsed. 256 MB
  // holds a backlog of ~2,500 such emails (64 MB measured ×0.96 end to end at 100 KB); a host
  // with less than 4 GB gives it a sixteenth of its memory.
  payloadCache: { maxBytes: Math.min(256 * 2 ** 20, Math.floor(totalmem() / 16)), maxAgeMs: 60_000 },
};

export function createMtaQueue<P>(s: Pick<Services, 'db' | 'clock'>): Queue<P> {
  return new Queue<P>({ db: s.db, clock: s.clock, options: MTA_QUEUE });
}
