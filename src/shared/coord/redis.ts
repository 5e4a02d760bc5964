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
-- Renewed only when less than half the backstop's slack is left (it is never shortened): a key
-- written on every send is re-expired now and then, not each time.
local function extendGc(key, ms)
  if ms < 0 then ms = 0 end
  if redis.call('PTTL', key) < ms + math.max(ms, 3600000) / 2 then redis.call('PEXPIRE', key, gc(ms)) end
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
local function listJson(key, from)
  local l = redis.call('LRANGE', key, from or 0, -1)
  if #l == 0 then return '[]' end
  return cjson.encode(l)
end
-- keys: ring. args: size, then n values → the list after the pushes with the n - 1 entries
-- before its last size entries (oldest first): each of the n callers reads its own view from it.
OPS.ringPush = function(k, a, nk, na)
  local size, n = tonumber(ARGV[a + 1]), na - 1
  redis.call('RPUSH', KEYS[k], unpack(ARGV, a + 2, a + na))
  local json = listJson(KEYS[k], -(size + n - 1))
  redis.call('LTRIM', KEYS[k], -size, -1)
  return json
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
// Batches in flight at once. While one is out, the calls made meanwhile wait and leave together
// when it returns: under load a batch holds the calls of several turns of the event loop, so
// there are fewer script runs and fewer socket writes (each wakes Redis, which then competes
// for a core), at no cost in latency when idle. The calls of a turn still leave in call order.
const MAX_IN_FLIGHT = 1;
// The real ones, captured before any test fakes timers: a batch must leave whatever the test's clock does.
const nextTurn = setImmediate;
const later = setTimeout;
const cancelLater = clearTimeout;
// How long additions made with addLater may wait, summed per key, before they are sent.
const DEFER_MS = 1000;

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
  /** How long addLater's additions may be held (default 1 s). */
  deferMs?: number;
}

/** One operation as sent: a call, or calls that one run of it answers (see coalesce). */
class SentOp {
  readonly callers: Pending[];
  /** incr calls folded into one: their `by`s, in call order. */
  incrs: number[] | null = null;
  by = 0;
  /** ringPush calls folded into one: their values, in call order. */
  pushes: string[] | null = null;

  constructor(readonly first: Pending) {
    this.callers = [first];
  }

  answer(reply: unknown): void {
    if (this.pushes) {
      // One parse for all: caller i gets the list and how many values were pushed after its own.
      const list = JSON.parse(reply as string) as string[];
      for (let i = 0; i < this.callers.length; i++) this.callers[i]!.resolve([list, this.callers.length - 1 - i]);
      return;
    }
    if (!this.incrs || this.callers.length === 1) {
      for (const c of this.callers) c.resolve(reply);
      return;
    }
    // Each caller gets the value it would have seen had the calls run one after another.
    let value = Number(reply) - this.by;
    for (let i = 0; i < this.callers.length; i++) {
      value += this.incrs[i]!;
      this.callers[i]!.resolve(String(value));
    }
  }

  fail(err: Error): void {
    for (const c of this.callers) c.reject(err);
  }
}

// Operations that only read their one key.
const READS = new Set(['hmget', 'counters', 'ringRead']);

/**
 * Folds the calls of one batch that one run can answer, without changing any result: a read
 * of a key (`hmget`, `counters`, `ringRead`) made again with the same arguments is
 * answered by the first read; `incr`s of one key with the same TTL and clock (integer steps)
 * run as one incr by their sum; `ringPush`es of one ring (same size) as one push of all their
 * values, which answers with enough of the list for each caller's view after its own push.
 * In each case nothing else touches the key in between. A fleet's jobs read one breaker, push
 * to its ring, count into the same organization counters and intel buckets, so a batch of many
 * jobs sends a fraction of its calls.
 */
function coalesce(batch: Pending[]): SentOp[] {
  const sent: SentOp[] = [];
  // Per key: the op that a following read, incr or push of it may join (null: none may).
  const open = new Map<string, SentOp | null>();
  for (const p of batch) {
    const key = p.keys.length === 1 ? p.keys[0]! : null;
    const prev = key === null ? undefined : open.get(key);
    if (prev && key !== null) {
      const f = prev.first;
      if (READS.has(p.op) && f.op === p.op && sameArgs(f.args, p.args)) {
        prev.callers.push(p);
        continue;
      }
      if (p.op === 'ringPush' && prev.pushes && f.args[0] === p.args[0]) {
        prev.callers.push(p);
        prev.pushes.push(p.args[1] as string);
        continue;
      }
      if (p.op === 'incr' && prev.incrs && Number.isInteger(p.args[0]) && f.args[1] === p.args[1] && f.args[2] === p.args[2]) {
        prev.callers.push(p);
        prev.incrs.push(p.args[0] as number);
        prev.by += p.args[0] as number;
        continue;
      }
    }
    const op = new SentOp(p);
    if (p.op === 'incr' && Number.isInteger(p.args[0])) {
      op.incrs = [p.args[0] as number];
      op.by = p.args[0] as number;
    } else if (p.op === 'ringPush') {
      op.pushes = [p.args[1] as string];
    }
    sent.push(op);
    const joinable = key !== null && (READS.has(p.op) || op.incrs !== null || op.pushes !== null) ? op : null;
    for (const k of p.keys) open.set(k, joinable);
  }
  return sent;
}

