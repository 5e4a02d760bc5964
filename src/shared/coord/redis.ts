import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { systemClock, type Clock } from '../clock.js';
import type { Logger } from '../log.js';
import { checkBucketArgs, checkRingSize, checkWindowArgs } from './memory.js';
import type { Coordination, SlidingWindowResult, TokenBucketResult } from './types.js';

/*
 * Key layout (P = keyPrefix, default `lm:`); each kind has its own namespace, as in memory:
 *   P w:<key>  sliding window   sorted set  member = unique event id, score = event time
 *   P b:<key>  token bucket     hash        t = tokens (float), ts = time of last refill
 *   P c:<key>  counter          hash        v = value, e = logical expiry
 *   P r:<key>  ring buffer      list        RPUSH + LTRIM, so LRANGE is oldest first
 *   P l:<key>  lease            hash        o = owner, e = logical expiry
 *   P s:<key>  semaphore        sorted set  member = holder, score = permit expiry
 *   P j:<key>  JSON value       hash        v = JSON text, e = logical expiry (absent: none)
 *
 * Time is the injected clock's `now`, passed into every script: expiry is decided by comparing
 * stored timestamps with it, exactly as the memory adapter does. The real PEXPIRE is only a
 * garbage-collection backstop, set to ttl + max(ttl, 1 h) so it never fires before the logical
 * expiry, even when a test's ManualClock runs far ahead of real time.
 */

// Shared by every script. Numbers are written with %.17g: Lua's tostring keeps only 14 digits,
// and float state (tokens, counters) must round-trip exactly to agree with the memory adapter.
const PRELUDE = `
local function gc(ms)
  if ms < 0 then ms = 0 end
  return math.ceil(ms + math.max(ms, 3600000))
end
local function extendGc(key, ms)
  local want = gc(ms)
  if redis.call('PTTL', key) < want then redis.call('PEXPIRE', key, want) end
end
local function num(x) return string.format('%.17g', x) end
`;

