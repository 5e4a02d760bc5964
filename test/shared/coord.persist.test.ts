import { Redis } from 'ioredis';
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { ManualClock } from '../../src/shared/clock.js';
import { MemoryCoordination } from '../../src/shared/coord/memory.js';
import { CoordPersistence } from '../../src/shared/coord/persist.js';
import { RedisCoordination } from '../../src/shared/coord/redis.js';
import type { Db } from '../../src/shared/db/pool.js';
import { createTestDatabase, type TestDatabase } from '../harness/db.js';

const DAY = 86_400_000;

describe('coordination persistence (memory adapter → PostgreSQL)', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(async () => {
    await db?.drop();
  });
  beforeEach(async () => {
    await db.pool.query('TRUNCATE coord_state');
  });

  const rows = async () =>
    (await db.pool.query<{ key: string; kind: string; value: unknown }>('SELECT key, kind, value FROM coord_state ORDER BY key')).rows;

  it('writes persist: counters and JSON, and a new instance reloads them with the remaining TTL', async () => {
    const clock = new ManualClock();
    const before = new MemoryCoordination({ clock });
    const p1 = new CoordPersistence({ db: db.pool, coord: before, clock });
    await before.incr('persist:sent:day', 3, DAY);
    await before.incr('persist:sent:day', 2, DAY);
    await before.incr('persist:rate', 0.25, DAY);
    await before.setJson('persist:breaker:mx1', { state: 'open', failures: 5 }, 60_000);
    await before.setJson('persist:multiplier', { gmail: 0.5 });
    await before.incr('window:hot', 1, DAY);
    await before.setJson('cache:x', { no: 'persist' });
    await p1.flush();

    expect(await rows()).toEqual([
      { key: 'persist:breaker:mx1', kind: 'json', value: { state: 'open', failures: 5 } },
      { key: 'persist:multiplier', kind: 'json', value: { gmail: 0.5 } },
      { key: 'persist:rate', kind: 'counter', value: 0.25 },
      { key: 'persist:sent:day', kind: 'counter', value: 5 },
    ]);

    clock.advance(10_000); // the restart
    const after = new MemoryCoordination({ clock });
    expect(await new CoordPersistence({ db: db.pool, coord: after, clock }).load()).toBe(4);
    expect(await after.getCounters(['persist:sent:day', 'persist:rate', 'window:hot'])).toEqual([5, 0.25, 0]);
    expect(await after.getJson('persist:multiplier')).toEqual({ gmail: 0.5 });
    expect(await after.getJson('cache:x')).toBeNull();
    // Reloading does not count as a change.
    expect(after.dirtyPersistentEntries()).toEqual([]);

    // The breaker value was set with 60 s: 50 s are left.
    clock.advance(49_999);
    expect(await after.getJson('persist:breaker:mx1')).toEqual({ state: 'open', failures: 5 });
    clock.advance(1);
    expect(await after.getJson('persist:breaker:mx1')).toBeNull();
    // The counter keeps its TTL from creation and goes on counting.
    expect(await after.incr('persist:sent:day', 1, DAY)).toBe(6);
    clock.advance(DAY - 60_000 - 1);
    expect(await after.getCounter('persist:sent:day')).toBe(6);
    clock.advance(1);
    expect(await after.getCounter('persist:sent:day')).toBe(0);
    expect(await after.getJson('persist:multiplier')).toEqual({ gmail: 0.5 });
  });

  it('does not reload expired rows and deletes them', async () => {
    const clock = new ManualClock();
    const before = new MemoryCoordination({ clock });
    await before.incr('persist:short', 1, 1000);
    await before.setJson('persist:brief', { a: 1 }, 1000);
    await before.incr('persist:long', 1, DAY);
    await new CoordPersistence({ db: db.pool, coord: before, clock }).flush();
    expect(await rows()).toHaveLength(3);

    clock.advance(1000);
    const after = new MemoryCoordination({ clock });
    expect(await new CoordPersistence({ db: db.pool, coord: after, clock }).load()).toBe(1);
    expect(await after.getCounter('persist:short')).toBe(0);
    expect(await after.getJson('persist:brief')).toBeNull();
    expect(await after.getCounter('persist:long')).toBe(1);
    expect((await rows()).map((r) => r.key)).toEqual(['persist:long']);
  });

  it('writes only changes; a later change overwrites the row', async () => {
    const clock = new ManualClock();
    const c = new MemoryCoordination({ clock });
    const p = new CoordPersistence({ db: db.pool, coord: c, clock });
    await c.incr('persist:n', 1, DAY);
    await p.flush();
    const stamp = async () =>
      (await db.pool.query<{ t: Date }>(`SELECT updated_at AS t FROM coord_state WHERE key = 'persist:n'`)).rows[0].t.getTime();
    const first = await stamp();

    clock.advance(5000);
    await p.flush(); // nothing changed: no write
    expect(await stamp()).toBe(first);

    await c.incr('persist:n', 1, DAY);
    await p.flush();
    expect(await stamp()).toBe(first + 5000);
    expect(await rows()).toEqual([{ key: 'persist:n', kind: 'counter', value: 2 }]);
  });

  it('keeps changes of a failed flush for the next one', async () => {
    const clock = new ManualClock();
    const c = new MemoryCoordination({ clock });
    let down = true;
    const flaky = {
      query: (...args: Parameters<Db['query']>) => (down ? Promise.reject(new Error('connection lost')) : db.pool.query(...args)),
    } as unknown as Db;
    const p = new CoordPersistence({ db: flaky, coord: c, clock });
    await c.setJson('persist:state', { v: 1 });
    await expect(p.flush()).rejects.toThrow('connection lost');
    down = false;
    await p.flush();
    expect(await rows()).toEqual([{ key: 'persist:state', kind: 'json', value: { v: 1 } }]);
  });

  it('flushes in the background and once more on stop', async () => {
    const clock = new ManualClock();
    const c = new MemoryCoordination({ clock });
    const p = new CoordPersistence({ db: db.pool, coord: c, clock, intervalMs: 20 });
    p.start();
    try {
      await c.incr('persist:bg', 1, DAY);
      await vi.waitFor(async () => expect(await rows()).toHaveLength(1), { timeout: 5000, interval: 20 });
      await c.incr('persist:bg', 1, DAY);
    } finally {
      await p.stop();
    }
    expect(await rows()).toEqual([{ key: 'persist:bg', kind: 'counter', value: 2 }]);
  });

  it('does nothing with the Redis adapter (Redis is the shared store)', async () => {
    const client = new Redis({ lazyConnect: true }); // never connects
    const coord = new RedisCoordination({ redis: client });
    const p = new CoordPersistence({ db: db.pool, coord, clock: new ManualClock(), intervalMs: 10 });
    expect(await p.load()).toBe(0);
    p.start();
    await p.flush();
    await p.stop();
    expect(await rows()).toEqual([]);
    client.disconnect();
  });
});
