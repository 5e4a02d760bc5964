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

/**
 * The operations, as Lua functions of (k, a, nk, na): their keys are KEYS[k .. k + nk - 1], their
 * arguments (strings) ARGV[a + 1 .. a + na]. Every call of the
 * adapter is one of them; the calls made in one turn of the event loop go to Redis together as
 * ONE script run (lmcBatch below), which runs them in the order they were made.
 */
const OPS = `
local OPS = {}
-- keys: window. args: now, windowMs, limit, member → {allowed, count, retryAfterMs}
OPS.window = function(k, a, nk, na)
  local key = KEYS[k]
  local now, win, limit = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  redis.call('ZREMRANGEBYSCORE', key, '-inf', num(now - win))
  local count = redis.call('ZCARD', key)
  if count < limit then
    redis.call('ZADD', key, num(now), ARGV[a + 4])
    extendGc(key, win)
    return {1, count + 1, 0}
  end
  local idx = count - limit
  if idx < count then
    local e = redis.call('ZRANGE', key, idx, idx, 'WITHSCORES')
    return {0, count, tonumber(e[2]) + win - now}
  end
  return {0, count, win}
end
-- keys: bucket. args: capacity, refillPerSec, cost, now → {allowed, remaining, retryAfterMs, resetMs}
OPS.bucket = function(k, a, nk, na)
  local key = KEYS[k]
  local cap, rate, cost, now = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
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
end
-- keys: counter. args: by, ttlMs, now → new value (string)
OPS.incr = function(k, a, nk, na)
  local key = KEYS[k]
  local by, ttl, now = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
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
end
-- keys: counters. args: now → values (strings; '0' when absent or expired)
OPS.counters = function(k, a, nk, na)
  local now = tonumber(ARGV[a + 1])
  local out = {}
  for i = 1, nk do
    local s = redis.call('HMGET', KEYS[k + i - 1], 'v', 'e')
    if s[1] and s[2] and tonumber(s[2]) > now then out[i] = s[1] else out[i] = '0' end
  end
  return out
end
-- keys: counter. args: value, ttlMs, now
OPS.setCounter = function(k, a, nk, na)
  local ttl, now = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  redis.call('HSET', KEYS[k], 'v', num(tonumber(ARGV[a + 1])), 'e', num(now + ttl))
  redis.call('PEXPIRE', KEYS[k], gc(ttl))
  return 1
end
-- The list as JSON text: one string for the client to parse instead of one reply per value.
local function listJson(key)
  local l = redis.call('LRANGE', key, 0, -1)
  if #l == 0 then return '[]' end
  return cjson.encode(l)
end
-- keys: ring. args: value, size → the list, oldest first
OPS.ringPush = function(k, a, nk, na)
  redis.call('RPUSH', KEYS[k], ARGV[a + 1])
  redis.call('LTRIM', KEYS[k], -tonumber(ARGV[a + 2]), -1)
  return listJson(KEYS[k])
end
OPS.ringRead = function(k, a, nk, na) return listJson(KEYS[k]) end
OPS.del = function(k, a, nk, na) return redis.call('UNLINK', KEYS[k]) end
-- keys: lease. args: owner, ttlMs, now → 1 when owner holds the lease after the call
OPS.lease = function(k, a, nk, na)
  local key = KEYS[k]
  local ttl, now = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  local s = redis.call('HMGET', key, 'o', 'e')
  if s[1] and s[1] ~= ARGV[a + 1] and s[2] and tonumber(s[2]) > now then return 0 end
  redis.call('HSET', key, 'o', ARGV[a + 1], 'e', num(now + ttl))
  redis.call('PEXPIRE', key, gc(ttl))
  return 1
end
-- keys: lease. args: owner
OPS.leaseRelease = function(k, a, nk, na)
  if redis.call('HGET', KEYS[k], 'o') == ARGV[a + 1] then redis.call('DEL', KEYS[k]) end
  return 1
end
-- keys: a hash. args: its fields → their values (false when absent)
OPS.hmget = function(k, a, nk, na) return redis.call('HMGET', KEYS[k], unpack(ARGV, a + 1, a + na)) end
-- keys: semaphore. args: holder, limit, ttlMs, now → 1 when a permit is held after the call
OPS.semAcquire = function(k, a, nk, na)
  local key = KEYS[k]
  local limit, ttl, now = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
  redis.call('ZREMRANGEBYSCORE', key, '-inf', num(now))
  if not redis.call('ZSCORE', key, ARGV[a + 1]) and redis.call('ZCARD', key) >= limit then return 0 end
  redis.call('ZADD', key, num(now + ttl), ARGV[a + 1])
  extendGc(key, ttl)
  return 1
end
OPS.semRelease = function(k, a, nk, na) return redis.call('ZREM', KEYS[k], ARGV[a + 1]) end
-- args: now. Permits whose expiry is strictly after now; expired ones are removed by the next acquire.
OPS.semCount = function(k, a, nk, na) return redis.call('ZCOUNT', KEYS[k], '(' .. ARGV[a + 1], '+inf') end
-- keys: json. args: JSON text, ttlMs ('' for none), now
OPS.setJson = function(k, a, nk, na)
  local key = KEYS[k]
  redis.call('DEL', key)
  if ARGV[a + 2] == '' then
    redis.call('HSET', key, 'v', ARGV[a + 1])
    return 1
  end
  local ttl, now = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  redis.call('HSET', key, 'v', ARGV[a + 1], 'e', num(now + ttl))
  redis.call('PEXPIRE', key, gc(ttl))
  return 1
end
`;