/** Script name → [number of keys (undefined: passed per call), body]. */
const SCRIPTS = {
  // KEYS: window. ARGV: now, windowMs, limit, member → {allowed, count, retryAfterMs}
  lmcWindow: [
    1,
    `
local key = KEYS[1]
local now, win, limit = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', key, '-inf', num(now - win))
local count = redis.call('ZCARD', key)
if count < limit then
  redis.call('ZADD', key, num(now), ARGV[4])
  extendGc(key, win)
  return {1, count + 1, 0}
end
local idx = count - limit
if idx < count then
  local e = redis.call('ZRANGE', key, idx, idx, 'WITHSCORES')
  return {0, count, tonumber(e[2]) + win - now}
end
return {0, count, win}
`,
  ],
  // KEYS: bucket. ARGV: capacity, refillPerSec, cost, now → {allowed, remaining, retryAfterMs, resetMs}
  lmcBucket: [
    1,
    `
local key = KEYS[1]
local cap, rate, cost, now = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local s = redis.call('HMGET', key, 't', 'ts')
local tokens, ts = cap, now
if s[1] and s[2] then
  tokens, ts = tonumber(s[1]), tonumber(s[2])
  if now > ts then
    tokens = math.min(cap, tokens + ((now - ts) * rate) / 1000)
    ts = now
  end
  if tokens > cap then tokens = cap end
end
local allowed, retry = 0, 0
if tokens >= cost then
  tokens = tokens - cost
  allowed = 1
else
  retry = math.ceil(((cost - tokens) * 1000) / rate)
end
local reset = math.ceil(((cap - tokens) * 1000) / rate)
redis.call('HSET', key, 't', num(tokens), 'ts', num(ts))
redis.call('PEXPIRE', key, gc(reset))
return {allowed, math.floor(tokens), retry, reset}
`,
  ],
  // KEYS: counter. ARGV: by, ttlMs, now → new value (string)
  lmcIncr: [
    1,
    `
local key = KEYS[1]
local by, ttl, now = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local s = redis.call('HMGET', key, 'v', 'e')
if s[1] and s[2] and tonumber(s[2]) > now then
  local v = num(tonumber(s[1]) + by)
  redis.call('HSET', key, 'v', v)
  return v
end
local v = num(by)
redis.call('HSET', key, 'v', v, 'e', num(now + ttl))
redis.call('PEXPIRE', key, gc(ttl))
return v
`,
  ],
  // KEYS: counters. ARGV: now → values (strings; '0' when absent or expired)
  lmcCounters: [
    undefined,
    `
local now = tonumber(ARGV[1])
local out = {}
for i, key in ipairs(KEYS) do
  local s = redis.call('HMGET', key, 'v', 'e')
  if s[1] and s[2] and tonumber(s[2]) > now then out[i] = s[1] else out[i] = '0' end
end
return out
`,
  ],
  // KEYS: counter. ARGV: value, ttlMs, now
  lmcSetCounter: [
    1,
    `
local ttl, now = tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('HSET', KEYS[1], 'v', num(tonumber(ARGV[1])), 'e', num(now + ttl))
redis.call('PEXPIRE', KEYS[1], gc(ttl))
return 1
`,
  ],
  // KEYS: ring. ARGV: value, size → the list, oldest first
  lmcRingPush: [
    1,
    `
redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('LTRIM', KEYS[1], -tonumber(ARGV[2]), -1)
return redis.call('LRANGE', KEYS[1], 0, -1)
`,
  ],
  // KEYS: lease. ARGV: owner, ttlMs, now → 1 when owner holds the lease after the call
  lmcLease: [
    1,
    `
local key = KEYS[1]
local ttl, now = tonumber(ARGV[2]), tonumber(ARGV[3])
local s = redis.call('HMGET', key, 'o', 'e')
if s[1] and s[1] ~= ARGV[1] and s[2] and tonumber(s[2]) > now then return 0 end
redis.call('HSET', key, 'o', ARGV[1], 'e', num(now + ttl))
redis.call('PEXPIRE', key, gc(ttl))
return 1
`,
  ],
  // KEYS: lease. ARGV: owner
  lmcLeaseRelease: [
    1,
    `
if redis.call('HGET', KEYS[1], 'o') == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 1
`,
  ],
  // KEYS: semaphore. ARGV: holder, limit, ttlMs, now → 1 when a permit is held after the call
  lmcSemAcquire: [
    1,
    `
local key = KEYS[1]
local limit, ttl, now = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
redis.call('ZREMRANGEBYSCORE', key, '-inf', num(now))
if not redis.call('ZSCORE', key, ARGV[1]) and redis.call('ZCARD', key) >= limit then return 0 end
redis.call('ZADD', key, num(now + ttl), ARGV[1])
extendGc(key, ttl)
return 1
`,
  ],
  // KEYS: json. ARGV: JSON text, ttlMs ('' for none), now
  lmcSetJson: [
    1,
    `
local key = KEYS[1]
redis.call('DEL', key)
if ARGV[2] == '' then
  redis.call('HSET', key, 'v', ARGV[1])
  return 1
end
local ttl, now = tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('HSET', key, 'v', ARGV[1], 'e', num(now + ttl))
redis.call('PEXPIRE', key, gc(ttl))
return 1
`,
  ],
} as const;

type Arg = string | number;

