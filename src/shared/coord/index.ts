import type { Clock } from '../clock.js';
import type { Logger } from '../log.js';
import { MemoryCoordination } from './memory.js';
import { RedisCoordination } from './redis.js';
import type { Coordination } from './types.js';

export type { Coordination, SlidingWindowResult, TokenBucketResult } from './types.js';
export { MemoryCoordination, PERSIST_PREFIX, type PersistentEntry } from './memory.js';
export { RedisCoordination, type RedisCoordinationOptions } from './redis.js';

/** Redis when a URL is configured (a fleet shares state), otherwise process memory (one instance). */
export function createCoordination(
  opts: { redisUrl?: string; clock?: Clock; keyPrefix?: string; log?: Logger } = {},
): Coordination {
  if (opts.redisUrl) {
    return new RedisCoordination({ url: opts.redisUrl, clock: opts.clock, keyPrefix: opts.keyPrefix, log: opts.log });
  }
  return new MemoryCoordination({ clock: opts.clock });
}