/*
 * One script run for a batch of operations. ARGV: per operation its name, number of keys,
 * number of arguments, then the arguments; KEYS: the operations' keys in the same order. An
 * operation reads its keys from KEYS[k] on and its arguments from ARGV[a + 1] on (no tables
 * per call). Each runs under pcall, so one failing (a key of the wrong type) fails only its own
 * call. The reply is flat: per operation 1 and its result, or 0 and the error message.
 */
const BATCH = `
local out = {}
local ki, ai, n = 1, 1, 0
while ai <= #ARGV do
  local op, nk, na = ARGV[ai], tonumber(ARGV[ai + 1]), tonumber(ARGV[ai + 2])
  local f = OPS[op]
  local ok, res
  if f then ok, res = pcall(f, ki, ai + 2, nk, na)
  else ok, res = false, 'unknown coordination operation ' .. tostring(op) end
  -- A nil would end the reply array early: every later operation would lose its result.
  if ok then out[n + 1], out[n + 2] = 1, (res == nil and false or res)
  else out[n + 1], out[n + 2] = 0, type(res) == 'table' and tostring(res.err or 'error') or tostring(res) end
  n = n + 2
  ki, ai = ki + nk, ai + 3 + na
end
return out
`;

type Arg = string | number;

/** The command defineCommand adds to the client (ioredis cannot type it): numKeys, keys, then ARGV. */
interface ScriptCommands {
  lmcBatch(numKeys: number, ...keysThenArgs: Arg[]): Promise<unknown[]>;
}

/** An operation waiting for the next batch. */
interface Pending {
  op: string;
  keys: readonly string[];
  args: readonly Arg[];
  resolve(value: unknown): void;
  reject(err: Error): void;
}

