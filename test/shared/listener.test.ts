/**
 * The LISTEN connection shared by the queue worker, the webhook subscription cache and the MTA
 * change feed (src/shared/db/listener.ts), against the real PostgreSQL; and the coalescing
 * re-read their caches use (src/shared/db/reload.ts).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomString } from '../../src/shared/crypto.js';
import { PgListener, type PgListenerOptions } from '../../src/shared/db/listener.js';
import { createPool, withDatabase } from '../../src/shared/db/pool.js';
import { CoalescingReload } from '../../src/shared/db/reload.js';
import { createTestDatabase, type TestDatabase } from '../harness/db.js';
import { pollUntil } from '../harness/dns.js';

let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase({ max: 4 });
});
afterAll(async () => {
  await db?.drop();
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const waitUntil = (cond: () => boolean, timeoutMs: number, what: string) => pollUntil(cond, timeoutMs, () => `timed out waiting for ${what}`, 10);

/** A listener with a name of its own in pg_stat_activity, and a record of its callbacks. */
function rig(over: Partial<PgListenerOptions> = {}) {
  const name = `lm_listener_${randomString(8, 'abcdefghijklmnopqrstuvwxyz')}`;
  const seen: [string, string][] = [];
  const calls = { up: 0, down: 0 };
  const listener = new PgListener({
    db: db.pool,
    channels: ['lm_test_a', 'lm_test_b'],
    onNotification: (channel, payload) => seen.push([channel, payload]),
    onUp: () => {
      calls.up++;
    },
    onDown: () => {
      calls.down++;
    },
    reconnectMs: 100,
    applicationName: name,
    ...over,
  });
  const pids = async () =>
    (await db.pool.query<{ pid: number }>('SELECT pid FROM pg_stat_activity WHERE application_name = $1', [name])).rows.map((r) => r.pid);
  const kill = async () => {
    const [pid] = await pids();
    expect(pid).toBeDefined();
    await db.pool.query('SELECT pg_terminate_backend($1)', [pid]);
  };
  return { listener, seen, calls, pids, kill };
}

const notify = (channel: string, payload: string) => db.pool.query('SELECT pg_notify($1, $2)', [channel, payload]);
const received = (seen: [string, string][], payload: string) => seen.some(([, p]) => p === payload);

describe('PgListener', () => {
  it('delivers notifications of every channel it listens to, after calling onUp once', async () => {
    const r = rig();
    await r.listener.start();
    expect(r.listener.up).toBe(true);
    expect(r.calls.up).toBe(1);
    await notify('lm_test_a', 'one');
    await notify('lm_test_b', 'two');
    await notify('lm_test_other', 'not ours');
    await waitUntil(() => r.seen.length >= 2, 10_000, 'two notifications');
    await sleep(50);
    expect(r.seen).toEqual([
      ['lm_test_a', 'one'],
      ['lm_test_b', 'two'],
    ]);
    await r.listener.stop();
  });

  it('reconnects after its backend is killed, calls onDown then onUp again, and receives later notifications', async () => {
    const r = rig();
    await r.listener.start();
    const [before] = await r.pids();
    await r.kill();
    await waitUntil(() => r.calls.down === 1, 10_000, 'onDown');
    await waitUntil(() => r.calls.up === 2, 10_000, 'onUp after reconnecting');
    expect(r.listener.up).toBe(true);
    // One connection, a new one (the killed backend may take a moment to leave pg_stat_activity).
    const after = await pollUntil(async () => {
      const pids = await r.pids();
      return pids.length === 1 && pids[0] !== before && pids;
    }, 10_000, () => 'one new listener connection');
    expect(after).toHaveLength(1);
    await notify('lm_test_a', 'after reconnect');
    await waitUntil(() => received(r.seen, 'after reconnect'), 10_000, 'a notification after reconnecting');
    await r.listener.stop();
  });

  it('stop() closes the connection and nothing reconnects, also when stopped while down', async () => {
    const r = rig();
    await r.listener.start();
    await r.listener.stop();
    expect(r.listener.up).toBe(false);
    expect(await r.pids()).toEqual([]);
    await notify('lm_test_a', 'after stop');
    await sleep(300);
    expect(received(r.seen, 'after stop')).toBe(false);

    // Killed, then stopped before the reconnect delay passes.
    const s = rig({ reconnectMs: 200 });
    await s.listener.start();
    await s.kill();
    await waitUntil(() => s.calls.down === 1, 10_000, 'onDown');
    await s.listener.stop();
    await sleep(500);
    expect(s.calls.up).toBe(1);
    expect(await s.pids()).toEqual([]);
  });

  it('a failing onUp counts as a lost connection: it runs again after reconnecting', async () => {
    let ups = 0;
    const r = rig({
      onUp: () => {
        if (++ups === 1) throw new Error('re-read failed');
      },
    });
    await r.listener.start();
    await waitUntil(() => ups === 2, 10_000, 'onUp again');
    await waitUntil(() => r.listener.up, 10_000, 'up again');
    await notify('lm_test_b', 'after retry');
    await waitUntil(() => received(r.seen, 'after retry'), 10_000, 'a notification after the retry');
    await r.listener.stop();
  });

  it('an unreachable database: start() resolves and retries in the background; with failFast it rejects', async () => {
    const missing = createPool(withDatabase(db.url, `lm_missing_${randomString(8, 'abcdefghijklmnopqrstuvwxyz')}`), { max: 1 });
    try {
      const r = rig({ db: missing });
      await r.listener.start();
      expect(r.listener.up).toBe(false);
      await r.listener.stop();

      const f = rig({ db: missing, failFast: true });
      await expect(f.listener.start()).rejects.toThrow(/does not exist/);
      expect(f.listener.up).toBe(false);
      expect(f.calls.up).toBe(0);
    } finally {
      await missing.end();
    }
  });

  it('rejects a channel name that is not a plain identifier', () => {
    expect(() => rig({ channels: ['bad; DROP TABLE x'] })).toThrow(/bad channel name/);
  });
});