/** The commands defineCommand adds to the client (ioredis cannot type them). */
interface ScriptCommands {
  lmcWindow(key: string, now: number, windowMs: number, limit: number, member: string): Promise<[number, number, number]>;
  lmcBucket(key: string, capacity: number, refillPerSec: number, cost: number, now: number): Promise<[number, number, number, number]>;
  lmcIncr(key: string, by: number, ttlMs: number, now: number): Promise<string>;
  lmcCounters(numKeys: number, ...keysThenNow: Arg[]): Promise<string[]>;
  lmcSetCounter(key: string, value: number, ttlMs: number, now: number): Promise<number>;
  lmcRingPush(key: string, value: string, size: number): Promise<string[]>;
  lmcLease(key: string, owner: string, ttlMs: number, now: number): Promise<number>;
  lmcLeaseRelease(key: string, owner: string): Promise<number>;
  lmcSemAcquire(key: string, holder: string, limit: number, ttlMs: number, now: number): Promise<number>;
  lmcSetJson(key: string, json: string, ttlMs: Arg, now: number): Promise<number>;
}

const PING_TIMEOUT_MS = 2000;

export interface RedisCoordinationOptions {
  /** Connection URL; the adapter then owns the connection and quits it on close(). */
  url?: string;
  /** An existing client instead of `url`; left open on close(). */
  redis?: Redis;
  /** Prefix of every key (default `lm:`). */
  keyPrefix?: string;
  clock?: Clock;
  /** Connection errors of an owned connection are logged here. */
  log?: Logger;
}

/**
 * Coordination shared by a fleet through Redis. Every read-modify-write is one Lua script run
 * by EVALSHA (ioredis defineCommand), so concurrent instances never interleave inside one.
 */
export class RedisCoordination implements Coordination {
  readonly kind = 'redis' as const;
  private readonly redis: Redis & ScriptCommands;
  private readonly owned: boolean;
  private readonly clock: Clock;
  private readonly prefix: string;
  // Sliding-window members must be unique across the fleet even for events in the same ms.
  private readonly instanceTag = randomBytes(6).toString('base64url');
  private seq = 0;

  constructor(opts: RedisCoordinationOptions) {
    let client: Redis;
    if (opts.redis) {
      client = opts.redis;
      this.owned = false;
    } else if (opts.url) {
      client = new Redis(opts.url, {
        // Fail a command after a few reconnect attempts instead of stalling the hot path for long.
        maxRetriesPerRequest: 3,
        // Concurrent calls in one tick share a write; most calls are single scripts.
        enableAutoPipelining: true,
      });
      // Without a listener ioredis prints every reconnect failure; ping() reports health.
      client.on('error', (err: Error) => opts.log?.warn({ err }, 'redis coordination connection error'));
      this.owned = true;
    } else {
      throw new TypeError('RedisCoordination needs a url or a redis client');
    }
    for (const [name, [numberOfKeys, body]] of Object.entries(SCRIPTS)) {
      client.defineCommand(name, { lua: PRELUDE + body, numberOfKeys });
    }
    this.redis = client as Redis & ScriptCommands;
    this.clock = opts.clock ?? systemClock;
    this.prefix = opts.keyPrefix ?? 'lm:';
  }

  async slidingWindow(key: string, limit: number, windowMs: number): Promise<SlidingWindowResult> {
    checkWindowArgs(limit, windowMs);
    const member = `${this.instanceTag}${(this.seq++).toString(36)}`;
    const [allowed, count, retryAfterMs] = await this.redis.lmcWindow(
      `${this.prefix}w:${key}`,
      this.clock.now(),
      windowMs,
      limit,
      member,
    );
    return { allowed: allowed === 1, count, retryAfterMs };
  }

  async tokenBucket(key: string, capacity: number, refillPerSec: number, cost = 1): Promise<TokenBucketResult> {
    checkBucketArgs(capacity, refillPerSec, cost);
    const [allowed, remaining, retryAfterMs, resetMs] = await this.redis.lmcBucket(
      `${this.prefix}b:${key}`,
      capacity,
      refillPerSec,
      cost,
      this.clock.now(),
    );
    return { allowed: allowed === 1, remaining, retryAfterMs, resetMs };
  }

  async incr(key: string, by: number, ttlMs: number): Promise<number> {
    return Number(await this.redis.lmcIncr(`${this.prefix}c:${key}`, by, ttlMs, this.clock.now()));
  }