// Bounds one script run (Redis runs nothing else meanwhile) and its argument list.
const MAX_BATCH = 256;
// The real one, captured before any test fakes timers: a batch must leave whatever the test's clock does.
const nextTurn = setImmediate;

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
 * Coordination shared by a fleet through Redis. Every read-modify-write is one Lua function,
 * so concurrent instances never interleave inside one. The operations called in one turn of
 * the event loop (the pipeline phases and delivery effects of all jobs in flight) are sent as
 * one EVALSHA that runs them in call order: the same results as one script each, at about a
 * third of the client's cost per call (Redis's own is unchanged).
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
  private pending: Pending[] = [];
  private flushScheduled = false;

  constructor(opts: RedisCoordinationOptions) {
    let client: Redis;
    if (opts.redis) {
      client = opts.redis;
      this.owned = false;
    } else if (opts.url) {
      client = new Redis(opts.url, {
        // Fail a command after a few reconnect attempts instead of stalling the hot path for long.
        maxRetriesPerRequest: 3,
        // No auto-pipelining: the adapter batches its calls itself, and ioredis's would hold each
        // batch for one more turn of the event loop (and past a QUIT sent meanwhile).
      });
      // Without a listener ioredis prints every reconnect failure; ping() reports health.
      client.on('error', (err: Error) => opts.log?.warn({ err }, 'redis coordination connection error'));
      this.owned = true;
    } else {
      throw new TypeError('RedisCoordination needs a url or a redis client');
    }
    client.defineCommand('lmcBatch', { lua: PRELUDE + OPS + BATCH });
    this.redis = client as Redis & ScriptCommands;
    this.clock = opts.clock ?? systemClock;
    this.prefix = opts.keyPrefix ?? 'lm:';
  }

  /** Queues one operation for the batch sent at the end of this turn of the event loop. */
  private call<T>(op: string, keys: readonly string[], args: readonly Arg[]): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.pending.push({ op, keys, args, resolve: resolve as (v: unknown) => void, reject });
      if (!this.flushScheduled) {
        this.flushScheduled = true;
        nextTurn(this.flush);
      }
    });
  }

  private readonly flush = (): void => {
    this.flushScheduled = false;
    const all = this.pending;
    this.pending = [];
    for (let i = 0; i < all.length; i += MAX_BATCH) this.send(i === 0 && all.length <= MAX_BATCH ? all : all.slice(i, i + MAX_BATCH));
  };

  private send(batch: Pending[]): void {
    const keys: Arg[] = [];
    const argv: Arg[] = [];
    for (const p of batch) {
      for (const k of p.keys) keys.push(k);
      argv.push(p.op, p.keys.length, p.args.length);
      for (const a of p.args) argv.push(a);
    }
    const n = keys.length;
    for (const a of argv) keys.push(a);
    this.redis.lmcBatch(n, ...keys).then(
      (replies) => {
        for (let i = 0; i < batch.length; i++) {
          if (replies[2 * i] === 1) batch[i]!.resolve(replies[2 * i + 1]);
          else batch[i]!.reject(new Error(String(replies[2 * i + 1] ?? 'coordination: no reply for an operation')));
        }
      },
      (err: unknown) => {
        const e = err instanceof Error ? err : new Error(String(err));
        for (const p of batch) p.reject(e);
      },
    );
  }

  async slidingWindow(key: string, limit: number, windowMs: number): Promise<SlidingWindowResult> {
    checkWindowArgs(limit, windowMs);
    const member = `${this.instanceTag}${(this.seq++).toString(36)}`;
    const [allowed, count, retryAfterMs] = await this.call<[number, number, number]>('window', [`${this.prefix}w:${key}`], [this.clock.now(), windowMs, limit, member]);
    return { allowed: allowed === 1, count, retryAfterMs };
  }

  async tokenBucket(key: string, capacity: number, refillPerSec: number, cost = 1): Promise<TokenBucketResult> {
    checkBucketArgs(capacity, refillPerSec, cost);
    const [allowed, remaining, retryAfterMs, resetMs] = await this.call<[number, number, number, number]>(
      'bucket',
      [`${this.prefix}b:${key}`],
      [capacity, refillPerSec, cost, this.clock.now()],
    );
    return { allowed: allowed === 1, remaining, retryAfterMs, resetMs };
  }

  async incr(key: string, by: number, ttlMs: number): Promise<number> {
    return Number(await this.call<string>('incr', [`${this.prefix}c:${key}`], [by, ttlMs, this.clock.now()]));
  }

  async getCounter(key: string): Promise<number> {
    return (await this.getCounters([key]))[0];
  }

  async getCounters(keys: string[]): Promise<number[]> {
    if (keys.length === 0) return [];
    const full = new Array<string>(keys.length);
    for (let i = 0; i < keys.length; i++) full[i] = `${this.prefix}c:${keys[i]}`;
    const values = await this.call<string[]>('counters', full, [this.clock.now()]);
    return values.map(Number);
  }

  async setCounter(key: string, value: number, ttlMs: number): Promise<void> {
    await this.call('setCounter', [`${this.prefix}c:${key}`], [value, ttlMs, this.clock.now()]);
  }

  async ringPush(key: string, value: string, size: number): Promise<string[]> {
    checkRingSize(size);
    return JSON.parse(await this.call<string>('ringPush', [`${this.prefix}r:${key}`], [value, size])) as string[];
  }

  async ringRead(key: string): Promise<string[]> {
    return JSON.parse(await this.call<string>('ringRead', [`${this.prefix}r:${key}`], [])) as string[];
  }

  async ringClear(key: string): Promise<void> {
    await this.call('del', [`${this.prefix}r:${key}`], []);
  }

  async acquireLease(key: string, owner: string, ttlMs: number): Promise<boolean> {
    return (await this.call<number>('lease', [`${this.prefix}l:${key}`], [owner, ttlMs, this.clock.now()])) === 1;
  }

  async releaseLease(key: string, owner: string): Promise<void> {
    await this.call('leaseRelease', [`${this.prefix}l:${key}`], [owner]);
  }

  async leaseHolder(key: string): Promise<string | null> {
    const [owner, expiresAt] = await this.call<(string | null)[]>('hmget', [`${this.prefix}l:${key}`], ['o', 'e']);
    return owner != null && expiresAt != null && Number(expiresAt) > this.clock.now() ? owner : null;
  }

  async semaphoreAcquire(key: string, holder: string, limit: number, ttlMs: number): Promise<boolean> {
    return (await this.call<number>('semAcquire', [`${this.prefix}s:${key}`], [holder, limit, ttlMs, this.clock.now()])) === 1;
  }

  async semaphoreRelease(key: string, holder: string): Promise<void> {
    await this.call('semRelease', [`${this.prefix}s:${key}`], [holder]);
  }

  async semaphoreCount(key: string): Promise<number> {
    return this.call<number>('semCount', [`${this.prefix}s:${key}`], [this.clock.now()]);
  }

  async getJson<T>(key: string): Promise<T | null> {
    const [json, expiresAt] = await this.call<(string | null)[]>('hmget', [`${this.prefix}j:${key}`], ['v', 'e']);
    if (json == null || (expiresAt != null && Number(expiresAt) <= this.clock.now())) return null;
    return JSON.parse(json) as T;
  }

  async setJson(key: string, value: unknown, ttlMs?: number): Promise<void> {
    const json = JSON.stringify(value) ?? 'null';
    await this.call('setJson', [`${this.prefix}j:${key}`], [json, ttlMs ?? '', this.clock.now()]);
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
    // Calls made just before close leave ahead of QUIT, not after it.
    if (this.pending.length > 0) this.flush();
    if (!this.owned || this.redis.status === 'end') return;
    try {
      await this.redis.quit();
    } catch {
      // Already closing or never connected: drop the socket and stop reconnecting.
      this.redis.disconnect();
    }
  }
}
