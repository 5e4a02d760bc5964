/**
 * Group commit of POST /send (src/mta/intake.ts) against the real queue on a fresh database:
 * concurrent jobs share statements, each caller learns its own job id only after the commit,
 * repeats (in the queue or inside one batch) resolve to the first job, a value the database
 * refuses fails only its own request. The queue is wrapped to count statements, not replaced.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/shared/clock.js';
import type { EnqueueInput } from '../../src/shared/queue/types.js';
import { GroupCommit, type GroupCommitOptions } from '../../src/mta/intake.js';
import { createMtaQueue } from '../../src/mta/queue.js';
import type { Queue } from '../../src/shared/queue/queue.js';
import { createTestDatabase, type TestDatabase } from '../harness/db.js';

type P = { n: number; note?: string };
let db: TestDatabase;
let queue: Queue<P>;
let statements: number[];

/** The real queue, recording the size of each multi-row statement. */
const counted: Pick<Queue<P>, 'enqueueMany'> = {
  enqueueMany: (inputs: EnqueueInput<P>[]) => {
    statements.push(inputs.length);
    return queue.enqueueMany(inputs);
  },
};

beforeAll(async () => {
  db = await createTestDatabase();
  queue = createMtaQueue<P>({ db: db.pool, clock: new ManualClock(Date.UTC(2026, 0, 5)) });
});
afterAll(async () => db?.drop());
beforeEach(() => {
  statements = [];
});

let seq = 0;
const job = (over: Partial<EnqueueInput<P>> = {}): EnqueueInput<P> => {
  seq++;
  return { groupKey: `transactional:d${seq % 3}.example`, payload: { n: seq }, orgId: 'org-1', dedupeKey: `org-1:m-${seq}`, ...over };
};
const opts = (over: Partial<GroupCommitOptions> = {}): GroupCommitOptions => ({ maxInFlight: 1, maxItems: 500, maxBytes: 1 << 20, ...over });

describe('group commit', () => {
  it('writes concurrent jobs with one statement and answers each with its own committed job', async () => {
    const gc = new GroupCommit(counted, opts());
    const inputs = Array.from({ length: 40 }, () => job());
    const ids = await Promise.all(inputs.map((i) => gc.enqueue(i, 100)));
    expect(statements).toEqual([40]);
    expect(new Set(ids).size).toBe(40);
    for (const [k, id] of ids.entries()) {
      // Committed: visible to another connection, with the caller's own payload.
      expect(await queue.get(id)).toMatchObject({ state: 'pending', payload: inputs[k]!.payload, dedupeKey: inputs[k]!.dedupeKey });
    }
  });

  it('bounds a statement by count and by bytes; arrivals during a write go into the next one', async () => {
    const byCount = new GroupCommit(counted, opts({ maxItems: 10 }));
    await Promise.all(Array.from({ length: 25 }, () => byCount.enqueue(job(), 1)));
    expect(statements).toEqual([10, 10, 5]);

    statements = [];
    const byBytes = new GroupCommit(counted, opts({ maxBytes: 1000 }));
    // 400 bytes each: two fit in 1,000; a job larger than the bound still goes (alone).
    await Promise.all([...Array.from({ length: 5 }, () => byBytes.enqueue(job(), 400)), byBytes.enqueue(job(), 5000)]);
    expect(statements).toEqual([2, 2, 1, 1]);
  });

  it('with several statements in flight, splits what is waiting across them', async () => {
    const gc = new GroupCommit(counted, opts({ maxInFlight: 3, maxItems: 4 }));
    const ids = await Promise.all(Array.from({ length: 12 }, () => gc.enqueue(job(), 1)));
    expect(statements).toEqual([4, 4, 4]);
    expect(new Set(ids).size).toBe(12);
  });

  it('a repeat inside one batch is written once and both callers get the same job', async () => {
    const gc = new GroupCommit(counted, opts());
    const a = job();
    const [first, other, repeat] = await Promise.all([gc.enqueue(a, 1), gc.enqueue(job(), 1), gc.enqueue({ ...a, payload: { n: -1 } }, 1)]);
    expect(statements).toEqual([2]);
    expect(repeat).toBe(first);
    expect(other).not.toBe(first);
    expect((await queue.get(first))!.payload).toEqual(a.payload); // the first one's payload wins
  });

  it('a repeat of a job already in the queue returns that job', async () => {
    const gc = new GroupCommit(counted, opts());
    const a = job();
    const first = await gc.enqueue(a, 1);
    const [again, fresh] = await Promise.all([gc.enqueue(a, 1), gc.enqueue(job(), 1)]);
    expect(again).toBe(first);
    expect(fresh).not.toBe(first);
    expect((await queue.pending({ groupKey: a.groupKey })).filter((j) => j.dedupeKey === a.dedupeKey)).toHaveLength(1);
  });

  it('a value PostgreSQL refuses fails only its own request; the rest of the batch is stored', async () => {
    const gc = new GroupCommit(counted, opts());
    const good = [job(), job()];
    // A text column cannot hold U+0000 (22021): the database rejects the whole multi-row statement.
    const bad = job({ dedupeKey: `org-1:nul \u0000 here` });
    const results = await Promise.allSettled([gc.enqueue(good[0]!, 1), gc.enqueue(bad, 1), gc.enqueue(good[1]!, 1)]);
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
    expect(((results[1] as PromiseRejectedResult).reason as { code: string }).code).toMatch(/^22/);
    expect(statements[0]).toBe(3); // tried together first, then one by one
    for (const r of [results[0], results[2]]) expect(await queue.get((r as PromiseFulfilledResult<string>).value)).toMatchObject({ state: 'pending' });
    expect((await queue.pending({ groupKey: bad.groupKey })).some((j) => j.dedupeKey === bad.dedupeKey)).toBe(false);
  });

  it('a failure of the database itself fails every request of the batch (nothing half-written)', async () => {
    const broken: Pick<Queue<P>, 'enqueueMany'> = {
      enqueueMany: (inputs) => {
        statements.push(inputs.length);
        // A statement the server rejects for a reason that is not the data (undefined table).
        return queue.db.query('SELECT * FROM no_such_table_for_intake').then(() => []);
      },
    };
    const gc = new GroupCommit(broken, opts());
    const results = await Promise.allSettled([gc.enqueue(job(), 1), gc.enqueue(job(), 1)]);
    expect(results.map((r) => r.status)).toEqual(['rejected', 'rejected']);
    expect(statements).toEqual([2]);
  });

  it('drain() waits for what is pending and in flight', async () => {
    const gc = new GroupCommit(counted, opts({ maxItems: 5 }));
    const all = Array.from({ length: 12 }, () => gc.enqueue(job(), 1));
    let settled = 0;
    for (const p of all) void p.then(() => settled++);
    await gc.drain();
    await Promise.resolve();
    expect(settled).toBe(12);
    await gc.drain(); // idle: returns at once
  });
});
