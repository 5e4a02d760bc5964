import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/shared/clock.js';
import { createPool, type Db } from '../../src/shared/db/pool.js';
import { Queue, Worker, type Job, type JobOutcome, type QueueOptions } from '../../src/shared/queue/index.js';
import { createTestDatabase, type TestDatabase } from '../harness/db.js';

const SEC = 1000;
const MIN = 60 * SEC;
const MTA_BACKOFF = [30 * SEC, 2 * MIN, 8 * MIN, 30 * MIN, 120 * MIN];

let db: TestDatabase;
const extraPools: Db[] = [];

beforeAll(async () => {
  db = await createTestDatabase({ max: 10 });
});
afterAll(async () => {
  await Promise.all(extraPools.map((p) => p.end().catch(() => {})));
  await db?.drop();
});

let queueSeq = 0;
function makeQueue<P = { n: number }>(
  clock: ManualClock,
  overrides: Partial<QueueOptions> = {},
  pool: Db = db.pool,
): Queue<P> {
  return new Queue<P>({
    db: pool,
    clock,
    options: {
      name: `t${++queueSeq}`,
      maxAttempts: 5,
      backoffMs: MTA_BACKOFF,
      timeoutMs: 2 * MIN,
      retainCompleted: 10_000,
      retainFailed: 10_000,
      ...overrides,
    },
  });
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function waitUntil(cond: () => boolean | Promise<boolean>, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

/**
 * Structural invariants that must hold whenever no transaction is in flight. The claim index:
 * next_run_at is a lower bound of max(first due job, paused_until), and never below a pause
 * (so a paused group stays out of the claim's index range).
 */
async function checkInvariants<P>(queue: Queue<P>): Promise<void> {
  const orphans = await db.pool.query(
    `SELECT j.id FROM queue_jobs j
      WHERE j.queue = $1 AND j.state IN ('pending', 'active')
        AND NOT EXISTS (SELECT 1 FROM queue_groups g WHERE g.queue = j.queue AND g.group_key = j.group_key)`,
    [queue.name],
  );
  expect(orphans.rows, 'pending/active jobs without a group row').toEqual([]);
  const groups = await db.pool.query(
    `SELECT g.group_key, g.pending, g.active_job_id,
            (SELECT count(*) FROM queue_jobs j WHERE j.queue = g.queue AND j.group_key = g.group_key AND j.state = 'pending') AS real_pending,
            (SELECT min(id) FROM queue_jobs j WHERE j.queue = g.queue AND j.group_key = g.group_key AND j.state = 'active') AS real_active,
            g.next_run_at <= GREATEST(COALESCE((SELECT min(run_at) FROM queue_jobs j
              WHERE j.queue = g.queue AND j.group_key = g.group_key AND j.state = 'pending'), 'infinity'), g.paused_until) AS lower_bound,
            (g.paused_until IS NULL OR g.next_run_at >= g.paused_until) AS above_pause
       FROM queue_groups g WHERE g.queue = $1`,
    [queue.name],
  );
  for (const g of groups.rows) {
    expect(g.lower_bound, `next_run_at of ${g.group_key} is a lower bound`).toBe(true);
    expect(g.above_pause, `next_run_at of ${g.group_key} is not below its pause`).toBe(true);
    expect(g.pending, `pending counter of ${g.group_key}`).toBe(Number(g.real_pending));
    expect(g.active_job_id, `active job of ${g.group_key}`).toBe(g.real_active);
  }
  const s = await queue.stats();
  expect(await queue.depth()).toBe(s.pending + s.delayed + s.active);
}

describe('queue: groups under concurrent claimers', () => {
  it('8 workers with their own connections: never two jobs of a group at once, every job exactly once', async () => {
    const clock = new ManualClock();
    const GROUPS = 20;
    const PER_GROUP = 100;
    const name = `conc${++queueSeq}`;
    const setup = makeQueue(clock, { name });
    const inputs = [];
    for (let i = 0; i < GROUPS * PER_GROUP; i++) {
      inputs.push({ groupKey: `pool:d${i % GROUPS}.test`, payload: { n: i } });
    }
    // Half up front, half while the workers run (exercises enqueue racing group release).
    const firstHalf = await setup.enqueueMany(inputs.slice(0, inputs.length / 2));
    expect(new Set(firstHalf).size).toBe(inputs.length / 2);

    let seq = 0;
    const intervals = new Map<string, { start: number; end: number; id: string }[]>();
    const runs = new Map<string, number>();
    let handled = 0;
    const workersSeen = new Set<string>();
    const handler = async (job: Job<{ n: number }>): Promise<JobOutcome> => {
      const start = ++seq;
      workersSeen.add(job.lockedBy!);
      runs.set(job.id, (runs.get(job.id) ?? 0) + 1);
      // Yield (sometimes for real time) so other jobs interleave inside this window.
      if (job.payload.n % 3 === 0) await sleep(1);
      else await new Promise((r) => setImmediate(r));
      const end = ++seq;
      const list = intervals.get(job.groupKey) ?? [];
      list.push({ start, end, id: job.id });
      intervals.set(job.groupKey, list);
      handled++;
      return { type: 'complete' };
    };

    const workers: Worker<{ n: number }>[] = [];
    for (let w = 0; w < 8; w++) {
      const pool = createPool(db.url, { max: 3 });
      extraPools.push(pool);
      const queue = makeQueue<{ n: number }>(clock, { name }, pool);
      workers.push(new Worker({ queue, handler, concurrency: 5, pollMs: 25, maintainMs: 0, workerId: `w${w}` }));
    }
    await Promise.all(workers.map((w) => w.start()));
    for (let i = inputs.length / 2; i < inputs.length; i += 50) {
      await setup.enqueueMany(inputs.slice(i, i + 50));
      await sleep(5);
    }
    await waitUntil(() => handled >= GROUPS * PER_GROUP && workers.every((w) => w.active === 0), 120_000, 'all jobs');
    await Promise.all(workers.map((w) => w.stop({ drain: true })));

    // No overlap inside a group: sorted by start, each interval begins after the previous ended.
    expect(intervals.size).toBe(GROUPS);
    for (const [group, list] of intervals) {
      list.sort((a, b) => a.start - b.start);
      for (let i = 1; i < list.length; i++) {
        if (list[i]!.start < list[i - 1]!.end) {
          throw new Error(`overlap in ${group}: job ${list[i - 1]!.id} and job ${list[i]!.id}`);
        }
      }
    }
    // Exactly once.
    expect(runs.size).toBe(GROUPS * PER_GROUP);
    expect([...runs.values()].every((n) => n === 1)).toBe(true);
    const s = await setup.stats();
    expect(s).toEqual({ pending: 0, delayed: 0, active: 0, completed: GROUPS * PER_GROUP, failed: 0, cancelled: 0 });
    const bad = await db.pool.query(
      `SELECT count(*) AS n FROM queue_jobs WHERE queue = $1 AND (attempts <> 1 OR jsonb_array_length(history) <> 1)`,
      [name],
    );
    expect(bad.rows[0].n).toBe(0);
    // Several workers really took part.
    expect(workersSeen.size).toBeGreaterThan(1);
    expect(await setup.depth()).toBe(0);
    await checkInvariants(setup);
    const left = await db.pool.query('SELECT count(*) AS n FROM queue_groups WHERE queue = $1', [name]);
    expect(left.rows[0].n).toBe(0);
  }, 180_000);

  it('mixed concurrent operations (outcomes, cancels, bulk cancels, maintenance) keep the invariants', async () => {
    const clock = new ManualClock();
    const name = `mix${++queueSeq}`;
    const control = makeQueue(clock, { name, maxAttempts: 3 });
    const outcomes: JobOutcome[] = [
      { type: 'complete' },
      { type: 'complete' },
      { type: 'retry', error: 'again', delayMs: 0 },
      { type: 'defer', delayMs: 0, reason: 'later' },
      { type: 'fail', error: 'no' },
    ];
    let k = 0;
    const running = new Map<string, number>();
    let overlaps = 0;
    const workers: Worker<{ n: number }>[] = [];
    for (let w = 0; w < 4; w++) {
      const pool = createPool(db.url, { max: 3 });
      extraPools.push(pool);
      const queue = makeQueue<{ n: number }>(clock, { name, maxAttempts: 3 }, pool);
      workers.push(
        new Worker({
          queue,
          concurrency: 6,
          pollMs: 10,
          maintainMs: 15,
          handler: async (job) => {
            if (running.has(job.groupKey)) overlaps++;
            running.set(job.groupKey, 1);
            await sleep(job.payload.n % 2);
            running.delete(job.groupKey);
            return outcomes[k++ % outcomes.length]!;
          },
        }),
      );
    }
    await Promise.all(workers.map((w) => w.start()));
    const all: string[] = [];
    const errors: unknown[] = [];
    const producer = (async () => {
      for (let i = 0; i < 40; i++) {
        const ids = await control.enqueueMany(
          Array.from({ length: 15 }, (_, j) => ({
            groupKey: `g${(i + j) % 12}`,
            payload: { n: i * 15 + j },
            orgId: `org${j % 5}`,
            priority: j % 3,
          })),
        );
        all.push(...ids);
        await sleep(2);
      }
    })().catch((e: unknown) => errors.push(e));
    const canceller = (async () => {
      for (let i = 0; i < 40; i++) {
        if (all.length > 0) await control.cancel(all[Math.floor(Math.random() * all.length)]!);
        if (i % 8 === 0) await control.cancelByOrg(`org${i % 5}`);
        await control.maintain();
        await sleep(3);
      }
    })().catch((e: unknown) => errors.push(e));
    await Promise.all([producer, canceller]);
    expect(errors).toEqual([]);
    await waitUntil(
      async () => {
        const s = await control.stats();
        return s.pending + s.delayed + s.active === 0;
      },
      120_000,
      'the queue to drain',
    );
    await Promise.all(workers.map((w) => w.stop()));
    expect(overlaps).toBe(0);
    const s = await control.stats();
    expect(s.completed + s.failed + s.cancelled).toBe(all.length);
    await checkInvariants(control);
    const left = await db.pool.query('SELECT count(*) AS n FROM queue_groups WHERE queue = $1', [name]);
    expect(left.rows[0].n).toBe(0);
    const badAttempts = await db.pool.query(
      `SELECT count(*) AS n FROM queue_jobs
        WHERE queue = $1 AND (attempts > max_attempts
           OR attempts <> (SELECT count(*) FROM jsonb_array_elements(history) h WHERE h->>'outcome' <> 'deferred'))`,
      [name],
    );
    expect(badAttempts.rows[0].n).toBe(0);
  }, 180_000);

  it('a claim takes at most one job per group and skips busy groups', async () => {
    const clock = new ManualClock();
    const q = makeQueue(clock);
    await q.enqueueMany([
      { groupKey: 'a', payload: { n: 1 } },
      { groupKey: 'a', payload: { n: 2 } },
      { groupKey: 'b', payload: { n: 3 } },
      { groupKey: 'c', payload: { n: 4 } },
    ]);
    const first = await q.claim('w1', 10);
    expect(first.map((j) => j.groupKey).sort()).toEqual(['a', 'b', 'c']);
    expect(await q.claim('w2', 10)).toEqual([]);
    const a = first.find((j) => j.groupKey === 'a')!;
    expect(await q.complete(a)).toBe('completed');
    const second = await q.claim('w2', 10);
    expect(second.map((j) => j.payload.n)).toEqual([2]);
    await checkInvariants(q);
  });

  it('payloads of one batch keep their exact content: multi-byte text, escapes, NUL, large and empty values', async () => {
    const clock = new ManualClock();
    const q = makeQueue<unknown>(clock);
    // Byte offsets into one binary parameter: a character-based cut would shift every payload after a multi-byte one.
    const payloads: unknown[] = [
      { s: 'Grüße € 😀 日本語', n: 1 },
      { s: 'quote " backslash \\ newline \n tab \t nul \u0000 end' },
      { big: 'é'.repeat(60_000) + 'x'.repeat(70_000), list: [1, 2.5, null, true, { deep: ['😀'] }] },
      {},
      'just a string',
      [null],
      { s: '\u2028\u2029 separators and a lone escape \\u0000' },
    ];
    const ids = await q.enqueueMany(payloads.map((payload, i) => ({ groupKey: `p${i}`, payload })));
    expect(ids).toHaveLength(payloads.length);
    const claimed = await q.claim('w', 100);
    const byId = new Map(claimed.map((j) => [j.id, j.payload]));
    ids.forEach((id, i) => expect(byId.get(id)).toEqual(payloads[i]));
    // The single-row path returns the stored row as well.
    const one = await q.enqueue({ groupKey: 'solo', payload: payloads[0] });
    expect(one.payload).toEqual(payloads[0]);
    expect((await q.get(one.id))!.payload).toEqual(payloads[0]);
    // Bytes the queue encodes (migration 075, payload-codec.ts), out of line and never compressed again by PostgreSQL.
    const col = await db.pool.query(
      `SELECT a.atttypid::regtype::text AS type, a.attstorage AS storage
         FROM pg_attribute a WHERE a.attrelid = 'queue_jobs'::regclass AND a.attname = 'payload'`,
    );
    expect(col.rows[0]).toEqual({ type: 'bytea', storage: 'e' });
  });

  it('queue tables are vacuumed by a fixed dead-row count, not 20 % of their size (migration 006)', async () => {
    const opts = await db.pool.query<{ rel: string; opts: string[] }>(
      `SELECT c.relname AS rel, c.reloptions AS opts FROM pg_class c
        WHERE c.oid IN ('queue_jobs'::regclass, 'queue_groups'::regclass,
                        (SELECT reltoastrelid FROM pg_class WHERE oid = 'queue_jobs'::regclass))`,
    );
    const byRel = new Map(opts.rows.map((r) => [r.rel.startsWith('pg_toast') ? 'toast' : r.rel, r.opts]));
    for (const rel of ['queue_jobs', 'toast', 'queue_groups']) {
      expect(byRel.get(rel), rel).toEqual(expect.arrayContaining(['autovacuum_vacuum_scale_factor=0', 'autovacuum_vacuum_cost_delay=0']));
    }
    expect(byRel.get('toast')).toContain('autovacuum_vacuum_threshold=5000');
  });
});

describe('queue: ordering', () => {
  it('runs lower priority keys first inside a group, FIFO among equals', async () => {
    const clock = new ManualClock();
    const q = makeQueue(clock);
    const prios = [5, 1, 3, 0, 1, 2];
    await q.enqueueMany(prios.map((p, i) => ({ groupKey: 'g', payload: { n: i }, priority: p })));
    // A more urgent job that is not due yet does not block due ones.
    await q.enqueue({ groupKey: 'g', payload: { n: 99 }, priority: -10, runAt: clock.now() + MIN });
    const order: number[] = [];
    for (;;) {
      const [job] = await q.claim('w', 5);
      if (!job) break;
      order.push(job.payload.n);
      await q.complete(job);
    }
    expect(order).toEqual([3, 1, 4, 5, 2, 0]);
    clock.advance(MIN);
    const [late] = await q.claim('w', 5);
    expect(late!.payload.n).toBe(99);
    await q.complete(late!);
    await checkInvariants(q);
  });

  it('claims the groups waiting longest first', async () => {
    const clock = new ManualClock();
    const q = makeQueue(clock);
    await q.enqueue({ groupKey: 'late', payload: { n: 1 }, runAt: clock.now() - 10 * SEC });
    await q.enqueue({ groupKey: 'early', payload: { n: 2 }, runAt: clock.now() - 60 * SEC });
    await q.enqueue({ groupKey: 'middle', payload: { n: 3 }, runAt: clock.now() - 30 * SEC });
    const jobs = await q.claim('w', 2);
    expect(jobs.map((j) => j.groupKey)).toEqual(['early', 'middle']);
  });
});

describe('queue: deferral, retries and backoff', () => {
  it('a deferral gives the attempt back; retries consume attempts with the backoff schedule; exhausted -> failed', async () => {
    const clock = new ManualClock();
    const q = makeQueue(clock, { maxAttempts: 3 });
    const job = await q.enqueue({ groupKey: 'mx:example.org', payload: { n: 1 } });
    expect(job.state).toBe('pending');
    expect(job.attempts).toBe(0);

    // Attempt 1 is deferred (e.g. a rate limit): not consumed.
    const [c1] = await q.claim('w', 1);
    expect(c1!.attempts).toBe(1);
    expect(await q.defer(c1!, 10 * SEC, 'rate limited')).toBe('pending');
    let j = (await q.get(job.id))!;
    expect(j.attempts).toBe(0);
    expect(j.runAt).toBe(clock.now() + 10 * SEC);
    expect(j.lastError).toBeNull();
    expect(j.history).toEqual([
      {
        attempt: 1,
        startedAt: new Date(clock.now()).toISOString(),
        finishedAt: new Date(clock.now()).toISOString(),
        outcome: 'deferred',
        reason: 'rate limited',
      },
    ]);
    expect(await q.claim('w', 1)).toEqual([]);
    expect((await q.stats()).delayed).toBe(1);

    // Attempt 1 again, now a retry: consumed, run_at = now + 30 s.
    clock.advance(10 * SEC);
    const [c2] = await q.claim('w', 1);
    expect(c2!.id).toBe(job.id);
    expect(c2!.attempts).toBe(1);
    expect(await q.retry(c2!, '421 try later')).toBe('pending');
    j = (await q.get(job.id))!;
    expect(j.attempts).toBe(1);
    expect(j.runAt).toBe(clock.now() + 30 * SEC);
    expect(j.lastError).toBe('421 try later');

    clock.advance(30 * SEC - 1);
    expect(await q.claim('w', 1)).toEqual([]);
    clock.advance(1);
    const [c3] = await q.claim('w', 1);
    expect(c3!.attempts).toBe(2);
    expect(await q.retry(c3!, '451 greylisted')).toBe('pending');
    j = (await q.get(job.id))!;
    expect(j.runAt).toBe(clock.now() + 2 * MIN);

    clock.advance(2 * MIN);
    const [c4] = await q.claim('w', 1);
    expect(c4!.attempts).toBe(3);
    expect(await q.retry(c4!, '452 mailbox full')).toBe('failed');
    j = (await q.get(job.id))!;
    expect(j.state).toBe('failed');
    expect(j.attempts).toBe(3);
    expect(j.finishedAt).toBe(clock.now());
    expect(j.lastError).toBe('452 mailbox full');
    expect(j.history.map((h) => [h.attempt, h.outcome, h.error ?? h.reason])).toEqual([
      [1, 'deferred', 'rate limited'],
      [1, 'retry', '421 try later'],
      [2, 'retry', '451 greylisted'],
      [3, 'failed', '452 mailbox full'],
    ]);
    expect(await q.claim('w', 1)).toEqual([]);
    await checkInvariants(q);
  });

  it('applies the whole schedule, repeats its last entry, honours an explicit delay and fail()', async () => {
    const clock = new ManualClock();
    const q = makeQueue(clock, { maxAttempts: 8 });
    expect([1, 2, 3, 4, 5, 6, 7].map((a) => q.backoffFor(a))).toEqual([...MTA_BACKOFF, 120 * MIN, 120 * MIN]);
    const job = await q.enqueue({ groupKey: 'g', payload: { n: 1 } });
    const delays: number[] = [];
    for (let a = 1; a <= 7; a++) {
      const [c] = await q.claim('w', 1);
      expect(c!.attempts).toBe(a);
      await q.retry(c!, `e${a}`);
      const j = (await q.get(job.id))!;
      delays.push(j.runAt - clock.now());
      clock.set(j.runAt);
    }
    expect(delays).toEqual([...MTA_BACKOFF, 120 * MIN, 120 * MIN]);

    const [c] = await q.claim('w', 1);
    expect(await q.retry(c!, 'explicit', 5 * SEC)).toBe('failed'); // attempt 8 of 8
    const other = await q.enqueue({ groupKey: 'h', payload: { n: 2 } });
    const [o1] = await q.claim('w', 1);
    expect(await q.retry(o1!, 'explicit', 5 * SEC)).toBe('pending');
    expect((await q.get(other.id))!.runAt).toBe(clock.now() + 5 * SEC);
    clock.advance(5 * SEC);
    const [o2] = await q.claim('w', 1);
    expect(await q.fail(o2!, '550 no such user')).toBe('failed');
    const done = (await q.get(other.id))!;
    expect(done.attempts).toBe(2);
    expect(done.history.map((h) => h.outcome)).toEqual(['retry', 'failed']);
    await checkInvariants(q);
  });

  it('a handler that throws is retried with the error message', async () => {
    const clock = new ManualClock();
    const q = makeQueue(clock);
    const job = await q.enqueue({ groupKey: 'g', payload: { n: 1 } });
    const worker = new Worker({
      queue: q,
      concurrency: 2,
      pollMs: 20,
      maintainMs: 0,
      handler: async () => {
        throw new Error('connection reset');
      },
    });
    await worker.start();
    await waitUntil(async () => (await q.get(job.id))!.history.length === 1, 20_000, 'the retry');
    await worker.stop();
    const j = (await q.get(job.id))!;
    expect(j.state).toBe('pending');
    expect(j.attempts).toBe(1);
    expect(j.lastError).toBe('connection reset');
    expect(j.runAt).toBe(clock.now() + 30 * SEC);
  });
});

describe('queue: lease expiry', () => {
  it("a killed worker's job runs again once its lease passed; the stale worker cannot finish it", async () => {
    const clock = new ManualClock();
    const q = makeQueue(clock, { timeoutMs: 2 * MIN });
    const job = await q.enqueue({ groupKey: 'g', payload: { n: 1 } });
    await q.enqueue({ groupKey: 'g', payload: { n: 2 } });
    const [dead] = await q.claim('killed-worker', 5);
    expect(dead!.id).toBe(job.id);
    expect(dead!.leaseUntil).toBe(clock.now() + 2 * MIN);
    expect(dead!.lockedBy).toBe('killed-worker');

    // While the lease holds, nothing is taken back and the group stays busy.
    clock.advance(2 * MIN);
    expect((await q.maintain()).expired).toBe(0);
    expect(await q.claim('w2', 5)).toEqual([]);

    clock.advance(1);
    expect((await q.maintain()).expired).toBe(1);
    let j = (await q.get(job.id))!;
    expect(j.state).toBe('pending');
    expect(j.attempts).toBe(1);
    expect(j.history).toEqual([
      expect.objectContaining({ attempt: 1, outcome: 'lease_expired', finishedAt: new Date(clock.now()).toISOString() }),
    ]);

    const [again] = await q.claim('w2', 5);
    expect(again!.id).toBe(job.id);
    expect(again!.attempts).toBe(2);
    // The dead worker's late outcome is refused: the run belongs to w2 now.
    expect(await q.complete(dead!)).toBeNull();
    expect((await q.get(job.id))!.state).toBe('active');
    expect(await q.complete(again!)).toBe('completed');
    expect(await q.complete(again!)).toBeNull(); // twice: refused
    j = (await q.get(job.id))!;
    expect(j.history.map((h) => h.outcome)).toEqual(['lease_expired', 'completed']);
    await checkInvariants(q);
  });

  it('lease expiry on the last attempt fails the job', async () => {
    const clock = new ManualClock();
    const q = makeQueue(clock, { maxAttempts: 1, timeoutMs: SEC });
    const job = await q.enqueue({ groupKey: 'g', payload: { n: 1 } });
    await q.claim('w', 1);
    clock.advance(SEC + 1);
    expect((await q.expireLeases())).toBe(1);
    const j = (await q.get(job.id))!;
    expect(j.state).toBe('failed');
    expect(j.lastError).toMatch(/lease expired/);
    await checkInvariants(q);
  });

  it('a Worker stopped without finishing leaves its job to another Worker after lease expiry', async () => {
    const clock = new ManualClock();
    const q = makeQueue(clock, { timeoutMs: MIN });
    const job = await q.enqueue({ groupKey: 'g', payload: { n: 1 } });
    let started = false;
    const stuck = new Worker({
      queue: q,
      concurrency: 1,
      pollMs: 20,
      maintainMs: 0,
      workerId: 'stuck',
      handler: () => {
        started = true;
        return new Promise<JobOutcome>(() => {}); // never settles: a hung or killed process
      },
    });
    await stuck.start();
    await waitUntil(() => started, 20_000, 'the stuck handler');
    await stuck.stop({ drain: true, timeoutMs: 50 });
    expect((await q.get(job.id))!.state).toBe('active');

    clock.advance(MIN + 1);
    const ran: string[] = [];
    const rescuer = new Worker({
      queue: q,
      concurrency: 1,
      pollMs: 20,
      maintainMs: 20,
      workerId: 'rescuer',
      handler: async (j) => {
        ran.push(j.id);
        return { type: 'complete' };
      },
    });
    await rescuer.start();
    await waitUntil(async () => (await q.get(job.id))!.state === 'completed', 20_000, 'the rescued job');
    await rescuer.stop();
    expect(ran).toEqual([job.id]);
    const j = (await q.get(job.id))!;
    expect(j.attempts).toBe(2);
    expect(j.history.map((h) => h.outcome)).toEqual(['lease_expired', 'completed']);
  });
});

describe('queue: retention', () => {
  it('keeps exactly the configured numbers of the most recently finished jobs', async () => {
    const clock = new ManualClock();
    const q = makeQueue(clock, { retainCompleted: 3, retainFailed: 2, retainCancelled: 1 });
    // 8 groups so all are claimable at once; finished in reverse id order, one second apart,
    // so "newest" (by finish time) differs from "highest id".
    const ids = await q.enqueueMany(Array.from({ length: 8 }, (_, i) => ({ groupKey: `g${i}`, payload: { n: i } })));
    const claimed = await q.claim('w', 8);
    expect(claimed).toHaveLength(8);
    const byId = new Map(claimed.map((j) => [j.id, j]));
    const order = [...ids].reverse();
    // ids[7..3] complete (newest finishers: ids[5], ids[4], ids[3]); ids[2..0] fail (newest: ids[1], ids[0]).
    for (const id of order) {
      clock.advance(SEC);
      const job = byId.get(id)!;
      if (ids.indexOf(id) >= 3) await q.complete(job);
      else await q.fail(job, 'boom');
    }
    const cancelIds = await q.enqueueMany(Array.from({ length: 3 }, (_, i) => ({ groupKey: 'c', payload: { n: 100 + i } })));
    for (const id of cancelIds) {
      clock.advance(SEC);
      expect(await q.cancel(id)).toBe(true);
    }
    expect(await q.stats()).toMatchObject({ completed: 5, failed: 3, cancelled: 3 });

    const r = await q.maintain();
    expect(r.deleted).toBe(2 + 1 + 2);
    expect(await q.stats()).toMatchObject({ completed: 3, failed: 2, cancelled: 1 });
    const kept = await db.pool.query<{ id: number; state: string }>(
      'SELECT id, state FROM queue_jobs WHERE queue = $1 ORDER BY id',
      [q.name],
    );
    expect(kept.rows.map((r) => [String(r.id), r.state])).toEqual([
      [ids[0], 'failed'],
      [ids[1], 'failed'],
      [ids[3], 'completed'],
      [ids[4], 'completed'],
      [ids[5], 'completed'],
      [cancelIds[2], 'cancelled'],
    ]);
    // Idempotent; pending and active jobs are never touched.
    await q.enqueue({ groupKey: 'p', payload: { n: 0 } });
    expect((await q.maintain()).deleted).toBe(0);
    expect((await q.stats()).pending).toBe(1);
  });
});

describe('queue: cancel', () => {
  it('cancels pending jobs only; bulk cancel touches only that organization', async () => {
    const clock = new ManualClock();
    const q = makeQueue(clock);
    const a = await q.enqueue({ groupKey: 'g1', payload: { n: 1 } });
    const b = await q.enqueue({ groupKey: 'g1', payload: { n: 2 }, orgId: 'org-1' });
    const [active] = await q.claim('w', 1);
    expect(active!.id).toBe(a.id);

    expect(await q.cancel(a.id)).toBe(false); // active: runs on
    expect((await q.get(a.id))!.state).toBe('active');
    expect(await q.cancel(b.id)).toBe(true);
    expect(await q.cancel(b.id)).toBe(false); // already cancelled
    expect(await q.cancel('999999999')).toBe(false);
    expect(await q.cancel('not-an-id')).toBe(false);
    const cb = (await q.get(b.id))!;
    expect(cb.state).toBe('cancelled');
    expect(cb.finishedAt).toBe(clock.now());

    const org1 = await q.enqueueMany([
      { groupKey: 'g2', payload: { n: 3 }, orgId: 'org-1', runAt: clock.now() - SEC },
      { groupKey: 'g3', payload: { n: 4 }, orgId: 'org-1', runAt: clock.now() + MIN },
      { groupKey: 'g4', payload: { n: 5 }, orgId: 'org-1' },
    ]);
    const others = await q.enqueueMany([
      { groupKey: 'g2', payload: { n: 6 }, orgId: 'org-2' },
      { groupKey: 'g3', payload: { n: 7 } },
    ]);
    // One org-1 job becomes active: bulk cancel leaves it running.
    const claimed = await q.claim('w', 1);
    expect(claimed.map((j) => j.id)).toEqual([org1[0]]);

    expect(await q.cancelByOrg('org-1')).toBe(2);
    expect((await q.get(org1[0]!))!.state).toBe('active');
    expect((await q.get(org1[1]!))!.state).toBe('cancelled');
    expect((await q.get(org1[2]!))!.state).toBe('cancelled');
    for (const id of others) expect((await q.get(id))!.state).toBe('pending');
    expect(await q.cancelByOrg('org-1')).toBe(0);
    await checkInvariants(q);

    // Cancelled jobs are never claimed; the rest still runs.
    const seen: number[] = [];
    await q.complete(active!);
    await q.complete(claimed[0]!);
    clock.advance(MIN);
    for (;;) {
      const jobs = await q.claim('w', 10);
      if (jobs.length === 0) break;
      for (const j of jobs) {
        seen.push(j.payload.n);
        await q.complete(j);
      }
    }
    expect(seen.sort()).toEqual([6, 7]);
    await checkInvariants(q);
    expect(await q.depth()).toBe(0);
  });
});

describe('queue: stats and listing', () => {
  it('counts by state and lists pending jobs with limit, offset and filters', async () => {
    const clock = new ManualClock();
    const q = makeQueue(clock);
    const ids = await q.enqueueMany([
      { groupKey: 'pool1:gmail.com', payload: { n: 0 }, orgId: 'a', runAt: clock.now() - 9 * SEC },
      { groupKey: 'pool1:gmail.com', payload: { n: 1 }, orgId: 'a' },
      { groupKey: 'pool2:gmail.com', payload: { n: 2 }, orgId: 'b', runAt: clock.now() - 8 * SEC },
      { groupKey: 'pool1:yahoo.com', payload: { n: 3 }, orgId: 'b', runAt: clock.now() - 7 * SEC },
      { groupKey: 'pool1:yahoo.com', payload: { n: 4 }, runAt: clock.now() + MIN },
      { groupKey: 'pool1:100%_x.com', payload: { n: 5 } },
      { groupKey: 'done:x', payload: { n: 6 } },
      { groupKey: 'fail:x', payload: { n: 7 } },
      { groupKey: 'cancel:x', payload: { n: 8 } },
    ]);
    const claimed = await q.claim('w', 3); // oldest groups: pool1:gmail.com (n0), pool2:gmail.com (n2), pool1:yahoo.com (n3)
    expect(claimed.map((j) => j.payload.n).sort()).toEqual([0, 2, 3]);
    const more = await q.claim('w', 10);
    for (const j of more) {
      if (j.payload.n === 6) await q.complete(j);
      else if (j.payload.n === 7) await q.fail(j, 'x');
      else await q.defer(j, 0, 'back');
    }
    await q.cancel(ids[8]!);

    expect(await q.stats()).toEqual({ pending: 2, delayed: 1, active: 3, completed: 1, failed: 1, cancelled: 1 });
    expect(await q.depth()).toBe(6);
    await checkInvariants(q);

    const n = (jobs: Job<{ n: number }>[]) => jobs.map((j) => j.payload.n);
    expect(n(await q.pending())).toEqual([1, 4, 5]);
    expect(n(await q.pending({ limit: 2 }))).toEqual([1, 4]);
    expect(n(await q.pending({ limit: 2, offset: 2 }))).toEqual([5]);
    expect(n(await q.pending({ groupKeySuffix: ':gmail.com' }))).toEqual([1]);
    expect(n(await q.pending({ groupKeyPrefix: 'pool1:' }))).toEqual([1, 4, 5]);
    expect(n(await q.pending({ groupKeySuffix: ':yahoo.com', groupKeyPrefix: 'pool1:' }))).toEqual([4]);
    expect(n(await q.pending({ groupKey: 'pool1:yahoo.com' }))).toEqual([4]);
    expect(n(await q.pending({ groupKeySuffix: '%_x.com' }))).toEqual([5]); // LIKE metacharacters are literal
    expect(n(await q.pending({ groupKeySuffix: '_.com' }))).toEqual([]);
    expect(n(await q.pending({ orgId: 'a' }))).toEqual([1]);
    expect(n(await q.pending({ ready: true }))).toEqual([1, 5]);
    expect(n(await q.pending({ ready: false }))).toEqual([4]);

    const got = (await q.get(ids[4]!))!;
    expect(got).toMatchObject({ id: ids[4], groupKey: 'pool1:yahoo.com', state: 'pending', priority: 0, runAt: clock.now() + MIN });
    expect(await q.get('123456789')).toBeNull();
    // Queues sharing the tables do not see each other.
    const other = makeQueue(clock);
    expect(await other.stats()).toEqual({ pending: 0, delayed: 0, active: 0, completed: 0, failed: 0, cancelled: 0 });
    expect(await other.get(ids[0]!)).toBeNull();
  });
});

describe('queue: database guarantees', () => {
  it('the partial unique index rejects a second active job of a group', async () => {
    const clock = new ManualClock();
    const q = makeQueue(clock);
    const ids = await q.enqueueMany([
      { groupKey: 'g', payload: { n: 1 } },
      { groupKey: 'g', payload: { n: 2 } },
    ]);
    const [active] = await q.claim('w', 5);
    expect(active!.id).toBe(ids[0]);
    await expect(db.pool.query(`UPDATE queue_jobs SET state = 'active' WHERE id = $1`, [ids[1]])).rejects.toMatchObject({
      code: '23505',
      constraint: 'queue_jobs_one_active',
    });
    await expect(
      db.pool.query(
        `INSERT INTO queue_jobs (queue, group_key, state, max_attempts, run_at, created_at, payload)
         VALUES ($1, 'g', 'active', 1, now(), now(), '{}')`,
        [q.name],
      ),
    ).rejects.toMatchObject({ code: '23505' });
    // Another group, or another queue with the same group key, is fine.
    const other = makeQueue(clock);
    await other.enqueue({ groupKey: 'g', payload: { n: 3 } });
    expect(await other.claim('w', 5)).toHaveLength(1);
  });

  it('a dedupe key makes a second enqueue return the first job (per queue)', async () => {
    const clock = new ManualClock();
    const q = makeQueue(clock);
    const first = await q.enqueue({ groupKey: 'g', payload: { n: 1 }, dedupeKey: 'msg-1' });
    const second = await q.enqueue({ groupKey: 'g', payload: { n: 2 }, dedupeKey: 'msg-1' });
    expect(second.id).toBe(first.id);
    expect(second.payload).toEqual({ n: 1 });
    expect(second.dedupeKey).toBe('msg-1');

    const ids = await q.enqueueMany([
      { groupKey: 'g', payload: { n: 3 }, dedupeKey: 'msg-2' },
      { groupKey: 'h', payload: { n: 4 }, dedupeKey: 'msg-2' },
      { groupKey: 'h', payload: { n: 5 }, dedupeKey: 'msg-1' },
      { groupKey: 'h', payload: { n: 6 } },
      { groupKey: 'h', payload: { n: 7 } },
    ]);
    expect(ids[1]).toBe(ids[0]);
    expect(ids[2]).toBe(first.id);
    expect(new Set(ids).size).toBe(4);

    // Concurrent enqueues of one key: a single job.
    const racing = await Promise.all(
      Array.from({ length: 8 }, (_, i) => q.enqueue({ groupKey: 'r', payload: { n: 10 + i }, dedupeKey: 'race' })),
    );
    expect(new Set(racing.map((j) => j.id)).size).toBe(1);

    const other = makeQueue(clock);
    expect((await other.enqueue({ groupKey: 'g', payload: { n: 8 }, dedupeKey: 'msg-1' })).id).not.toBe(first.id);
    expect((await q.stats()).pending).toBe(5);
    await checkInvariants(q);
  });
});

describe('queue: worker', () => {
  it('wakes up on NOTIFY: a worker polling every minute picks up a new job promptly', async () => {
    const clock = new ManualClock();
    const q = makeQueue(clock);
    const ran: string[] = [];
    const worker = new Worker({
      queue: q,
      concurrency: 4,
      pollMs: 60_000,
      maintainMs: 0,
      handler: async (job) => {
        ran.push(job.id);
        return { type: 'complete' };
      },
    });
    await worker.start(); // resolves once LISTEN is in place
    await sleep(50);
    for (let round = 0; round < 3; round++) {
      const job = await q.enqueue({ groupKey: `g${round}`, payload: { n: round } });
      // Generous bound for a loaded machine; polling alone would take 60 s.
      await waitUntil(() => ran.includes(job.id), 15_000, 'the notified job');
    }
    await worker.stop();
    expect(ran).toHaveLength(3);
  });

  it("aborts a handler's signal before its lease passes", async () => {
    const clock = new ManualClock();
    const q = makeQueue(clock, { timeoutMs: 300 });
    const job = await q.enqueue({ groupKey: 'g', payload: { n: 1 } });
    const worker = new Worker({
      queue: q,
      concurrency: 1,
      pollMs: 20,
      maintainMs: 0,
      handler: (_job, { signal }) =>
        new Promise<JobOutcome>((resolve) => {
          signal.addEventListener('abort', () => resolve({ type: 'retry', error: String(signal.reason) }));
        }),
    });
    await worker.start();
    await waitUntil(async () => (await q.get(job.id))!.history.length === 1, 20_000, 'the aborted run');
    await worker.stop();
    const j = (await q.get(job.id))!;
    expect(j.lastError).toMatch(/job timeout/);
    expect(j.history.map((h) => h.outcome)).toEqual(['retry']);
  });

  it('stop({ drain: true }) stops claiming and waits for running jobs', async () => {
    const clock = new ManualClock();
    const q = makeQueue(clock);
    await q.enqueueMany(Array.from({ length: 6 }, (_, i) => ({ groupKey: `g${i}`, payload: { n: i } })));
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let started = 0;
    const worker = new Worker({
      queue: q,
      concurrency: 3,
      pollMs: 20,
      maintainMs: 0,
      handler: async () => {
        started++;
        await gate;
        return { type: 'complete' };
      },
    });
    await worker.start();
    await waitUntil(() => started === 3, 20_000, 'three running jobs');
    const stopping = worker.stop({ drain: true, timeoutMs: 20_000 });
    await sleep(50);
    release();
    await stopping;
    expect(started).toBe(3);
    expect(worker.active).toBe(0);
    expect(await q.stats()).toMatchObject({ completed: 3, pending: 3, active: 0 });
  });
});

describe('queue: group pauses', () => {
  const HOUR = 60 * MIN;
  const ns = (jobs: Job<{ n: number }>[]) => jobs.map((j) => j.payload.n);
  const groupRows = async (q: Queue<unknown>) =>
    Number((await db.pool.query('SELECT count(*) AS n FROM queue_groups WHERE queue = $1', [q.name])).rows[0].n);

  it('a group-scoped deferral holds back every job of the group until the pause passes; other groups run on', async () => {
    const clock = new ManualClock();
    const q = makeQueue(clock);
    await q.enqueueMany([
      ...[1, 2, 3, 4].map((n) => ({ groupKey: 'pool:degraded.example', payload: { n } })),
      { groupKey: 'pool:fine.example', payload: { n: 10 } },
      { groupKey: 'pool:fine.example', payload: { n: 11 } },
    ]);
    const first = await q.claim('w', 10);
    expect(ns(first).sort((a, b) => a - b)).toEqual([1, 10]);
    const degraded = first.find((j) => j.payload.n === 1)!;
    expect(degraded.attempts).toBe(1);
    expect(await q.defer(degraded, 2 * MIN, 'smtp_intel_degraded', { scope: 'group' })).toBe('pending');

    // The job itself: an ordinary deferral (attempt given back), marked as group-wide in its history.
    const j1 = (await q.get(degraded.id))!;
    expect(j1.attempts).toBe(0);
    expect(j1.runAt).toBe(clock.now() + 2 * MIN);
    const at = new Date(clock.now()).toISOString();
    expect(j1.history).toEqual([
      { attempt: 1, startedAt: at, finishedAt: at, outcome: 'deferred', reason: 'smtp_intel_degraded', scope: 'group' },
    ]);
    expect(await q.pausedUntil('pool:degraded.example')).toBe(clock.now() + 2 * MIN);
    expect(await q.pausedUntil('pool:fine.example')).toBeNull();

    // Jobs 2-4 are due but held; the other group keeps running.
    await q.complete(first.find((j) => j.payload.n === 10)!);
    const next = await q.claim('w', 10);
    expect(ns(next)).toEqual([11]);
    await q.complete(next[0]!);
    expect(await q.claim('w', 10)).toEqual([]);
    expect(await q.stats()).toMatchObject({ pending: 0, delayed: 4, active: 0, completed: 2 });
    expect(ns(await q.pending({ ready: true }))).toEqual([]);
    expect(ns(await q.pending({ ready: false }))).toEqual([1, 2, 3, 4]);
    expect(ns(await q.pending({ groupKeySuffix: ':degraded.example' }))).toEqual([1, 2, 3, 4]);
    await checkInvariants(q);

    clock.advance(2 * MIN - 1);
    expect(await q.claim('w', 10)).toEqual([]);
    clock.advance(1);
    expect(await q.pausedUntil('pool:degraded.example')).toBeNull();
    expect(await q.stats()).toMatchObject({ pending: 4, delayed: 0 });
    // The group resumes in its own order: the jobs that waited (FIFO), then the deferred one.
    const order: number[] = [];
    for (;;) {
      const [j] = await q.claim('w', 10);
      if (!j) break;
      order.push(j.payload.n);
      await q.complete(j);
    }
    expect(order).toEqual([2, 3, 4, 1]);
    await checkInvariants(q);
    expect(await q.depth()).toBe(0);
    expect(await groupRows(q)).toBe(0);
  });

  it('an ordinary deferral lets the next job of the group run at once', async () => {
    const clock = new ManualClock();
    const q = makeQueue(clock);
    await q.enqueueMany([1, 2, 3].map((n) => ({ groupKey: 'g', payload: { n } })));
    const [a] = await q.claim('w', 5);
    expect(await q.defer(a!, MIN, 'org_limit_hourly')).toBe('pending');
    const [b] = await q.claim('w', 5);
    expect(b!.payload.n).toBe(2);
    expect(await q.pausedUntil('g')).toBeNull();
    // scope 'job' spelled out is the same thing.
    expect(await q.apply(b!, { type: 'defer', delayMs: MIN, reason: 'circuit_open', scope: 'job' })).toBe('pending');
    const [c] = await q.claim('w', 5);
    expect(c!.payload.n).toBe(3);
    expect((await q.get(a!.id))!.history[0]).not.toHaveProperty('scope');
    expect((await q.get(a!.id))!.attempts).toBe(0);
    await expect(q.apply(c!, { type: 'defer', delayMs: 1, reason: 'x', scope: 'pool' as never })).rejects.toThrow(/defer scope/);
    await checkInvariants(q);
  });

  it('an enqueue into a paused group does not un-pause it, whatever its run_at or priority', async () => {
    const clock = new ManualClock();
    const q = makeQueue(clock);
    await q.enqueue({ groupKey: 'g', payload: { n: 1 } });
    const [a] = await q.claim('w', 5);
    await q.defer(a!, 10 * MIN, 'domain_backoff', { scope: 'group' });
    await q.enqueue({ groupKey: 'g', payload: { n: 2 } });
    await q.enqueue({ groupKey: 'g', payload: { n: 3 }, runAt: clock.now() - HOUR, priority: -5 });
    await q.enqueueMany([
      { groupKey: 'g', payload: { n: 4 } },
      { groupKey: 'h', payload: { n: 5 } },
    ]);
    await checkInvariants(q);
    expect(await q.pausedUntil('g')).toBe(clock.now() + 10 * MIN);
    const h = await q.claim('w', 10);
    expect(ns(h)).toEqual([5]);
    await q.complete(h[0]!);
    clock.advance(10 * MIN - 1);
    expect(await q.claim('w', 10)).toEqual([]);
    clock.advance(1);
    const order: number[] = [];
    for (;;) {
      const [j] = await q.claim('w', 10);
      if (!j) break;
      order.push(j.payload.n);
      await q.complete(j);
    }
    expect(order).toEqual([3, 2, 4, 1]);
    await checkInvariants(q);
  });

  it('a pause outlives the jobs of its group: after a cancel the next enqueue still waits; the empty row goes once it passed', async () => {
    const clock = new ManualClock();
    const q = makeQueue(clock);
    const ids = await q.enqueueMany([1, 2].map((n) => ({ groupKey: 'g', payload: { n }, orgId: 'org-a' })));
    const [a] = await q.claim('w', 5);
    await q.defer(a!, 5 * MIN, 'smtp_intel_blocking', { scope: 'group' });
    expect(await q.cancelByOrg('org-a')).toBe(2);
    expect(await q.depth()).toBe(0);
    expect(await q.pausedUntil('g')).toBe(clock.now() + 5 * MIN);
    await checkInvariants(q);
    const later = await q.enqueue({ groupKey: 'g', payload: { n: 3 } });
    expect(await q.claim('w', 5)).toEqual([]);
    clock.advance(5 * MIN);
    const [c] = await q.claim('w', 5);
    expect(c!.id).toBe(later.id);
    await q.complete(c!);
    expect(ids.map(() => 'cancelled')).toEqual(await Promise.all(ids.map(async (id) => (await q.get(id))!.state)));

    // An idle group can be paused ahead of its jobs; the empty row is deleted by a claim once the pause passed.
    await q.pauseGroup('idle', clock.now() + MIN);
    expect(await q.pausedUntil('idle')).toBe(clock.now() + MIN);
    await checkInvariants(q);
    expect(await q.claim('w', 5)).toEqual([]);
    clock.advance(MIN);
    expect(await q.claim('w', 5)).toEqual([]);
    expect(await groupRows(q)).toBe(0);
  });

  it('pauseGroup / resumeGroup: hold a group with a running job, shorten a pause, survive lease expiry, resume', async () => {
    const clock = new ManualClock();
    const q = makeQueue(clock, { timeoutMs: 2 * MIN });
    await q.enqueueMany([
      ...[1, 2, 3].map((n) => ({ groupKey: 'g', payload: { n } })),
      { groupKey: 'h', payload: { n: 4 } },
    ]);
    const first = await q.claim('w', 10);
    expect(ns(first).sort()).toEqual([1, 4]);
    await q.pauseGroup('g', clock.now() + HOUR); // job 1 is running: it runs on
    expect(await q.complete(first.find((j) => j.payload.n === 1)!)).toBe('completed');
    await q.complete(first.find((j) => j.payload.n === 4)!);
    expect(await q.claim('w', 10)).toEqual([]);
    expect(await q.stats()).toMatchObject({ pending: 0, delayed: 2, active: 0 });
    await checkInvariants(q);

    // Shortened to one minute (an explicit pause replaces the one in place).
    await q.pauseGroup('g', clock.now() + MIN);
    await checkInvariants(q);
    expect(await q.claim('w', 10)).toEqual([]);
    clock.advance(MIN);
    const [two] = await q.claim('w', 10);
    expect(two!.payload.n).toBe(2);

    // Paused while job 2 runs, whose worker dies: the lease expires, the job waits for the pause.
    await q.pauseGroup('g', clock.now() + HOUR);
    clock.advance(2 * MIN + 1);
    expect((await q.maintain()).expired).toBe(1);
    expect((await q.get(two!.id))!.state).toBe('pending');
    expect(await q.claim('w', 10)).toEqual([]);
    await checkInvariants(q);

    await q.resumeGroup('g');
    expect(await q.pausedUntil('g')).toBeNull();
    await checkInvariants(q);
    const [again] = await q.claim('w', 10);
    expect(again!.id).toBe(two!.id); // kept its place
    expect(again!.attempts).toBe(2);
    await q.complete(again!);

    // A time not in the future resumes; resuming an unknown group is a no-op.
    await q.pauseGroup('g', clock.now() + HOUR);
    await q.pauseGroup('g', clock.now());
    expect(ns(await q.claim('w', 10))).toEqual([3]);
    await q.resumeGroup('nothing-here');
    await expect(q.pauseGroup('', clock.now())).rejects.toThrow(/groupKey/);
    await expect(q.pauseGroup('g', Number.NaN)).rejects.toThrow(/untilMs/);
    await checkInvariants(q);
  });

  it('a Worker claims a paused group once per pause window, while job-scoped deferrals cycle through every job', async () => {
    const clock = new ManualClock();
    const q = makeQueue(clock);
    const N = 20;
    await q.enqueueMany([
      ...Array.from({ length: N }, (_, i) => ({ groupKey: 'pool:down.example', payload: { n: i } })),
      ...Array.from({ length: N }, (_, i) => ({ groupKey: 'pool:limited.example', payload: { n: 100 + i } })),
      ...Array.from({ length: 5 }, (_, i) => ({ groupKey: `pool:up${i}.example`, payload: { n: 200 + i } })),
    ]);
    const runs = new Map<string, number>();
    const limitedSeen = new Set<number>();
    const worker = new Worker<{ n: number }>({
      queue: q,
      concurrency: 4,
      pollMs: 10,
      maintainMs: 0,
      handler: async (job) => {
        runs.set(job.groupKey, (runs.get(job.groupKey) ?? 0) + 1);
        if (job.groupKey === 'pool:down.example') return { type: 'defer', delayMs: MIN, reason: 'down', scope: 'group' };
        if (job.groupKey === 'pool:limited.example') {
          limitedSeen.add(job.payload.n);
          return { type: 'defer', delayMs: MIN, reason: 'own limit' };
        }
        return { type: 'complete' };
      },
    });
    await worker.start();
    try {
      // The job-scoped group cycles through all its jobs; by then the paused group was claimed once.
      await waitUntil(() => limitedSeen.size === N, 60_000, 'every job-scoped deferral');
      await waitUntil(async () => (await q.stats()).completed === 5, 60_000, 'the healthy groups');
      expect(runs.get('pool:down.example')).toBe(1);
      clock.advance(MIN);
      await waitUntil(() => runs.get('pool:down.example') === 2, 60_000, 'the next pause window');
      await waitUntil(() => runs.get('pool:limited.example') === 2 * N, 60_000, 'the second round of job-scoped deferrals');
      expect(runs.get('pool:down.example')).toBe(2);
    } finally {
      await worker.stop();
    }
    expect(await q.stats()).toMatchObject({ pending: 0, delayed: 2 * N, active: 0, completed: 5 });
    await checkInvariants(q);
  });

  it('a resumed group is picked up promptly by a worker polling once a minute (NOTIFY)', async () => {
    const clock = new ManualClock();
    const q = makeQueue(clock);
    const ran: string[] = [];
    await q.pauseGroup('g', clock.now() + HOUR);
    const job = await q.enqueue({ groupKey: 'g', payload: { n: 1 } });
    const worker = new Worker({
      queue: q,
      concurrency: 2,
      pollMs: 60_000,
      maintainMs: 0,
      handler: async (j) => {
        ran.push(j.id);
        return { type: 'complete' };
      },
    });
    await worker.start();
    try {
      await sleep(100);
      expect(ran).toEqual([]);
      await q.resumeGroup('g');
      await waitUntil(() => ran.includes(job.id), 15_000, 'the resumed job');
    } finally {
      await worker.stop();
    }
  });

  it('concurrent workers never start a job of a group before the pause its last group deferral set', async () => {
    const clock = new ManualClock();
    const name = `pause${++queueSeq}`;
    const setup = makeQueue(clock, { name });
    const GROUPS = 6;
    const PER_GROUP = 15;
    const PAUSE = 20;
    await setup.enqueueMany(Array.from({ length: GROUPS * PER_GROUP }, (_, i) => ({ groupKey: `g${i % GROUPS}`, payload: { n: i } })));
    // Per group: the earliest clock time its next claim may have (handler time of the last group deferral + PAUSE).
    const notBefore = new Map<string, number>();
    const violations: string[] = [];
    const running = new Set<string>();
    let overlaps = 0;
    let groupDefers = 0;
    const handler = async (job: Job<{ n: number }>): Promise<JobOutcome> => {
      if (running.has(job.groupKey)) overlaps++;
      running.add(job.groupKey);
      const min = notBefore.get(job.groupKey) ?? 0;
      if (job.startedAt! < min) violations.push(`${job.groupKey}: job ${job.id} claimed at ${job.startedAt}, paused until >= ${min}`);
      await sleep(job.payload.n % 2);
      running.delete(job.groupKey);
      if (job.history.length === 0 && job.payload.n % 3 === 0) {
        groupDefers++;
        // The queue's pause starts at write-back time, which is not earlier than now.
        notBefore.set(job.groupKey, clock.now() + PAUSE);
        return { type: 'defer', delayMs: PAUSE, reason: 'destination down', scope: 'group' };
      }
      return { type: 'complete' };
    };
    const workers: Worker<{ n: number }>[] = [];
    for (let w = 0; w < 4; w++) {
      const pool = createPool(db.url, { max: 3 });
      extraPools.push(pool);
      const queue = makeQueue<{ n: number }>(clock, { name }, pool);
      workers.push(new Worker({ queue, handler, concurrency: 4, pollMs: 10, maintainMs: 0, workerId: `p${w}` }));
    }
    let done = false;
    const ticker = (async () => {
      while (!done) {
        clock.advance(3);
        await sleep(2);
      }
    })();
    try {
      await Promise.all(workers.map((w) => w.start()));
      await waitUntil(async () => (await setup.stats()).completed === GROUPS * PER_GROUP, 120_000, 'all jobs');
    } finally {
      done = true;
      await ticker;
      await Promise.all(workers.map((w) => w.stop()));
    }
    expect(violations).toEqual([]);
    expect(overlaps).toBe(0);
    expect(groupDefers).toBe(GROUPS * PER_GROUP / 3);
    const deferred = await db.pool.query(
      `SELECT count(*) AS n FROM queue_jobs, jsonb_array_elements(history) h WHERE queue = $1 AND h->>'scope' = 'group'`,
      [name],
    );
    expect(Number(deferred.rows[0].n)).toBe(GROUPS * PER_GROUP / 3);
    await checkInvariants(setup);
    expect(await groupRows(setup)).toBe(0);
  }, 180_000);
});

describe('a stored payload that does not parse', () => {
  it('fails that job alone at claim; the jobs claimed with it run (claim and finishAndClaim)', async () => {
    const clock = new ManualClock(Date.UTC(2026, 0, 1));
    const q = makeQueue(clock);
    const [good, bad, good2, bad2] = await q.enqueueMany([
      { groupKey: 'g1', payload: { n: 1 } },
      { groupKey: 'g2', payload: { n: 2 } },
      { groupKey: 'g3', payload: { n: 3 } },
      { groupKey: 'g4', payload: { n: 4 } },
    ]);
    // As a row written by a faulty producer (or an older version) could hold.
    await db.pool.query(`UPDATE queue_jobs SET payload = '\uFEFF{"n": 2}' WHERE id = $1`, [bad]);
    await db.pool.query(`UPDATE queue_jobs SET payload = '{"n":' WHERE id = $1`, [bad2]);

    const first = await q.claim('w1', 2);
    const second = await q.finishAndClaim(first.map((job) => ({ job, outcome: { type: 'complete' } })), 'w1', 10);
    const ran = [...first, ...second.jobs].map((j) => j.payload.n).sort();
    expect(ran).toEqual([1, 3]);
    for (const id of [bad!, bad2!]) {
      const row = (await db.pool.query(`SELECT state, last_error FROM queue_jobs WHERE id = $1`, [id])).rows[0];
      expect(row.state, id).toBe('failed');
      expect(row.last_error).toMatch(/stored payload is not valid JSON/);
    }
    for (const id of [good!, good2!]) expect((await db.pool.query(`SELECT state FROM queue_jobs WHERE id = $1`, [id])).rows[0].state).not.toBe('failed');
  });

  it('is reported by get, getByDedupeKey and pending (payload null, payloadError), not thrown', async () => {
    const clock = new ManualClock(Date.UTC(2026, 0, 1));
    const q = makeQueue(clock);
    const [ok, bad] = await q.enqueueMany([
      { groupKey: 'i1', payload: { n: 1 } },
      { groupKey: 'i2', payload: { n: 2 }, dedupeKey: 'inspect-bad' },
    ]);
    await db.pool.query(`UPDATE queue_jobs SET payload = '{"n":' WHERE id = $1`, [bad]);
    const got = await q.get(bad!);
    expect(got).toMatchObject({ id: bad, state: 'pending', payload: null, payloadError: expect.stringMatching(/^stored payload is not valid JSON: /) });
    expect((await q.getByDedupeKey('inspect-bad'))!.payloadError).toBe(got!.payloadError);
    const listed = await q.pending({ groupKeyPrefix: 'i' });
    expect(listed.map((j) => [j.id, j.payload, j.payloadError === undefined])).toEqual([
      [ok, { n: 1 }, true],
      [bad, null, false],
    ]);
  });
});

