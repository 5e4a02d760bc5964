import { systemClock, type Clock } from '../clock.js';
import type { Coordination, SlidingWindowResult, TokenBucketResult } from './types.js';

/** Counters and JSON values under this prefix survive restarts through CoordPersistence. */
export const PERSIST_PREFIX = 'persist:';

/** A persistent entry as CoordPersistence stores and reloads it. `expiresAt` is epoch ms. */
export type PersistentEntry =
  | { key: string; kind: 'counter'; value: number; expiresAt: number }
  | { key: string; kind: 'json'; json: string; expiresAt: number | null };

// Incremental sweep: every SWEEP_EVERY operations, examine up to SWEEP_BATCH entries. Each
// operation creates at most one entry and the sweep examines several per operation, so
// expired state cannot accumulate, and no call ever pays for a full scan.
const SWEEP_EVERY = 64;
const SWEEP_BATCH = 256;

interface CounterEntry {
  value: number;
  expiresAt: number;
}

interface JsonEntry {
  /** Serialized: callers get a fresh copy on every read, as they would from Redis. */
  json: string;
  /** Infinity when the value has no TTL. */
  expiresAt: number;
}

interface BucketEntry {
  tokens: number;
  ts: number;
  /** When the bucket is full again: from then on it is the same as an absent bucket. */
  fullAt: number;
}

interface LeaseEntry {
  owner: string;
  expiresAt: number;
}

/** Event timestamps of one sliding window, oldest first, in a growable circular buffer. */
class EventWindow {
  private buf: number[] = new Array<number>(8).fill(0);
  private head = 0;
  len = 0;
  windowMs = 0;

  at(i: number): number {
    return this.buf[(this.head + i) & (this.buf.length - 1)];
  }

  newest(): number {
    return this.at(this.len - 1);
  }

  /** Drops events at or before `cutoff` (they have left the window). */
  evict(cutoff: number): void {
    const mask = this.buf.length - 1;
    while (this.len > 0 && this.buf[this.head] <= cutoff) {
      this.head = (this.head + 1) & mask;
      this.len--;
    }
  }

  push(t: number): void {
    if (this.len === this.buf.length) this.grow();
    // A clock stepping backwards must not break the ordering eviction relies on.
    if (this.len > 0 && t < this.newest()) t = this.newest();
    this.buf[(this.head + this.len) & (this.buf.length - 1)] = t;
    this.len++;
  }

  private grow(): void {
    const next = new Array<number>(this.buf.length * 2).fill(0);
    for (let i = 0; i < this.len; i++) next[i] = this.at(i);
    this.buf = next;
    this.head = 0;
  }
}

/** Bounded list of strings; the oldest value is overwritten when full. */
class Ring {
  private items: string[];
  private head = 0;
  private len = 0;

  constructor(readonly size: number) {
    this.items = new Array<string>(size);
  }

  push(value: string): void {
    if (this.len < this.size) {
      this.items[(this.head + this.len) % this.size] = value;
      this.len++;
    } else {
      this.items[this.head] = value;
      this.head = (this.head + 1) % this.size;
    }
  }

  toArray(): string[] {
    const out = new Array<string>(this.len);
    for (let i = 0; i < this.len; i++) out[i] = this.items[(this.head + i) % this.size];
    return out;
  }

  /** A copy holding the newest `size` values. */
  resized(size: number): Ring {
    const next = new Ring(size);
    const all = this.toArray();
    for (let i = Math.max(0, all.length - size); i < all.length; i++) next.push(all[i]);
    return next;
  }
}

/** Permits of one semaphore: holder → expiry. */
class Permits {
  readonly holders = new Map<string, number>();
  /** Lower bound of the earliest expiry; exact after purge(). Lets full semaphores refuse in O(1). */
  minExpiry = Infinity;

  purge(now: number): void {
    if (this.minExpiry > now) return;
    let min = Infinity;
    for (const [holder, exp] of this.holders) {
      if (exp <= now) this.holders.delete(holder);
      else if (exp < min) min = exp;
    }
    this.minExpiry = min;
  }
}