describe('CoalescingReload', () => {
  /** A reload whose every load waits for release(v); `applied` records what it installed. */
  function gated() {
    const gates: ((v: number) => void)[] = [];
    const applied: number[] = [];
    let running = 0;
    const g = {
      calls: 0,
      maxRunning: 0,
      applied,
      reload: new CoalescingReload({
        load: () =>
          new Promise<number>((resolve) => {
            g.calls++;
            g.maxRunning = Math.max(g.maxRunning, ++running);
            gates.push((v) => {
              running--;
              resolve(v);
            });
          }),
        apply: (v) => applied.push(v),
      }),
      /** Starts a run and waits for its load to begin; the run comes back wrapped (an async function would await it). */
      started: async () => {
        const calls = g.calls;
        const run = g.reload.run();
        await waitUntil(() => g.calls > calls, 5_000, 'a load');
        return { run };
      },
      release: async (v: number) => {
        await waitUntil(() => gates.length > 0, 5_000, 'a load to release');
        gates.shift()!(v);
      },
    };
    return g;
  }

  it('runs one load at a time; requests during a load share one more load afterwards', async () => {
    const g = gated();
    const { run: first } = await g.started();
    const joined = [g.reload.run(), g.reload.run(), g.reload.run()];
    await g.release(1);
    await g.release(2);
    await Promise.all([first, ...joined]);
    expect(g.calls).toBe(2);
    expect(g.maxRunning).toBe(1);
    expect(g.applied).toEqual([1, 2]);
    // Idle again: a new request loads at once.
    const next = g.reload.run();
    await g.release(3);
    await next;
    expect(g.applied).toEqual([1, 2, 3]);
  });

  it('does not apply a result whose load overlapped invalidate()', async () => {
    const g = gated();
    const { run } = await g.started();
    g.reload.invalidate();
    await g.release(1);
    await run;
    expect(g.applied).toEqual([]);
    // invalidate() + run() during a load: the stale result is dropped, the re-read applied.
    const { run: again } = await g.started();
    g.reload.invalidate();
    const joined = g.reload.run();
    await g.release(2);
    await g.release(3);
    await Promise.all([again, joined]);
    expect(g.calls).toBe(3);
    expect(g.applied).toEqual([3]);
  });

  it('a failed load rejects the shared run, or goes to onError once; the next run starts afresh', async () => {
    let fail = true;
    const load = async () => {
      await sleep(10);
      if (fail) throw new Error('read failed');
      return 'ok';
    };
    const applied: string[] = [];
    const r = new CoalescingReload({ load, apply: (v) => applied.push(v) });
    await expect(Promise.all([r.run(), r.run()])).rejects.toThrow('read failed');
    fail = false;
    await r.run();
    expect(applied).toEqual(['ok']);

    fail = true;
    const errors: unknown[] = [];
    const handled = new CoalescingReload({ load, apply: (v) => applied.push(v), onError: (err) => errors.push(err) });
    await Promise.all([handled.run(), handled.run(), handled.run()]);
    expect(errors).toHaveLength(1);
    expect(applied).toEqual(['ok']);
    await handled.idle();
  });
});
