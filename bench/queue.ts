/**
 * Queue benchmark (`npm run bench:queue`). Starts an embedded PostgreSQL in a temporary
 * directory (or uses DATABASE_URL), migrates, then measures in one run:
 *   (a) bare `SELECT 1` round trips: one connection, and N in parallel;
 *   (b) enqueue rate with enqueueMany;
 *   (c) claim+complete rate through the real Worker (concurrency 50, no-op handler) over
 *       50 groups × 400 jobs.
 * Environment: DATABASE_URL, BENCH_GROUPS (50), BENCH_PER_GROUP (400), BENCH_CONCURRENCY (50),
 * BENCH_PARALLEL (8, connections for the parallel SELECT 1).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { startEmbeddedPostgres, type EmbeddedStore } from '../src/runtime/embedded-postgres.js';
import { createPool, type Db } from '../src/shared/db/pool.js';
import { migrate } from '../src/shared/db/migrate.js';
import { silentLogger } from '../src/shared/log.js';
import { randomString } from '../src/shared/crypto.js';
import { Queue } from '../src/shared/queue/queue.js';
import { Worker } from '../src/shared/queue/worker.js';
import type { EnqueueInput } from '../src/shared/queue/types.js';

const GROUPS = Number(process.env.BENCH_GROUPS ?? 50);
const PER_GROUP = Number(process.env.BENCH_PER_GROUP ?? 400);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 50);
const PARALLEL = Number(process.env.BENCH_PARALLEL ?? 8);
const SELECT1_MS = 2000;
const ENQUEUE_CHUNK = 1000;

const fmt = (n: number, digits = 0) => n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });

async function select1Loop(db: Db, connections: number, durationMs: number): Promise<number> {
  const clients = await Promise.all(Array.from({ length: connections }, () => db.connect()));
  try {
    for (const c of clients) await c.query('SELECT 1'); // warm up
    let count = 0;
    const start = performance.now();
    const deadline = start + durationMs;
    await Promise.all(
      clients.map(async (c) => {
        while (performance.now() < deadline) {
          await c.query('SELECT 1');
          count++;
        }
      }),
    );
    return count / ((performance.now() - start) / 1000);
  } finally {
    for (const c of clients) c.release();
  }
}

async function main(): Promise<void> {
  let url = process.env.DATABASE_URL;
  let embedded: EmbeddedStore | undefined;
  let tmp: string | undefined;
  const started = performance.now();
  const cleanup = async () => {
    await embedded?.stop().catch(() => {});
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  };
  process.once('SIGINT', () => void cleanup().then(() => process.exit(130)));

  try {
    if (!url) {
      tmp = mkdtempSync(join(tmpdir(), 'lm-bench-queue-'));
      embedded = await startEmbeddedPostgres({ dataDir: tmp, password: 'bench', log: silentLogger, database: 'lm_bench' });
      url = embedded.url;
    }
    const pool = createPool(url, { max: Math.max(PARALLEL, 10) + 2, applicationName: 'lm-bench-queue' });
    await migrate(pool);
    const setting = async (n: string) =>
      (await pool.query<{ v: string }>('SELECT current_setting($1) AS v', [n])).rows[0]!.v;
    const server = await setting('server_version');
    const fsync = await setting('fsync');
    const syncCommit = await setting('synchronous_commit');

    // (a) bare round trips
    const select1One = await select1Loop(pool, 1, SELECT1_MS);
    const select1Par = await select1Loop(pool, PARALLEL, SELECT1_MS);

    // (b) enqueue
    const name = `bench-${randomString(6)}`;
    const queue = new Queue<{ n: number }>({
      db: pool,
      options: {
        name,
        maxAttempts: 5,
        backoffMs: [30_000, 120_000, 480_000, 1_800_000, 7_200_000],
        timeoutMs: 120_000,
        retainCompleted: 1000,
        retainFailed: 5000,
      },
    });
    const total = GROUPS * PER_GROUP;
    const inputs: EnqueueInput<{ n: number }>[] = [];
    for (let i = 0; i < total; i++) {
      inputs.push({ groupKey: `pool-a:domain${i % GROUPS}.example`, payload: { n: i }, priority: 0 });
    }
    const enqStart = performance.now();
    for (let i = 0; i < total; i += ENQUEUE_CHUNK) await queue.enqueueMany(inputs.slice(i, i + ENQUEUE_CHUNK));
    const enqSec = (performance.now() - enqStart) / 1000;
    const depthBefore = await queue.depth();
    // No ANALYZE here on purpose: the queue's plans must not depend on statistics, and a
    // freshly bulk-loaded queue has none.

    // (c) claim + complete through the Worker
    const seen = new Uint8Array(total);
    let handled = 0;
    let duplicates = 0;
    const worker = new Worker<{ n: number }>({
      queue,
      concurrency: CONCURRENCY,
      pollMs: 200,
      handler: async (job) => {
        if (seen[job.payload.n]++) duplicates++;
        handled++;
        return { type: 'complete' };
      },
    });
    // Count the worker's round trips (each one writes back outcomes and claims in one call).
    const trips = { n: 0, ms: 0, finished: 0, claimed: 0 };
    const finishAndClaim = queue.finishAndClaim.bind(queue);
    queue.finishAndClaim = async (items, workerId, limit) => {
      const t = performance.now();
      const r = await finishAndClaim(items, workerId, limit);
      trips.n++;
      trips.ms += performance.now() - t;
      trips.finished += items.length;
      trips.claimed += r.jobs.length;
      return r;
    };
    const claim = queue.claim.bind(queue);
    queue.claim = async (workerId, limit) => {
      const t = performance.now();
      const jobs = await claim(workerId, limit);
      trips.n++;
      trips.ms += performance.now() - t;
      trips.claimed += jobs.length;
      return jobs;
    };
    const runStart = performance.now();
    await worker.start();
    while (handled < total || worker.active > 0) await new Promise((r) => setTimeout(r, 5));
    const runSec = (performance.now() - runStart) / 1000;
    await worker.stop({ drain: true });
    const depthAfter = await queue.depth();
    const stats = await queue.stats();
    const retention = await queue.maintain();
    const statsAfter = await queue.stats();

    const jobsPerSec = total / runSec;
    const lines = [
      '',
      '================ queue benchmark ================',
      `PostgreSQL ${server} (${embedded ? 'embedded' : 'DATABASE_URL'}), fsync=${fsync}, synchronous_commit=${syncCommit}; ${cpus().length} CPUs; node ${process.version}`,
      `SELECT 1, 1 connection           : ${fmt(select1One)} queries/s`,
      `SELECT 1, ${PARALLEL} connections         : ${fmt(select1Par)} queries/s`,
      `enqueueMany (${fmt(ENQUEUE_CHUNK)}/statement)   : ${fmt(total)} jobs in ${fmt(enqSec, 2)} s = ${fmt(total / enqSec)} jobs/s (depth ${fmt(depthBefore)})`,
      `claim+complete (Worker, concurrency ${CONCURRENCY}, ${GROUPS} groups x ${PER_GROUP}):`,
      `                                   ${fmt(total)} jobs in ${fmt(runSec, 2)} s = ${fmt(jobsPerSec)} jobs/s`,
      `  ratio to SELECT 1 rate, 1 conn : ${fmt(jobsPerSec / select1One, 3)} (jobs claimed+completed per bare round trip)`,
      `  ratio to SELECT 1 rate, ${PARALLEL} conns: ${fmt(jobsPerSec / select1Par, 3)}`,
      `  worker round trips             : ${fmt(trips.n)}, avg ${fmt(trips.ms / trips.n, 2)} ms, ${fmt(trips.finished / trips.n, 1)} finished + ${fmt(trips.claimed / trips.n, 1)} claimed per trip`,
      `  goal 3,000 jobs/s              : ${jobsPerSec >= 3000 ? 'MET' : 'NOT MET'}`,
      `checks: handled=${fmt(handled)} duplicates=${duplicates} depth after=${depthAfter} completed=${fmt(stats.completed)} failed=${stats.failed}`,
      `retention: deleted ${fmt(Math.max(retention.deleted, 0))}, completed kept ${fmt(statsAfter.completed)} (retainCompleted 1,000)`,
      `total bench time ${fmt((performance.now() - started) / 1000, 1)} s`,
      '=================================================',
    ];
    console.log(lines.join('\n'));

    if (!embedded) {
      await pool.query('DELETE FROM queue_jobs WHERE queue = $1', [name]);
      await pool.query('DELETE FROM queue_groups WHERE queue = $1', [name]);
    }
    await pool.end();
    if (duplicates > 0 || handled !== total || depthAfter !== 0) process.exitCode = 1;
  } finally {
    await cleanup();
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