// Argument checks, shared with the Redis adapter: a bad value must fail loudly, not turn into
// NaN state, a fractional list index or a bucket that never refills.
export function checkWindowArgs(limit: number, windowMs: number): void {
  if (!Number.isInteger(limit) || limit < 0 || !(windowMs > 0 && windowMs < Infinity)) {
    throw new RangeError(`slidingWindow: need an integer limit >= 0 and 0 < windowMs < Infinity (got ${limit}, ${windowMs})`);
  }
}

export function checkBucketArgs(capacity: number, refillPerSec: number, cost: number): void {
  if (!(capacity > 0 && capacity < Infinity && refillPerSec > 0 && refillPerSec < Infinity && cost >= 0 && cost <= capacity)) {
    throw new RangeError(
      `tokenBucket: need 0 < capacity < Infinity, 0 < refillPerSec < Infinity and 0 <= cost <= capacity (got ${capacity}, ${refillPerSec}, ${cost})`,
    );
  }
}

export function checkRingSize(size: number): void {
  if (!Number.isInteger(size) || size < 1) throw new RangeError(`ringPush: size must be a positive integer (got ${size})`);
}

/**
 * Coordination for a single instance, in process memory. Every call is O(1) amortized (the
 * semaphore is O(holders) only when a full semaphore has an expired permit to reclaim).
 * Counters and JSON values under `persist:` are tracked for CoordPersistence.
 */
export class MemoryCoordination implements Coordination {
  readonly kind = 'memory' as const;
  private readonly clock: Clock;

  private readonly counters = new Map<string, CounterEntry>();
  private readonly jsons = new Map<string, JsonEntry>();
  private readonly windows = new Map<string, EventWindow>();
  private readonly buckets = new Map<string, BucketEntry>();
  private readonly rings = new Map<string, Ring>();
  private readonly leases = new Map<string, LeaseEntry>();
  private readonly semaphores = new Map<string, Permits>();

  private readonly dirtyCounters = new Set<string>();
  private readonly dirtyJsons = new Set<string>();

  private opsUntilSweep = SWEEP_EVERY;
  private sweepBudget = SWEEP_BATCH;
  private readonly sweeper: Generator<void, never, void> = this.sweepForever();

  constructor(opts: { clock?: Clock } = {}) {
    this.clock = opts.clock ?? systemClock;
  }

  async slidingWindow(key: string, limit: number, windowMs: number): Promise<SlidingWindowResult> {
    checkWindowArgs(limit, windowMs);
    this.tick();
    const now = this.clock.now();
    let w = this.windows.get(key);
    if (w === undefined) {
      w = new EventWindow();
      this.windows.set(key, w);
    }
    w.windowMs = windowMs;
    w.evict(now - windowMs);
    if (w.len < limit) {
      w.push(now);
      return { allowed: true, count: w.len, retryAfterMs: 0 };
    }
    // Enough events must leave for one more to fit: the (len - limit)th oldest is the last of them.
    const idx = w.len - limit;
    const retryAfterMs = idx < w.len ? w.at(idx) + windowMs - now : windowMs;
    return { allowed: false, count: w.len, retryAfterMs };
  }

  async tokenBucket(key: string, capacity: number, refillPerSec: number, cost = 1): Promise<TokenBucketResult> {
    checkBucketArgs(capacity, refillPerSec, cost);
    this.tick();
    const now = this.clock.now();
    let b = this.buckets.get(key);
    let tokens = capacity;
    let ts = now;
    if (b !== undefined) {
      tokens = b.tokens;
      ts = b.ts;
      // The same arithmetic, in the same order, as the Redis script, so both adapters agree exactly.
      if (now > ts) {
        tokens = Math.min(capacity, tokens + ((now - ts) * refillPerSec) / 1000);
        ts = now;
      }
      if (tokens > capacity) tokens = capacity;
    }
    let allowed = false;
    let retryAfterMs = 0;
    if (tokens >= cost) {
      tokens -= cost;
      allowed = true;
    } else {
      retryAfterMs = Math.ceil(((cost - tokens) * 1000) / refillPerSec);
    }
    const resetMs = Math.ceil(((capacity - tokens) * 1000) / refillPerSec);
    if (b === undefined) {
      b = { tokens, ts, fullAt: now + resetMs };
      this.buckets.set(key, b);
    } else {
      b.tokens = tokens;
      b.ts = ts;
      b.fullAt = now + resetMs;
    }
    return { allowed, remaining: Math.floor(tokens), retryAfterMs, resetMs };
  }

