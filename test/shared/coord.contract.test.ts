/**
 * One behavioural contract for both coordination adapters, driven by a ManualClock (no sleeps).
 * The Redis run uses LM_TEST_REDIS_URL (CI) or a local server when one answers.
 */
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { ManualClock } from '../../src/shared/clock.js';
import { MemoryCoordination } from '../../src/shared/coord/memory.js';
import { RedisCoordination } from '../../src/shared/coord/redis.js';
import { createCoordination } from '../../src/shared/coord/index.js';
import type { Coordination } from '../../src/shared/coord/types.js';
import { deleteRedisKeys, testRedis } from '../harness/redis.js';

const { url: redisUrl, available: redisAvailable } = await testRedis();
const keyPrefix = `lmtest:${randomBytes(6).toString('hex')}:`;

// Everything the Redis runs wrote lives under this file's prefix; remove it however the run went.
afterAll(async () => {
  if (redisAvailable) await deleteRedisKeys(redisUrl, keyPrefix);
});

let seq = 0;
/** A key no other test uses (the Redis keyspace is shared by the whole run). */
const k = (name: string) => `${name}:${++seq}`;

function contract(name: string, makeAdapter: (clock: ManualClock) => Coordination, enabled = true) {
  describe.runIf(enabled)(`coordination contract: ${name}`, () => {
    let clock: ManualClock;
    let c: Coordination;
    beforeAll(() => {
      clock = new ManualClock();
      c = makeAdapter(clock);
    });
    afterAll(async () => {
      await c?.close();
    });

    describe('sliding window', () => {
      it('allows exactly `limit` events, then refuses until the oldest leaves the window', async () => {
        const key = k('sw');
        expect(await c.slidingWindow(key, 3, 1000)).toEqual({ allowed: true, count: 1, retryAfterMs: 0 });
        clock.advance(100);
        expect(await c.slidingWindow(key, 3, 1000)).toEqual({ allowed: true, count: 2, retryAfterMs: 0 });
        clock.advance(100);
        expect(await c.slidingWindow(key, 3, 1000)).toEqual({ allowed: true, count: 3, retryAfterMs: 0 });
        // t=200: the event of t=0 leaves at t=1000.
        expect(await c.slidingWindow(key, 3, 1000)).toEqual({ allowed: false, count: 3, retryAfterMs: 800 });
        clock.advance(799);
        expect(await c.slidingWindow(key, 3, 1000)).toEqual({ allowed: false, count: 3, retryAfterMs: 1 });
        clock.advance(1);
        expect(await c.slidingWindow(key, 3, 1000)).toEqual({ allowed: true, count: 3, retryAfterMs: 0 });
        // Window now holds t=100, t=200, t=1000: the next slot frees at t=1100.
        expect(await c.slidingWindow(key, 3, 1000)).toEqual({ allowed: false, count: 3, retryAfterMs: 100 });
        clock.advance(5000);
        expect(await c.slidingWindow(key, 3, 1000)).toEqual({ allowed: true, count: 1, retryAfterMs: 0 });
      });

      it('counts events of the same millisecond separately and keeps keys apart', async () => {
        const a = k('sw');
        const b = k('sw');
        for (let i = 1; i <= 5; i++) expect((await c.slidingWindow(a, 5, 60_000)).count).toBe(i);
        expect(await c.slidingWindow(a, 5, 60_000)).toEqual({ allowed: false, count: 5, retryAfterMs: 60_000 });
        expect(await c.slidingWindow(b, 5, 60_000)).toEqual({ allowed: true, count: 1, retryAfterMs: 0 });
      });

      it('a lowered limit waits until enough events have left; limit 0 never allows', async () => {
        const key = k('sw');
        for (let i = 0; i < 4; i++) {
          await c.slidingWindow(key, 4, 1000);
          clock.advance(10);
        }
        // Events at 0, 10, 20, 30; now 40. With limit 2 only one may remain before the next is
        // recorded, so the events of 0, 10 and 20 must leave: at t=1020.
        expect(await c.slidingWindow(key, 2, 1000)).toEqual({ allowed: false, count: 4, retryAfterMs: 980 });
        expect(await c.slidingWindow(k('sw'), 0, 1000)).toEqual({ allowed: false, count: 0, retryAfterMs: 1000 });
        await expect(c.slidingWindow(key, 1.5, 1000)).rejects.toThrow(RangeError);
      });
    });

    describe('token bucket', () => {
      it('bursts to capacity, then refills at refillPerSec', async () => {
        const key = k('tb');
        for (let i = 4; i >= 0; i--) {
          expect(await c.tokenBucket(key, 5, 2)).toEqual({ allowed: true, remaining: i, retryAfterMs: 0, resetMs: (5 - i) * 500 });
        }
        expect(await c.tokenBucket(key, 5, 2)).toEqual({ allowed: false, remaining: 0, retryAfterMs: 500, resetMs: 2500 });
        clock.advance(250);
        expect(await c.tokenBucket(key, 5, 2)).toEqual({ allowed: false, remaining: 0, retryAfterMs: 250, resetMs: 2250 });
        clock.advance(250);
        expect(await c.tokenBucket(key, 5, 2)).toEqual({ allowed: true, remaining: 0, retryAfterMs: 0, resetMs: 2500 });
        // A long pause refills only up to capacity.
        clock.advance(3_600_000);
        expect(await c.tokenBucket(key, 5, 2, 5)).toEqual({ allowed: true, remaining: 0, retryAfterMs: 0, resetMs: 2500 });
        expect((await c.tokenBucket(key, 5, 2)).allowed).toBe(false);
      });

      it('refills fractionally and waiting retryAfterMs is enough', async () => {
        const slow = k('tb');
        await c.tokenBucket(slow, 2, 0.5, 2);
        expect(await c.tokenBucket(slow, 2, 0.5)).toEqual({ allowed: false, remaining: 0, retryAfterMs: 2000, resetMs: 4000 });
        clock.advance(1000);
        expect(await c.tokenBucket(slow, 2, 0.5)).toEqual({ allowed: false, remaining: 0, retryAfterMs: 1000, resetMs: 3000 });
        clock.advance(1000);
        expect(await c.tokenBucket(slow, 2, 0.5)).toEqual({ allowed: true, remaining: 0, retryAfterMs: 0, resetMs: 4000 });

        const odd = k('tb');
        await c.tokenBucket(odd, 3, 1.5, 3);
        clock.advance(333); // 0.4995 tokens
        const refused = await c.tokenBucket(odd, 3, 1.5);
        expect(refused).toEqual({ allowed: false, remaining: 0, retryAfterMs: 334, resetMs: 1667 });
        clock.advance(refused.retryAfterMs);
        expect((await c.tokenBucket(odd, 3, 1.5)).allowed).toBe(true);
      });

      it('charges `cost`, keeps keys apart and rejects impossible arguments', async () => {
        const a = k('tb');
        const b = k('tb');
        expect(await c.tokenBucket(a, 10, 1, 4)).toMatchObject({ allowed: true, remaining: 6 });
        expect(await c.tokenBucket(a, 10, 1, 4)).toMatchObject({ allowed: true, remaining: 2 });
        expect(await c.tokenBucket(a, 10, 1, 4)).toEqual({ allowed: false, remaining: 2, retryAfterMs: 2000, resetMs: 8000 });
        expect(await c.tokenBucket(b, 10, 1, 4)).toMatchObject({ allowed: true, remaining: 6 });
        await expect(c.tokenBucket(a, 10, 1, 11)).rejects.toThrow(RangeError);
        await expect(c.tokenBucket(a, 10, 0)).rejects.toThrow(RangeError);
      });
    });

    describe('counters', () => {
      it('expire at the TTL set on creation; incr does not extend it', async () => {
        const key = k('ctr');
        expect(await c.incr(key, 1, 1000)).toBe(1);
        clock.advance(500);
        expect(await c.incr(key, 2, 1000)).toBe(3);
        clock.advance(499);
        expect(await c.getCounter(key)).toBe(3);
        clock.advance(1);
        expect(await c.getCounter(key)).toBe(0);
        // After expiry the next incr starts a new counter with a new TTL.
        expect(await c.incr(key, 5, 1000)).toBe(5);
        clock.advance(999);
        expect(await c.getCounter(key)).toBe(5);
        clock.advance(1);
        expect(await c.getCounter(key)).toBe(0);
      });

      it('add fractions with the same arithmetic as JavaScript', async () => {
        const key = k('ctr');
        await c.incr(key, 0.1, 60_000);
        expect(await c.incr(key, 0.2, 60_000)).toBe(0.1 + 0.2);
        expect(await c.incr(key, -0.3, 60_000)).toBe(0.1 + 0.2 - 0.3);
        expect(await c.getCounter(key)).toBe(0.1 + 0.2 - 0.3);
      });

      it('getCounters reads several at once: live, absent and expired', async () => {
        const live = k('ctr');
        const gone = k('ctr');
        await c.incr(gone, 7, 100);
        await c.incr(live, 4, 10_000);
        clock.advance(100);
        expect(await c.getCounters([live, k('ctr'), gone, live])).toEqual([4, 0, 0, 4]);
        expect(await c.getCounters([])).toEqual([]);
        expect(await c.getCounter(k('ctr'))).toBe(0);
      });

      it("addLater adds to a counter: the adapter's own calls see it, with the TTL of the first addition", async () => {
        const key = k('ctr');
        c.addLater(key, 1, 1000);
        clock.advance(500);
        c.addLater(key, 2, 1000);
        expect(await c.getCounter(key)).toBe(3);
        c.addLater(key, 1, 1000);
        expect(await c.incr(key, 1, 1000)).toBe(5);
        c.addLater(key, 1, 1000);
        expect(await c.getCounters([k('ctr'), key])).toEqual([0, 6]);
        clock.advance(500);
        expect(await c.getCounter(key)).toBe(0);
      });

      it('setCounter replaces value and TTL', async () => {
        const key = k('ctr');
        await c.incr(key, 3, 100);
        await c.setCounter(key, 42, 2000);
        clock.advance(1000);
        expect(await c.incr(key, 1, 10)).toBe(43);
        clock.advance(999);
        expect(await c.getCounter(key)).toBe(43);
        clock.advance(1);
        expect(await c.getCounter(key)).toBe(0);
      });
    });

    describe('ring buffer', () => {
      it('keeps the last `size` values, oldest first', async () => {
        const key = k('ring');
        expect(await c.ringPush(key, 'a', 3)).toEqual(['a']);
        expect(await c.ringPush(key, 'b', 3)).toEqual(['a', 'b']);
        expect(await c.ringPush(key, 'c', 3)).toEqual(['a', 'b', 'c']);
        expect(await c.ringPush(key, 'd', 3)).toEqual(['b', 'c', 'd']);
        expect(await c.ringPush(key, 'e', 3)).toEqual(['c', 'd', 'e']);
        expect(await c.ringRead(key)).toEqual(['c', 'd', 'e']);
        // The size given with a push applies from then on, in either direction.
        expect(await c.ringPush(key, 'f', 2)).toEqual(['e', 'f']);
        expect(await c.ringPush(key, 'g', 4)).toEqual(['e', 'f', 'g']);
        await c.ringClear(key);
        expect(await c.ringRead(key)).toEqual([]);
        expect(await c.ringRead(k('ring'))).toEqual([]);
        await expect(c.ringPush(key, 'x', 0)).rejects.toThrow(RangeError);
      });

      it('returns any string value as it was pushed', async () => {
        const key = k('ring');
        const values = ['say "hi"\\', 'ß→✓ 🙂', '42', '', 'a\nb\t/c', '[]', '{}'];
        for (const v of values) await c.ringPush(key, v, 10);
        expect(await c.ringRead(key)).toEqual(values);
        expect(await c.ringPush(key, 'z', 2)).toEqual(['{}', 'z']);
      });
    });

    describe('lease', () => {
      it('is exclusive, renewed by its owner, taken over after expiry, released only by its owner', async () => {
        const key = k('lease');
        expect(await c.acquireLease(key, 'A', 1000)).toBe(true);
        expect(await c.acquireLease(key, 'B', 1000)).toBe(false);
        expect(await c.leaseHolder(key)).toBe('A');
        clock.advance(600);
        expect(await c.acquireLease(key, 'A', 1000)).toBe(true); // renewed until t=1600
        clock.advance(600);
        expect(await c.acquireLease(key, 'B', 1000)).toBe(false);
        expect(await c.leaseHolder(key)).toBe('A');
        clock.advance(400);
        expect(await c.leaseHolder(key)).toBeNull();
        expect(await c.acquireLease(key, 'B', 1000)).toBe(true);
        expect(await c.leaseHolder(key)).toBe('B');
        await c.releaseLease(key, 'A');
        expect(await c.leaseHolder(key)).toBe('B');
        await c.releaseLease(key, 'B');
        expect(await c.leaseHolder(key)).toBeNull();
        expect(await c.acquireLease(key, 'A', 1000)).toBe(true);
        expect(await c.leaseHolder(k('lease'))).toBeNull();
      });
    });

    describe('semaphore', () => {
      it('enforces the limit; re-acquiring refreshes; release and expiry free permits', async () => {
        const key = k('sem');
        expect(await c.semaphoreAcquire(key, 'h1', 2, 1000)).toBe(true);
        expect(await c.semaphoreAcquire(key, 'h2', 2, 1000)).toBe(true);
        expect(await c.semaphoreAcquire(key, 'h3', 2, 1000)).toBe(false);
        expect(await c.semaphoreCount(key)).toBe(2);
        clock.advance(500);
        expect(await c.semaphoreAcquire(key, 'h1', 2, 1000)).toBe(true); // refresh to t=1500, no second permit
        expect(await c.semaphoreCount(key)).toBe(2);
        expect(await c.semaphoreAcquire(key, 'h3', 2, 1000)).toBe(false);
        clock.advance(500); // h2 expired at t=1000
        expect(await c.semaphoreCount(key)).toBe(1);
        expect(await c.semaphoreAcquire(key, 'h3', 2, 1000)).toBe(true);
        expect(await c.semaphoreAcquire(key, 'h4', 2, 1000)).toBe(false);
        await c.semaphoreRelease(key, 'h3');
        await c.semaphoreRelease(key, 'nobody');
        expect(await c.semaphoreCount(key)).toBe(1);
        expect(await c.semaphoreAcquire(key, 'h4', 2, 1000)).toBe(true);
        clock.advance(500); // h1 expired at t=1500
        expect(await c.semaphoreCount(key)).toBe(1);
        clock.advance(1000);
        expect(await c.semaphoreCount(key)).toBe(0);
        expect(await c.semaphoreCount(k('sem'))).toBe(0);
      });
    });

    describe('JSON values', () => {
      it('round-trip, expire with a TTL and last forever without one', async () => {
        const key = k('json');
        const value = { state: 'open', failures: [1, 2], nested: { ok: false }, note: 'ünïcode' };
        await c.setJson(key, value);
        expect(await c.getJson(key)).toEqual(value);
        clock.advance(365 * 86_400_000);
        expect(await c.getJson(key)).toEqual(value);

        await c.setJson(key, { v: 2 }, 1000);
        clock.advance(999);
        expect(await c.getJson(key)).toEqual({ v: 2 });
        clock.advance(1);
        expect(await c.getJson(key)).toBeNull();

        // Setting again without a TTL removes the old one.
        await c.setJson(key, { v: 3 }, 1000);
        await c.setJson(key, { v: 4 });
        clock.advance(5000);
        expect(await c.getJson(key)).toEqual({ v: 4 });
        expect(await c.getJson(k('json'))).toBeNull();
      });

      it('returns copies and stores scalars', async () => {
        const key = k('json');
        const value = { list: [1] };
        await c.setJson(key, value);
        value.list.push(2);
        const read = await c.getJson<{ list: number[] }>(key);
        expect(read).toEqual({ list: [1] });
        read!.list.push(3);
        expect(await c.getJson(key)).toEqual({ list: [1] });
        await c.setJson(key, 12.5);
        expect(await c.getJson(key)).toBe(12.5);
        await c.setJson(key, 'text');
        expect(await c.getJson(key)).toBe('text');
        await c.setJson(key, null);
        expect(await c.getJson(key)).toBeNull();
      });
    });

    it('calls made together run in call order, each with the result it has alone', async () => {
      const j = k('json');
      const x = k('ctr');
      const r = k('ring');
      const w = k('sw');
      // One turn of the event loop: the Redis adapter sends these as one batch.
      const results = await Promise.all([
        c.setJson(j, { a: 1 }),
        c.getJson(j),
        c.incr(x, 1, 60_000),
        c.incr(x, 1, 60_000),
        c.getCounter(x),
        c.ringPush(r, 'a', 2),
        c.ringPush(r, 'b', 2),
        c.ringPush(r, 'c', 2),
        c.slidingWindow(w, 1, 1000),
        c.slidingWindow(w, 1, 1000),
        c.setJson(j, null, 1),
        c.getJson(j),
      ]);
      expect(results).toEqual([
        undefined,
        { a: 1 },
        1,
        2,
        2,
        ['a'],
        ['a', 'b'],
        ['b', 'c'],
        { allowed: true, count: 1, retryAfterMs: 0 },
        { allowed: false, count: 1, retryAfterMs: 1000 },
        undefined,
        null,
      ]);
      // More calls at once than one batch holds.
      const many = k('ctr');
      const values = await Promise.all(Array.from({ length: 700 }, () => c.incr(many, 1, 60_000)));
      expect(values).toEqual(Array.from({ length: 700 }, (_, i) => i + 1));
    });

    it('reads and increments of one key made together see every call before them', async () => {
      const j = k('json');
      const x = k('ctr');
      const y = k('ctr');
      const r = k('ring');
      await c.ringPush(r, 'a', 3);
      await c.ringPush(r, 'b', 3);
      await c.setJson(j, { v: 0 });
      await c.incr(y, 1, 1_000);
      clock.advance(1_000); // y has expired: the first incr of the batch starts it afresh
      const results = await Promise.all([
        c.getJson(j),
        c.getJson(j),
        c.setJson(j, { v: 1 }),
        c.getJson(j),
        c.getJson(j),
        c.incr(x, 2, 60_000),
        c.incr(x, -1, 60_000),
        c.getCounter(x),
        c.incr(x, 5, 60_000),
        c.incr(x, 1, 30_000),
        c.incr(x, 0.5, 60_000),
        c.incr(x, 1, 60_000),
        c.incr(y, 3, 60_000),
        c.incr(y, 4, 60_000),
        c.ringPush(r, 'c', 3),
        c.ringPush(r, 'd', 3),
        c.ringRead(r),
        c.ringPush(r, 'e', 3),
        c.ringPush(r, 'f', 2),
        c.ringPush(r, 'g', 2),
      ]);
      expect(results).toEqual([
        { v: 0 }, { v: 0 }, undefined, { v: 1 }, { v: 1 },
        2, 1, 1, 6, 7, 7.5, 8.5, 3, 7,
        ['a', 'b', 'c'], ['b', 'c', 'd'], ['b', 'c', 'd'], ['c', 'd', 'e'], ['e', 'f'], ['f', 'g'],
      ]);
      // Answers are the caller's own: changing one changes no other.
      const [a, b] = await Promise.all([c.getJson<{ v: number }>(j), c.getJson<{ v: number }>(j)]);
      a!.v = 9;
      expect(b).toEqual({ v: 1 });
    });

    it('ping answers true', async () => {
      expect(await c.ping()).toBe(true);
    });
  });
}

