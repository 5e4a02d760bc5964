import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/shared/clock.js';
import { createPool, type Db } from '../../src/shared/db/pool.js';
import { Queue, type QueueOptions } from '../../src/shared/queue/index.js';
import { PayloadCache } from '../../src/shared/queue/payload-cache.js';
import { createTestDatabase, type TestDatabase } from '../harness/db.js';

describe('PayloadCache', () => {
  it('admits while there is room, keeps the oldest when full, and gives each entry once', () => {
    const clock = new ManualClock(1_000_000);
    const c = new PayloadCache(clock, { maxBytes: 10, maxAgeMs: 60_000 });
    c.add('1', { bytes: Buffer.from('aaaa') });
    c.add('2', { bytes: Buffer.from('bbbb') });
    c.add('3', { bytes: Buffer.from('ccc') }); // 8 + 3 > 10: not admitted
    expect(c.size).toBe(8);
    expect(c.take('3')).toBeUndefined();
    expect(c.take('1')?.bytes?.toString()).toBe('aaaa');
    expect(c.take('1')).toBeUndefined();
    expect(c.size).toBe(4);
    c.add('4', { bytes: Buffer.from('dddddd') }); // room again: 4 + 6
    expect(c.take('4')?.bytes?.toString()).toBe('dddddd');
    c.add('2', { bytes: Buffer.from('other') }); // an id already held keeps its bytes
    expect(c.take('2')?.bytes?.toString()).toBe('bbbb');
    expect(c.size).toBe(0);
    expect(c.count).toBe(0);
  });

  it('drops entries older than maxAgeMs (a job claimed elsewhere never comes back here)', () => {
    const clock = new ManualClock(1_000_000);
    const c = new PayloadCache(clock, { maxBytes: 1_000, maxAgeMs: 60_000 });
    c.add('old', { bytes: Buffer.from('x'.repeat(100)) });
    clock.advance(30_000);
    c.add('mid', { bytes: Buffer.from('y') });
    clock.advance(30_000); // 'old' is now exactly 60 s old
    c.add('new', { bytes: Buffer.from('z') });
    expect(c.take('old')).toBeUndefined();
    expect(c.size).toBe(1 + 1);
    expect(c.take('mid')?.bytes?.toString()).toBe('y');
  });
});