  async incr(key: string, by: number, ttlMs: number): Promise<number> {
    this.tick();
    const now = this.clock.now();
    let c = this.counters.get(key);
    if (c === undefined) {
      c = { value: by, expiresAt: now + ttlMs };
      this.counters.set(key, c);
    } else if (c.expiresAt <= now) {
      c.value = by;
      c.expiresAt = now + ttlMs;
    } else {
      c.value += by;
    }
    if (key.startsWith(PERSIST_PREFIX)) this.dirtyCounters.add(key);
    return c.value;
  }

  addLater(key: string, by: number, ttlMs: number): void {
    void this.incr(key, by, ttlMs);
  }

  async getCounter(key: string): Promise<number> {
    return this.counterValue(key, this.clock.now());
  }

  async getCounters(keys: string[]): Promise<number[]> {
    const now = this.clock.now();
    const out = new Array<number>(keys.length);
    for (let i = 0; i < keys.length; i++) out[i] = this.counterValue(keys[i], now);
    return out;
  }

  async setCounter(key: string, value: number, ttlMs: number): Promise<void> {
    this.tick();
    const expiresAt = this.clock.now() + ttlMs;
    const c = this.counters.get(key);
    if (c === undefined) this.counters.set(key, { value, expiresAt });
    else {
      c.value = value;
      c.expiresAt = expiresAt;
    }
    if (key.startsWith(PERSIST_PREFIX)) this.dirtyCounters.add(key);
  }

  async ringPush(key: string, value: string, size: number): Promise<string[]> {
    checkRingSize(size);
    let r = this.rings.get(key);
    if (r === undefined) {
      r = new Ring(size);
      this.rings.set(key, r);
    } else if (r.size !== size) {
      r = r.resized(size);
      this.rings.set(key, r);
    }
    r.push(value);
    return r.toArray();
  }

  async ringRead(key: string): Promise<string[]> {
    return this.rings.get(key)?.toArray() ?? [];
  }

  async ringClear(key: string): Promise<void> {
    this.rings.delete(key);
  }

  async acquireLease(key: string, owner: string, ttlMs: number): Promise<boolean> {
    this.tick();
    const now = this.clock.now();
    const l = this.leases.get(key);
    if (l === undefined) {
      this.leases.set(key, { owner, expiresAt: now + ttlMs });
      return true;
    }
    if (l.owner !== owner && l.expiresAt > now) return false;
    l.owner = owner;
    l.expiresAt = now + ttlMs;
    return true;
  }

  async releaseLease(key: string, owner: string): Promise<void> {
    if (this.leases.get(key)?.owner === owner) this.leases.delete(key);
  }

  async leaseHolder(key: string): Promise<string | null> {
    const l = this.leases.get(key);
    return l !== undefined && l.expiresAt > this.clock.now() ? l.owner : null;
  }

  async semaphoreAcquire(key: string, holder: string, limit: number, ttlMs: number): Promise<boolean> {
    this.tick();
    const now = this.clock.now();
    let p = this.semaphores.get(key);
    if (p === undefined) {
      p = new Permits();
      this.semaphores.set(key, p);
    }
    p.purge(now);
    // A holder re-acquiring refreshes its permit; it never takes a second one.
    if (!p.holders.has(holder) && p.holders.size >= limit) return false;
    const exp = now + ttlMs;
    p.holders.set(holder, exp);
    if (exp < p.minExpiry) p.minExpiry = exp;
    return true;
  }

  async semaphoreRelease(key: string, holder: string): Promise<void> {
    const p = this.semaphores.get(key);
    if (p === undefined) return;
    p.holders.delete(holder);
    if (p.holders.size === 0) this.semaphores.delete(key);
  }

  async semaphoreCount(key: string): Promise<number> {
    const p = this.semaphores.get(key);
    if (p === undefined) return 0;
    p.purge(this.clock.now());
    return p.holders.size;
  }

  async getJson<T>(key: string): Promise<T | null> {
    const j = this.jsons.get(key);
    if (j === undefined || j.expiresAt <= this.clock.now()) return null;
    return JSON.parse(j.json) as T;
  }