contract('memory', (clock) => new MemoryCoordination({ clock }));
contract('redis', (clock) => new RedisCoordination({ url: redisUrl, keyPrefix, clock }), redisAvailable);

describe('memory adapter', () => {
  it('sweeps expired entries without being asked', async () => {
    const clock = new ManualClock();
    const c = new MemoryCoordination({ clock });
    for (let i = 0; i < 1000; i++) {
      await c.incr(`ctr:${i}`, 1, 1000);
      await c.slidingWindow(`sw:${i}`, 5, 1000);
      await c.tokenBucket(`tb:${i}`, 5, 10);
      await c.acquireLease(`lease:${i}`, 'me', 1000);
      await c.semaphoreAcquire(`sem:${i}`, 'me', 1, 1000);
      await c.setJson(`json:${i}`, i, 1000);
    }
    expect(c.size()).toBeGreaterThan(5000);
    clock.advance(1000);
    for (let i = 0; i < 5000; i++) await c.setJson('keep', i);
    expect(c.size()).toBe(1);
  });

  it('reports changed persist: counters and JSON values once', async () => {
    const clock = new ManualClock();
    const c = new MemoryCoordination({ clock });
    await c.incr('persist:day', 2, 86_400_000);
    await c.incr('persist:day', 3, 86_400_000);
    await c.setJson('persist:state', { a: 1 });
    await c.incr('plain', 1, 1000);
    await c.setJson('plain', 1);
    const t = clock.now();
    expect(c.dirtyPersistentEntries()).toEqual([
      { key: 'persist:day', kind: 'counter', value: 5, expiresAt: t + 86_400_000 },
      { key: 'persist:state', kind: 'json', json: '{"a":1}', expiresAt: null },
    ]);
    expect(c.dirtyPersistentEntries()).toEqual([]);
  });

  it('createCoordination picks memory without a Redis URL', async () => {
    expect(createCoordination({}).kind).toBe('memory');
    expect(createCoordination({ redisUrl: '' }).kind).toBe('memory');
  });
});