describe('Queue with a payload cache (real PostgreSQL)', () => {
  let db: TestDatabase;
  let single: Db;
  beforeAll(async () => {
    db = await createTestDatabase({ max: 4 });
    // One connection, so the claim and the statistics flush run on the same backend.
    single = createPool(db.url, { max: 1, applicationName: 'lm-test-payload-cache' });
  });
  afterAll(async () => {
    await single?.end();
    await db?.drop();
  });

  let seq = 0;
  const options = (name: string, cache = true): QueueOptions => ({
    name,
    maxAttempts: 3,
    backoffMs: [0],
    timeoutMs: 60_000,
    retainCompleted: 100,
    retainFailed: 100,
    ...(cache ? { payloadCache: { maxBytes: 16 * 2 ** 20, maxAgeMs: 60_000 } } : {}),
  });

  // TOAST blocks the queue table's reads touched, as seen after this backend's stats flush.
  async function toastBlocks(pool: Db): Promise<number> {
    await pool.query('SELECT pg_stat_force_next_flush()');
    const r = await pool.query<{ n: string }>(
      `SELECT (coalesce(toast_blks_hit, 0) + coalesce(toast_blks_read, 0))::bigint AS n FROM pg_statio_all_tables WHERE relid = 'queue_jobs'::regclass`,
    );
    return Number(r.rows[0]!.n);
  }

  const payloads = [
    { n: 1, html: 'é€😀 '.repeat(40_000), note: 'multi-byte, 130+ KB' },
    { n: 2, html: 'line\r\n"quoted"\\ \u0000 nul', note: 'escapes' },
    { n: 3, html: 'x'.repeat(9_000), note: 'plain, compressible' },
    // Random: stored out of line even where the column is lz4-compressed (PostgreSQL 15 on Debian).
    { n: 4, html: randomBytes(60_000).toString('base64'), note: 'incompressible, TOASTed everywhere' },
  ];

  it('claims what it enqueued without reading the payload back, byte for byte', async () => {
    const clock = new ManualClock(Date.parse('2026-11-22T10:00:00Z'));
    const q = new Queue<(typeof payloads)[number]>({ db: single, clock, options: options(`pc${++seq}`) });
    await q.enqueueMany(payloads.map((p, i) => ({ groupKey: `g${i}`, payload: p })));
    expect(q.cachedPayloads).toEqual({ count: 4, bytes: expect.any(Number) });
    const before = await toastBlocks(single);
    const jobs = await q.claim('w1', 10);
    const after = await toastBlocks(single);
    expect(after - before).toBe(0);
    expect(jobs.map((j) => j.payload).sort((a, b) => a.n - b.n)).toEqual(payloads);
    expect(q.cachedPayloads).toEqual({ count: 0, bytes: 0 });

    // The same claim without the cache reads the TOASTed payloads (the measure can see it).
    const plain = new Queue<(typeof payloads)[number]>({ db: single, clock, options: options(`pc${++seq}`, false) });
    await plain.enqueueMany(payloads.map((p, i) => ({ groupKey: `g${i}`, payload: p })));
    const b2 = await toastBlocks(single);
    const plainJobs = await plain.claim('w1', 10);
    expect((await toastBlocks(single)) - b2).toBeGreaterThan(0);
    expect(plainJobs.map((j) => j.payload).sort((a, b) => a.n - b.n)).toEqual(payloads);
  });

  it('reads from PostgreSQL what it does not hold: another instance, a retry, an evicted entry', async () => {
    const clock = new ManualClock(Date.parse('2026-11-22T10:00:00Z'));
    const name = `pc${++seq}`;
    const a = new Queue<(typeof payloads)[number]>({ db: db.pool, clock, options: options(name) });
    const b = new Queue<(typeof payloads)[number]>({ db: db.pool, clock, options: options(name) });
    await a.enqueueMany(payloads.map((p, i) => ({ groupKey: `g${i}`, payload: p, priority: i })));
    // Instance b claims a's jobs (finishAndClaim, the worker's path): all from the table.
    const first = await b.finishAndClaim([], 'wb', 10);
    expect(first.jobs.map((j) => j.payload).sort((x, y) => x.n - y.n)).toEqual(payloads);
    // A retry of each, claimed by a (whose entries are still held, but for other claims' ids
    // nothing changes): the payload is the stored one.
    const retried = await b.finishAndClaim(
      first.jobs.map((job) => ({ job, outcome: { type: 'retry' as const, error: 'x', delayMs: 0 } })),
      'wb',
      0,
    );
    expect(retried.states).toEqual(['pending', 'pending', 'pending', 'pending']);
    const again = await a.claim('wa', 10);
    expect(again.map((j) => j.payload).sort((x, y) => x.n - y.n)).toEqual(payloads);
    expect(again.every((j) => j.attempts === 2)).toBe(true);

    // An entry that aged out is read from the table as well.
    const c = new Queue<{ n: number }>({ db: db.pool, clock, options: options(`pc${++seq}`) });
    await c.enqueueMany([{ groupKey: 'g', payload: { n: 42 } }]);
    clock.advance(61_000);
    await c.enqueueMany([{ groupKey: 'h', payload: { n: 43 } }]); // expiry runs on add
    expect(c.cachedPayloads?.count).toBe(1);
    const aged = await c.claim('wc', 10);
    expect(aged.map((j) => j.payload.n).sort()).toEqual([42, 43]);
  });

  it('a payload given as JSON text and as its value is claimed as that very value; one given as a value alone, from its bytes', async () => {
    const clock = new ManualClock(Date.parse('2026-11-22T10:00:00Z'));
    const q = new Queue<{ v: string; html: string }>({ db: db.pool, clock, options: options(`pc${++seq}`) });
    const given = { v: 'é', html: '<p>"x"</p>'.repeat(2_000) };
    const json = JSON.stringify(given);
    const alone = { v: 'alone', html: 'y' };
    await q.enqueueMany([
      { groupKey: 'g1', payload: given, payloadJson: Buffer.from(json) },
      { groupKey: 'g2', payload: alone },
    ]);
    // Counted by the JSON's bytes either way.
    expect(q.cachedPayloads).toEqual({ count: 2, bytes: Buffer.byteLength(json) + Buffer.byteLength(JSON.stringify(alone)) });
    alone.v = 'changed after enqueue';
    const jobs = await q.claim('w', 10);
    const byGroup = new Map(jobs.map((j) => [j.groupKey, j.payload]));
    // Not decoded, not parsed: the object the enqueuer gave.
    expect(byGroup.get('g1')).toBe(given);
    // A value alone was serialised by the queue: the job has what was enqueued, not the later change.
    expect(byGroup.get('g2')).toEqual({ v: 'alone', html: 'y' });
    // What PostgreSQL holds is the same payload (another instance, a retry).
    expect((await q.get(jobs.find((j) => j.groupKey === 'g1')!.id))!.payload).toEqual(given);
  });

  it('caches nothing for a dedupe hit: the stored payload of the first enqueue is claimed', async () => {
    const clock = new ManualClock(Date.parse('2026-11-22T10:00:00Z'));
    const q = new Queue<{ v: string }>({ db: db.pool, clock, options: options(`pc${++seq}`) });
    await q.enqueueMany([{ groupKey: 'g', payload: { v: 'first' }, dedupeKey: 'k' }]);
    await q.enqueueMany([{ groupKey: 'g', payload: { v: 'second' }, dedupeKey: 'k' }]);
    expect(q.cachedPayloads?.count).toBe(1);
    const jobs = await q.claim('w', 10);
    expect(jobs.map((j) => j.payload.v)).toEqual(['first']);
  });
});