  async getCounter(key: string): Promise<number> {
    return (await this.getCounters([key]))[0];
  }

  async getCounters(keys: string[]): Promise<number[]> {
    if (keys.length === 0) return [];
    const args: Arg[] = new Array<Arg>(keys.length + 1);
    for (let i = 0; i < keys.length; i++) args[i] = `${this.prefix}c:${keys[i]}`;
    args[keys.length] = this.clock.now();
    const values = await this.redis.lmcCounters(keys.length, ...args);
    return values.map(Number);
  }

  async setCounter(key: string, value: number, ttlMs: number): Promise<void> {
    await this.redis.lmcSetCounter(`${this.prefix}c:${key}`, value, ttlMs, this.clock.now());
  }

  async ringPush(key: string, value: string, size: number): Promise<string[]> {
    checkRingSize(size);
    return this.redis.lmcRingPush(`${this.prefix}r:${key}`, value, size);
  }

  async ringRead(key: string): Promise<string[]> {
    return this.redis.lrange(`${this.prefix}r:${key}`, 0, -1);
  }

  async ringClear(key: string): Promise<void> {
    await this.redis.unlink(`${this.prefix}r:${key}`);
  }

  async acquireLease(key: string, owner: string, ttlMs: number): Promise<boolean> {
    return (await this.redis.lmcLease(`${this.prefix}l:${key}`, owner, ttlMs, this.clock.now())) === 1;
  }

  async releaseLease(key: string, owner: string): Promise<void> {
    await this.redis.lmcLeaseRelease(`${this.prefix}l:${key}`, owner);
  }

  async leaseHolder(key: string): Promise<string | null> {
    const [owner, expiresAt] = await this.redis.hmget(`${this.prefix}l:${key}`, 'o', 'e');
    return owner !== null && expiresAt !== null && Number(expiresAt) > this.clock.now() ? owner : null;
  }

  async semaphoreAcquire(key: string, holder: string, limit: number, ttlMs: number): Promise<boolean> {
    return (await this.redis.lmcSemAcquire(`${this.prefix}s:${key}`, holder, limit, ttlMs, this.clock.now())) === 1;
  }

  async semaphoreRelease(key: string, holder: string): Promise<void> {
    await this.redis.zrem(`${this.prefix}s:${key}`, holder);
  }

  async semaphoreCount(key: string): Promise<number> {
    // Permits whose expiry is strictly after now; expired ones are removed by the next acquire.
    return this.redis.zcount(`${this.prefix}s:${key}`, `(${this.clock.now()}`, '+inf');
  }

  async getJson<T>(key: string): Promise<T | null> {
    const [json, expiresAt] = await this.redis.hmget(`${this.prefix}j:${key}`, 'v', 'e');
    if (json === null || (expiresAt !== null && Number(expiresAt) <= this.clock.now())) return null;
    return JSON.parse(json) as T;
  }

  async setJson(key: string, value: unknown, ttlMs?: number): Promise<void> {
    const json = JSON.stringify(value) ?? 'null';
    await this.redis.lmcSetJson(`${this.prefix}j:${key}`, json, ttlMs ?? '', this.clock.now());
  }

  async ping(): Promise<boolean> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<boolean>((resolve) => {
      timer = setTimeout(() => resolve(false), PING_TIMEOUT_MS);
      timer.unref();
    });
    try {
      return await Promise.race([this.redis.ping().then((r) => r === 'PONG'), timeout]);
    } catch {
      return false;
    } finally {
      clearTimeout(timer);
    }
  }

  async close(): Promise<void> {
    if (!this.owned || this.redis.status === 'end') return;
    try {
      await this.redis.quit();
    } catch {
      // Already closing or never connected: drop the socket and stop reconnecting.
      this.redis.disconnect();
    }
  }
}