describe.runIf(redisAvailable)('redis adapter', () => {
  let admin: Redis;
  beforeAll(() => {
    admin = new Redis(redisUrl);
  });
  afterAll(async () => {
    await admin?.quit();
  });

  it('two instances sharing state never over-admit', async () => {
    const clock = new ManualClock();
    const a = new RedisCoordination({ url: redisUrl, keyPrefix, clock });
    const b = new RedisCoordination({ url: redisUrl, keyPrefix, clock });
    const pick = (i: number) => (i % 2 === 0 ? a : b);
    try {
      const bucket = k('tb');
      const taken = await Promise.all(Array.from({ length: 30 }, (_, i) => pick(i).tokenBucket(bucket, 15, 1)));
      expect(taken.filter((r) => r.allowed)).toHaveLength(15);

      const sem = k('sem');
      const permits = await Promise.all(Array.from({ length: 20 }, (_, i) => pick(i).semaphoreAcquire(sem, `h${i}`, 5, 60_000)));
      expect(permits.filter(Boolean)).toHaveLength(5);
      expect(await a.semaphoreCount(sem)).toBe(5);

      const window = k('sw');
      const events = await Promise.all(Array.from({ length: 40 }, (_, i) => pick(i).slidingWindow(window, 10, 60_000)));
      expect(events.filter((r) => r.allowed)).toHaveLength(10);

      const lease = k('lease');
      const leases = await Promise.all(Array.from({ length: 10 }, (_, i) => pick(i).acquireLease(lease, `o${i}`, 60_000)));
      expect(leases.filter(Boolean)).toHaveLength(1);

      const ctr = k('ctr');
      await Promise.all(Array.from({ length: 50 }, (_, i) => pick(i).incr(ctr, 1, 60_000)));
      expect(await b.getCounter(ctr)).toBe(50);
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });

  it('folds the reads and increments of one key made in one turn into one operation each', async () => {
    // 250 calls: one batch holds 256.
    const c = new RedisCoordination({ url: redisUrl, keyPrefix, clock: new ManualClock() });
    try {
      const j = k('json');
      const x = k('ctr');
      await c.setJson(j, { open: true });
      const before = { ...c.stats };
      const reads = Array.from({ length: 80 }, () => c.getJson(j));
      const counts = Array.from({ length: 10 }, () => c.getCounter(x));
      const incrs = Array.from({ length: 80 }, () => c.incr(x, 1, 60_000));
      const r = k('ring');
      const pushes = Array.from({ length: 80 }, (_, i) => c.ringPush(r, `v${i}`, 5));
      expect(await Promise.all(reads)).toEqual(Array.from({ length: 80 }, () => ({ open: true })));
      expect(await Promise.all(counts)).toEqual(Array.from({ length: 10 }, () => 0));
      expect(await Promise.all(incrs)).toEqual(Array.from({ length: 80 }, (_, i) => i + 1));
      // Each push sees the ring as it was right after its own value went in.
      expect(await Promise.all(pushes)).toEqual(Array.from({ length: 80 }, (_, i) => Array.from({ length: Math.min(5, i + 1) }, (_, j) => `v${i - Math.min(5, i + 1) + 1 + j}`)));
      expect(c.stats.calls - before.calls).toBe(250);
      expect(c.stats.sent - before.sent).toBe(4);
      expect(await c.getCounter(x)).toBe(80);
      expect(await c.ringRead(r)).toEqual(['v75', 'v76', 'v77', 'v78', 'v79']);
    } finally {
      await c.close();
    }
  });

  it('while a batch is out, the calls of the following turns wait and leave together, in call order', async () => {
    const c = new RedisCoordination({ url: redisUrl, keyPrefix, clock: new ManualClock() });
    try {
      const x = k('ctr');
      await c.getCounter(x); // connected
      const before = { ...c.stats };
      // Redis holds every command for 150 ms (every client: kept short): the first batch stays out while the turns pass.
      await admin.call('CLIENT', 'PAUSE', '150', 'ALL');
      const first = c.incr(x, 1, 60_000);
      const later: Promise<number>[] = [];
      for (let i = 0; i < 5; i++) {
        await new Promise((r) => setTimeout(r, 10));
        later.push(c.incr(x, 1, 60_000));
      }
      expect(await first).toBe(1);
      expect(await Promise.all(later)).toEqual([2, 3, 4, 5, 6]);
      expect(c.stats.calls - before.calls).toBe(6);
      // Sent one per turn, they were 6 script runs: the first, then the five that waited for it.
      expect(c.stats.batches - before.batches).toBe(2);
      // Idle again: a lone call leaves at once, alone.
      expect(await c.incr(x, 1, 60_000)).toBe(7);
    } finally {
      await c.close();
    }
  });

  it('a failing call fails alone: the others of its batch keep their results', async () => {
    const c = new RedisCoordination({ url: redisUrl, keyPrefix, clock: new ManualClock() });
    try {
      const bad = k('ctr');
      const good = k('ctr');
      // A plain string where the adapter keeps a hash: WRONGTYPE inside the batch.
      await admin.set(`${keyPrefix}c:${bad}`, 'x');
      const [a, b, d] = await Promise.allSettled([c.incr(good, 1, 60_000), c.incr(bad, 1, 60_000), c.incr(good, 1, 60_000)]);
      expect(a).toEqual({ status: 'fulfilled', value: 1 });
      expect(b.status).toBe('rejected');
      expect(String((b as PromiseRejectedResult).reason)).toMatch(/WRONGTYPE/);
      expect(d).toEqual({ status: 'fulfilled', value: 2 });
    } finally {
      await c.close();
    }
  });

  it("holds addLater's additions, summed per key, until a call on the key, the timer or close", async () => {
    const clock = new ManualClock();
    // A timer far away: what reaches Redis here is what a call or close sent.
    const a = new RedisCoordination({ url: redisUrl, keyPrefix, clock, deferMs: 60_000 });
    const b = new RedisCoordination({ url: redisUrl, keyPrefix, clock });
    const quick = new RedisCoordination({ url: redisUrl, keyPrefix, clock, deferMs: 20 });
    try {
      const x = k('ctr');
      const y = k('ctr');
      const z = k('ctr');
      await a.getCounter(x); // connected
      const before = { ...a.stats };
      for (let i = 0; i < 100; i++) a.addLater(x, 1, 60_000);
      a.addLater(y, 2, 60_000);
      expect(await b.getCounters([x, y])).toEqual([0, 0]);
      // Its own read sends x's 100 additions as one increment, ahead of the read, and not y's.
      expect(await a.getCounter(x)).toBe(100);
      expect(a.stats.sent - before.sent).toBe(2);
      expect(await b.getCounters([x, y])).toEqual([100, 0]);
      await a.close();
      expect(await b.getCounter(y)).toBe(2);
      // Without any other call, the timer sends them.
      quick.addLater(z, 3, 60_000);
      await vi.waitFor(async () => expect(await b.getCounter(z)).toBe(3), { timeout: 5000, interval: 10 });
    } finally {
      await Promise.all([a.close(), b.close(), quick.close()]);
    }
  });

  it('renews the backstop expiry of a key written on every call only when half its slack is gone', async () => {
    const c = new RedisCoordination({ url: redisUrl, keyPrefix, clock: new ManualClock() });
    try {
      const key = k('sw');
      const full = `${keyPrefix}w:${key}`;
      await c.slidingWindow(key, 100, 60_000);
      expect(await admin.pttl(full)).toBeGreaterThan(3_655_000);
      // Three quarters of the slack left: left alone.
      await admin.pexpire(full, 60_000 + 2_700_000);
      await c.slidingWindow(key, 100, 60_000);
      expect(await admin.pttl(full)).toBeLessThanOrEqual(2_760_000);
      // Less than half left: renewed to the full backstop.
      await admin.pexpire(full, 60_000 + 1_700_000);
      await c.slidingWindow(key, 100, 60_000);
      expect(await admin.pttl(full)).toBeGreaterThan(3_655_000);
    } finally {
      await c.close();
    }
  });

  it('prefixes every key and keeps a generous real expiry as a backstop', async () => {
    const c = new RedisCoordination({ url: redisUrl, keyPrefix, clock: new ManualClock() });
    try {
      const key = k('ctr');
      await c.incr(key, 1, 1000);
      const pttl = await admin.pttl(`${keyPrefix}c:${key}`);
      expect(pttl).toBeGreaterThan(3_590_000);
      expect(pttl).toBeLessThanOrEqual(3_601_000);
      expect(await admin.exists(`c:${key}`, `lm:c:${key}`)).toBe(0);
    } finally {
      await c.close();
    }
  });

  it('runs the calls made just before close', async () => {
    const c = new RedisCoordination({ url: redisUrl, keyPrefix, clock: new ManualClock() });
    const key = k('ctr');
    const pending = c.incr(key, 5, 60_000);
    await c.close();
    expect(await pending).toBe(5);
    expect(await admin.hget(`${keyPrefix}c:${key}`, 'v')).toBe('5');
  });

  it('leaves a client it was given open', async () => {
    const client = new Redis(redisUrl);
    const c = new RedisCoordination({ redis: client, keyPrefix });
    expect(await c.ping()).toBe(true);
    await c.close();
    expect(await client.ping()).toBe('PONG');
    await client.quit();
  });

  it('createCoordination picks Redis with a URL', async () => {
    const c = createCoordination({ redisUrl, keyPrefix });
    expect(c.kind).toBe('redis');
    await c.close();
  });
});
