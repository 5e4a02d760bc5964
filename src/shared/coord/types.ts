/**
 * The coordination store: hot shared state of a fleet (throttle windows, counters, breaker
 * ring buffers, connection caps, the leader lock, API rate-limit buckets). One interface,
 * two adapters: memory (one instance) and Redis (many). Every time-dependent operation takes
 * its notion of "now" from the adapter's injected Clock, on both adapters, so behaviour is
 * identical and testable with a ManualClock.
 */
export interface SlidingWindowResult {
  allowed: boolean;
  /** Events in the window after this call (including this one if allowed). */
  count: number;
  /** When not allowed: ms until the oldest event leaves the window. 0 when allowed. */
  retryAfterMs: number;
}

export interface TokenBucketResult {
  allowed: boolean;
  /** Whole tokens left after this call. */
  remaining: number;
  /** When not allowed: ms until enough tokens for this cost. 0 when allowed. */
  retryAfterMs: number;
  /** ms until the bucket is full again. */
  resetMs: number;
}

export interface Coordination {
  readonly kind: 'memory' | 'redis';

  /** Sliding-window limiter: record one event under `key` if fewer than `limit` occurred in the last `windowMs`. */
  slidingWindow(key: string, limit: number, windowMs: number): Promise<SlidingWindowResult>;

  /** Token bucket: take `cost` tokens; the bucket holds `capacity` and refills `refillPerSec` tokens per second. */
  tokenBucket(key: string, capacity: number, refillPerSec: number, cost?: number): Promise<TokenBucketResult>;

  /** Counter with TTL: add `by` and return the new value; the TTL is set when the counter is created. */
  incr(key: string, by: number, ttlMs: number): Promise<number>;
  /**
   * Adds to a counter when nobody waits for the new value and other instances may see the
   * addition a moment later (statistics counted per message). Redis sums these per key and sends
   * them within a second, or sooner with any other call of the same adapter on that key (so its
   * own reads see them); memory applies them at once.
   */
  addLater(key: string, by: number, ttlMs: number): void;
  /** Current value of a counter (0 when absent or expired). */
  getCounter(key: string): Promise<number>;
  /** Several counters in one round trip. */
  getCounters(keys: string[]): Promise<number[]>;
  /** Sets a counter to a value (used to reload persisted state). */
  setCounter(key: string, value: number, ttlMs: number): Promise<void>;

  /** Ring buffer: push a value, keep the last `size`; returns the buffer after the push, oldest first. */
  ringPush(key: string, value: string, size: number): Promise<string[]>;
  ringRead(key: string): Promise<string[]>;
  ringClear(key: string): Promise<void>;

  /** Lease (leader lock): true when `owner` holds `key` after the call; re-acquiring an own lease renews it. */
  acquireLease(key: string, owner: string, ttlMs: number): Promise<boolean>;
  /** Releases only if `owner` holds it. */
  releaseLease(key: string, owner: string): Promise<void>;
  leaseHolder(key: string): Promise<string | null>;

  /** Counting semaphore: take one of `limit` permits for `holder` (expires after ttlMs unless released). */
  semaphoreAcquire(key: string, holder: string, limit: number, ttlMs: number): Promise<boolean>;
  semaphoreRelease(key: string, holder: string): Promise<void>;
  semaphoreCount(key: string): Promise<number>;

  /** Small shared JSON values (breaker state, runtime flags) with optional TTL. */
  getJson<T>(key: string): Promise<T | null>;
  setJson(key: string, value: unknown, ttlMs?: number): Promise<void>;

  /** Health probe for /health. */
  ping(): Promise<boolean>;
  close(): Promise<void>;
}
