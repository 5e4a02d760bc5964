/**
 * Queue.enqueueFolded: the caller's writes ride in the enqueue's own statement (one round trip,
 * no BEGIN/COMMIT). All or nothing: a guard that fails, or a dedupe key already taken, leaves no
 * job, no group row and none of the caller's rows; a conflict with a concurrent writer waits for
 * it and is decided by its commit or rollback.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/shared/clock.js';
import { FOLD_PARAM, FoldRejected, Queue, type EnqueueFold } from '../../src/shared/queue/index.js';
import { createTestDatabase, type TestDatabase } from '../harness/db.js';

let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase({ max: 6 });
  // Stand-ins for a caller's tables: a receipt per key, and the jobs it became.
  await db.pool.query('CREATE TABLE fold_receipts (key text PRIMARY KEY, note text NOT NULL)');
  await db.pool.query('CREATE TABLE fold_jobs (key text NOT NULL REFERENCES fold_receipts (key), job_id bigint NOT NULL)');
});
afterAll(async () => {
  await db?.drop();
});

let seq = 0;
const makeQueue = () =>
  new Queue<{ n: number }>({
    db: db.pool,
    clock: new ManualClock(),
    options: { name: `fold${++seq}`, maxAttempts: 3, backoffMs: [1000], timeoutMs: 60_000, retainCompleted: 100, retainFailed: 100 },
  });

const P = (n: number) => `$${FOLD_PARAM + n}`;
/** Receipt `key` and one fold_jobs row per job, each reading its job's id from `input`. */
const fold = (key: string): EnqueueFold => ({
  name: 'test_fold',
  ctes: `r AS (INSERT INTO fold_receipts (key, note) VALUES (${P(0)}, 'x') ON CONFLICT (key) DO NOTHING RETURNING key),
         j AS (INSERT INTO fold_jobs (key, job_id) SELECT ${P(0)}, i.id FROM input i)`,
  values: [key],
  guard: '(SELECT count(*) FROM r) = 1',
});

const count = async (sql: string, values: unknown[] = []) => Number((await db.pool.query<{ n: string }>(`SELECT count(*) AS n FROM (${sql}) s`, values)).rows[0]!.n);

describe('Queue.enqueueFolded', () => {
  it("commits the jobs and the caller's rows together; the caller's rows hold the jobs' ids", async () => {
    const q = makeQueue();
    const ids = await q.enqueueFolded(
      [
        { groupKey: 'a', payload: { n: 1 }, dedupeKey: 'd1' },
        { groupKey: 'b', payload: { n: 2 } },
        { groupKey: 'a', payload: { n: 3 } },
      ],
      fold('k1'),
    );
    expect(ids).toHaveLength(3);
    expect((await q.get(ids[0]!))!.payload).toEqual({ n: 1 });
    expect((await q.get(ids[2]!))!.payload).toEqual({ n: 3 });
    const rows = await db.pool.query<{ job_id: string }>('SELECT job_id FROM fold_jobs WHERE key = $1 ORDER BY job_id', ['k1']);
    expect(rows.rows.map((r) => String(r.job_id))).toEqual([...ids].sort((x, y) => Number(x) - Number(y)));
    expect(await q.depth()).toBe(3);
  });

  it('a false guard (the receipt exists) writes nothing: no job, no group row, no rows of the caller', async () => {
    const q = makeQueue();
    await q.enqueueFolded([{ groupKey: 'a', payload: { n: 1 } }], fold('k2'));
    const jobsBefore = await count('SELECT 1 FROM fold_jobs');
    await expect(q.enqueueFolded([{ groupKey: 'new-group', payload: { n: 2 } }], fold('k2'))).rejects.toBeInstanceOf(FoldRejected);
    expect(await count('SELECT 1 FROM queue_jobs WHERE queue = $1', [q.name])).toBe(1);
    expect(await count('SELECT 1 FROM queue_groups WHERE queue = $1 AND group_key = $2', [q.name, 'new-group'])).toBe(0);
    expect(await count('SELECT 1 FROM fold_jobs')).toBe(jobsBefore);
    expect(await q.depth()).toBe(1);
  });

  it("a dedupe key already taken writes nothing, the caller's new receipt included", async () => {
    const q = makeQueue();
    const [first] = await q.enqueueMany([{ groupKey: 'a', payload: { n: 1 }, dedupeKey: 'taken' }]);
    await expect(
      q.enqueueFolded(
        [
          { groupKey: 'b', payload: { n: 2 } },
          { groupKey: 'a', payload: { n: 3 }, dedupeKey: 'taken' },
        ],
        fold('k3'),
      ),
    ).rejects.toBeInstanceOf(FoldRejected);
    expect(await count('SELECT 1 FROM fold_receipts WHERE key = $1', ['k3'])).toBe(0);
    expect(await count('SELECT 1 FROM queue_jobs WHERE queue = $1', [q.name])).toBe(1);
    // The key is free again for a fold whose jobs are new.
    const ids = await q.enqueueFolded([{ groupKey: 'b', payload: { n: 4 }, dedupeKey: 'fresh' }], fold('k3'));
    expect(ids[0]).not.toBe(first);
    expect(await count('SELECT 1 FROM fold_jobs WHERE key = $1', ['k3'])).toBe(1);
  });

  it('racing a transaction that holds the same receipt: rejected when it commits, written when it rolls back', async () => {
    for (const outcome of ['COMMIT', 'ROLLBACK'] as const) {
      const q = makeQueue();
      const key = `race-${outcome}`;
      const other = await db.pool.connect();
      try {
        await other.query('BEGIN');
        await other.query("INSERT INTO fold_receipts (key, note) VALUES ($1, 'other')", [key]);
        // The folded statement waits on the uncommitted row, then sees how it ended.
        const folded = q.enqueueFolded([{ groupKey: 'a', payload: { n: 1 } }], fold(key)).then(
          (ids) => ids,
          (err: unknown) => err,
        );
        await new Promise((r) => setTimeout(r, 200));
        const waiting = await db.pool.query("SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()");
        expect(waiting.rows[0].n).toBe(1);
        await other.query(outcome);
        const r = await folded;
        if (outcome === 'COMMIT') {
          expect(r).toBeInstanceOf(FoldRejected);
          expect(await count('SELECT 1 FROM queue_jobs WHERE queue = $1', [q.name])).toBe(0);
          expect((await db.pool.query('SELECT note FROM fold_receipts WHERE key = $1', [key])).rows).toEqual([{ note: 'other' }]);
        } else {
          expect(r).toHaveLength(1);
          expect(await count('SELECT 1 FROM queue_jobs WHERE queue = $1', [q.name])).toBe(1);
          expect((await db.pool.query('SELECT note FROM fold_receipts WHERE key = $1', [key])).rows).toEqual([{ note: 'x' }]);
        }
      } finally {
        other.release();
      }
    }
  });

  it('other errors are not FoldRejected', async () => {
    const q = makeQueue();
    const bad: EnqueueFold = { name: 'test_fold_bad', ctes: `x AS (SELECT ${P(0)}::integer AS v)`, values: ['not a number'], guard: '(SELECT count(*) FROM x) = 1' };
    const err = await q.enqueueFolded([{ groupKey: 'a', payload: { n: 1 } }], bad).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Error);
    expect(err).not.toBeInstanceOf(FoldRejected);
    expect(await count('SELECT 1 FROM queue_jobs WHERE queue = $1', [q.name])).toBe(0);
  });
});