  async setJson(key: string, value: unknown, ttlMs?: number): Promise<void> {
    this.tick();
    // JSON.stringify(undefined) is undefined; store it as null like any absent value.
    const json = JSON.stringify(value) ?? 'null';
    const expiresAt = ttlMs === undefined ? Infinity : this.clock.now() + ttlMs;
    const j = this.jsons.get(key);
    if (j === undefined) this.jsons.set(key, { json, expiresAt });
    else {
      j.json = json;
      j.expiresAt = expiresAt;
    }
    if (key.startsWith(PERSIST_PREFIX)) this.dirtyJsons.add(key);
  }

  async ping(): Promise<boolean> {
    return true;
  }

  /** Nothing to release; state stays readable so a final persistence flush after close still works. */
  async close(): Promise<void> {}

  /**
   * Live `persist:` counters and JSON values changed since the previous call, for
   * CoordPersistence. Expired ones are left out: their rows expire on their own.
   */
  dirtyPersistentEntries(): PersistentEntry[] {
    const now = this.clock.now();
    const out: PersistentEntry[] = [];
    for (const key of this.dirtyCounters) {
      const c = this.counters.get(key);
      if (c !== undefined && c.expiresAt > now) out.push({ key, kind: 'counter', value: c.value, expiresAt: c.expiresAt });
    }
    for (const key of this.dirtyJsons) {
      const j = this.jsons.get(key);
      if (j !== undefined && j.expiresAt > now) {
        out.push({ key, kind: 'json', json: j.json, expiresAt: j.expiresAt === Infinity ? null : j.expiresAt });
      }
    }
    this.dirtyCounters.clear();
    this.dirtyJsons.clear();
    return out;
  }

  /** Reloads persisted entries with their original expiry, without marking them dirty. */
  restorePersistent(entries: Iterable<PersistentEntry>): void {
    const now = this.clock.now();
    for (const e of entries) {
      if (e.expiresAt !== null && e.expiresAt <= now) continue;
      if (e.kind === 'counter') this.counters.set(e.key, { value: e.value, expiresAt: e.expiresAt });
      else this.jsons.set(e.key, { json: e.json, expiresAt: e.expiresAt ?? Infinity });
    }
  }

  /** Number of stored entries of every kind, expired ones not yet swept included (metrics, tests). */
  size(): number {
    return (
      this.counters.size +
      this.jsons.size +
      this.windows.size +
      this.buckets.size +
      this.rings.size +
      this.leases.size +
      this.semaphores.size
    );
  }

  private counterValue(key: string, now: number): number {
    const c = this.counters.get(key);
    return c !== undefined && c.expiresAt > now ? c.value : 0;
  }

  private tick(): void {
    if (--this.opsUntilSweep > 0) return;
    this.opsUntilSweep = SWEEP_EVERY;
    this.sweepBudget = SWEEP_BATCH;
    this.sweeper.next();
  }

  /** Walks every map forever, deleting dead entries, pausing whenever the batch budget is spent. */
  private *sweepForever(): Generator<void, never, void> {
    for (;;) {
      yield* this.sweepMap(this.counters, (c, now) => c.expiresAt <= now);
      yield* this.sweepMap(this.jsons, (j, now) => j.expiresAt <= now);
      yield* this.sweepMap(this.windows, (w, now) => w.len === 0 || w.newest() + w.windowMs <= now);
      yield* this.sweepMap(this.buckets, (b, now) => b.fullAt <= now);
      yield* this.sweepMap(this.leases, (l, now) => l.expiresAt <= now);
      yield* this.sweepMap(this.semaphores, (p, now) => {
        p.purge(now);
        return p.holders.size === 0;
      });
      // A pass over a small store must still end the step, or an idle loop would spin.
      yield;
    }
  }

  private *sweepMap<V>(map: Map<string, V>, dead: (v: V, now: number) => boolean): Generator<void, void, void> {
    let now = this.clock.now();
    for (const [key, v] of map) {
      if (dead(v, now)) map.delete(key);
      if (--this.sweepBudget <= 0) {
        yield;
        now = this.clock.now();
      }
    }
  }
}