function sameArgs(a: readonly Arg[], b: readonly Arg[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
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
  private inFlight = 0;
  /** addLater's additions not yet sent, per full key: their sum, the first one's TTL and time. */
  private readonly deferred = new Map<string, { by: number; ttlMs: number; at: number }>();
  private deferTimer: NodeJS.Timeout | undefined;
  private readonly log?: Logger;
  private readonly deferMs: number;
  /** Calls made, operations sent for them after folding (coalesce), and script runs sent. */
  readonly stats = { calls: 0, sent: 0, batches: 0 };

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
    this.log = opts.log;
    this.deferMs = opts.deferMs ?? DEFER_MS;
  }

  /** Queues one operation for the batch sent at the end of this turn of the event loop. */
  private call<T>(op: string, keys: readonly string[], args: readonly Arg[]): Promise<T> {
    // Additions still held for a key go first: every call sees what this adapter did before it.
    if (this.deferred.size > 0) for (const k of keys) this.releaseDeferred(k);
    return new Promise<T>((resolve, reject) => {
      this.pending.push({ op, keys, args, resolve: resolve as (v: unknown) => void, reject });
      this.schedule();
    });
  }

  /** A flush at the end of this turn, unless one is due or the batches out will bring one. */
  private schedule(): void {
    if (this.flushScheduled || this.inFlight >= MAX_IN_FLIGHT || this.pending.length === 0) return;
    this.flushScheduled = true;
    nextTurn(this.flush);
  }

  /** Queues the held additions of one full key as one incr. */
  private releaseDeferred(key: string): void {
    const d = this.deferred.get(key);
    if (d === undefined) return;
    this.deferred.delete(key);
    this.pending.push({ op: 'incr', keys: [key], args: [d.by, d.ttlMs, d.at], resolve: () => {}, reject: this.lostAddition });
    this.schedule();
  }

  private readonly releaseAllDeferred = (): void => {
    this.deferTimer = undefined;
    for (const key of [...this.deferred.keys()]) this.releaseDeferred(key);
  };

  private readonly lostAddition = (err: Error): void => {
    this.log?.warn({ err }, 'redis coordination: a deferred counter addition was lost');
  };

  private readonly flush = (): void => {
    this.flushScheduled = false;
    if (this.inFlight >= MAX_IN_FLIGHT) return;
    this.sendAll();
  };

  private sendAll(): void {
    const all = this.pending;
    this.pending = [];
    for (let i = 0; i < all.length; i += MAX_BATCH) this.send(i === 0 && all.length <= MAX_BATCH ? all : all.slice(i, i + MAX_BATCH));
  }

  private send(batch: Pending[]): void {
    const sent = coalesce(batch);
    this.stats.calls += batch.length;
    this.stats.sent += sent.length;
    this.stats.batches++;
    const keys: Arg[] = [];
    const argv: Arg[] = [];
    for (const op of sent) {
      const p = op.first;
      for (const k of p.keys) keys.push(k);
      argv.push(p.op, p.keys.length, op.pushes ? op.pushes.length + 1 : p.args.length);
      if (op.incrs) argv.push(op.by, p.args[1]!, p.args[2]!);
      else if (op.pushes) argv.push(p.args[0]!, ...op.pushes);
      else for (const a of p.args) argv.push(a);
    }
    const n = keys.length;
    for (const a of argv) keys.push(a);
    this.inFlight++;
    this.redis.lmcBatch(n, ...keys).then(
      (replies) => {
        this.inFlight--;
        this.schedule();
        for (let i = 0; i < sent.length; i++) {
          const op = sent[i]!;
          if (replies[2 * i] === 1) op.answer(replies[2 * i + 1]);
          else op.fail(new Error(String(replies[2 * i + 1] ?? 'coordination: no reply for an operation')));
        }
      },
      (err: unknown) => {
        this.inFlight--;
        this.schedule();
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

  addLater(key: string, by: number, ttlMs: number): void {
    const full = `${this.prefix}c:${key}`;
    const d = this.deferred.get(full);
    if (d !== undefined) d.by += by;
    else this.deferred.set(full, { by, ttlMs, at: this.clock.now() });
    if (this.deferTimer === undefined) {
      this.deferTimer = later(this.releaseAllDeferred, this.deferMs);
      this.deferTimer.unref();
    }
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
    const [list, later] = await this.call<[string[], number]>('ringPush', [`${this.prefix}r:${key}`], [size, value]);
    // The view after this push: without the values pushed after it in the same operation.
    return list.slice(Math.max(0, list.length - later - size), list.length - later);
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
    // Calls made just before close leave ahead of QUIT, not after it (whatever is in flight).
    if (this.deferTimer !== undefined) cancelLater(this.deferTimer);
    this.releaseAllDeferred();
    if (this.pending.length > 0) this.sendAll();
    if (!this.owned || this.redis.status === 'end') return;
    try {
      await this.redis.quit();
    } catch {
      // Already closing or never connected: drop the socket and stop reconnecting.
      this.redis.disconnect();
    }
  }
}
