/**
 * Pipeline benchmark (`npm run bench:pipeline`): jobs per second through the ten pre-send
 * phases alone — no queue, no delivery, no HTTP — i.e. the MTA's own per-job overhead.
 *
 * The MTA is built with createMta (real stores, caches loaded from an embedded PostgreSQL,
 * the metrics observer on) and a permissive policy so every job passes all ten phases (a
 * deferral would skip the later phases and flatter the figure). Jobs spread over
 * BENCH_ORGS organizations × BENCH_DOMAINS recipient domains, both pools, with
 * BENCH_SUPPRESSED addresses loaded in the suppression cache. Each run uses BENCH_CONCURRENCY
 * jobs in flight (like the worker), after a warm-up.
 *
 * Coordination: memory, then Redis (REDIS_URL, default redis://127.0.0.1:6379) under a
 * unique key prefix that is deleted afterwards; the Redis run is skipped when no server answers.
 * Baselines in the same run: the runner over ten no-op phases (runner cost), and for Redis ten
 * sequential GETs per job through the same adapter (round-trip floor).
 * The run also counts PostgreSQL queries issued while the phases run: it must be 0.
 *
 * Environment: BENCH_JOBS (200000), BENCH_REDIS_JOBS (30000), BENCH_CONCURRENCY (64),
 * BENCH_ORGS (100), BENCH_DOMAINS (1000), BENCH_SUPPRESSED (100000), REDIS_URL, DATABASE_URL.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { startEmbeddedPostgres, type EmbeddedStore } from '../src/runtime/embedded-postgres.js';
import { systemClock } from '../src/shared/clock.js';
import { loadConfig } from '../src/shared/config.js';
import { MemoryCoordination } from '../src/shared/coord/memory.js';
import { RedisCoordination } from '../src/shared/coord/redis.js';
import type { Coordination } from '../src/shared/coord/types.js';
import { migrate } from '../src/shared/db/migrate.js';
import { createPool, type Db } from '../src/shared/db/pool.js';
import { silentLogger } from '../src/shared/log.js';
import { redisAnswers } from '../test/harness/redis-probe.js';
import type { Services } from '../src/shared/services.js';
import { createMta, type MtaInstance } from '../src/mta/app.js';
import type { Deliverer } from '../src/mta/delivery/types.js';
import type { MtaJobPayload } from '../src/mta/job.js';
import { PHASES, newContext, runPipeline, type Phase, type PipelineDeps } from '../src/mta/pipeline/index.js';
import { DEFAULT_POLICY, type MtaPolicy } from '../src/mta/policy.js';

const JOBS = Number(process.env.BENCH_JOBS ?? 200_000);
const REDIS_JOBS = Number(process.env.BENCH_REDIS_JOBS ?? 30_000);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 64);
const ORGS = Number(process.env.BENCH_ORGS ?? 100);
const DOMAINS = Number(process.env.BENCH_DOMAINS ?? 1000);
const SUPPRESSED = Number(process.env.BENCH_SUPPRESSED ?? 100_000);
const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const POOLS = 'transactional:127.0.0.2@mta1.bench.test,127.0.0.5@mta4.bench.test;campaign:127.0.0.3@mta2.bench.test,127.0.0.4@mta3.bench.test';

const fmt = (n: number, d = 0) => n.toLocaleString('en-US', { maximumFractionDigits: d, minimumFractionDigits: d });

/** Every phase runs its full logic, but nothing defers: limits far above the benchmark volume. */
const POLICY: MtaPolicy = {
  ...DEFAULT_POLICY,
  ispProfiles: DEFAULT_POLICY.ispProfiles.map((p) => ({ ...p, defaultRate: 1e7, ceiling: 1e7, floor: 1 })),
  warming: { ...DEFAULT_POLICY.warming, schedule: [[1, 1e9]] },
  orgLimits: { ...DEFAULT_POLICY.orgLimits, daily: 1e9, hourly: 1e9 },
};

const noDelivery: Deliverer = {
  deliver: async () => {
    throw new Error('the pipeline benchmark never delivers');
  },
  close: async () => {},
};

function jobs(n: number): MtaJobPayload[] {
  const out: MtaJobPayload[] = [];
  for (let i = 0; i < n; i++) {
    const domain = i % 10 === 0 ? ['gmail.com', 'outlook.com', 'yahoo.com', 'icloud.com'][i % 4]! : `d${i % DOMAINS}.bench.example`;
    const recipient = `user${i}@${domain}`;
    out.push({
      messageId: `bench-${i}`,
      to: recipient,
      from: 'News <news@sender.bench.example>',
      subject: 'Weekly news',
      html: '<html><body><p>Hello there,</p><p>Read <a href="https://sender.bench.example/a?x=1">this</a> and <a href="https://cdn.bench.example/b">that</a>.</p></body></html>',
      text: 'Hello there, read https://sender.bench.example/a',
      ipPool: i % 3 === 0 ? 'transactional' : 'campaign',
      organizationId: `org-${i % ORGS}`,
      dkimDomain: 'sender.bench.example',
      engagementScore: i % 100,
      recipient,
      domain,
      band: 'default',
      acceptedAt: 0,
    });
  }
  return out;
}

/** Runs every job through `phases` with CONCURRENCY in flight; returns jobs/s and outcome counts. */
async function drive(deps: PipelineDeps, list: MtaJobPayload[], phases: readonly Phase[], observe?: Parameters<typeof runPipeline>[2]) {
  const outcomes: Record<string, number> = {};
  let next = 0;
  const start = performance.now();
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next < list.length) {
        const i = next++;
        const r = await runPipeline(newContext(deps, `j${i}`, list[i]!), phases, observe);
        const k = r.type === 'continue' ? 'continue' : `${r.type}:${r.phase}:${r.reason}`;
        outcomes[k] = (outcomes[k] ?? 0) + 1;
      }
    }),
  );
  return { perSec: list.length / ((performance.now() - start) / 1000), outcomes };
}

const noop: Phase[] = PHASES.map((p) => ({ name: p.name, needs: p.needs, produces: p.produces, run: () => ({ type: 'continue' as const }) }));

async function build(db: Db, coord: Coordination): Promise<MtaInstance> {
  const config = loadConfig({ NODE_ENV: 'production', MTA_API_KEY: 'bench-master-key-0123456789', MTA_POOLS: POOLS, CONTENT_URL_BLOCKLIST: 'blocked.bench.example,evil.example', LOG_LEVEL: 'silent' });
  const s: Services = { config, log: silentLogger, db, coord, clock: systemClock };
  return createMta(s, { policy: POLICY, deliverer: noDelivery });
}

function countQueries(db: Db): { count: () => number } {
  let n = 0;
  const orig = db.query.bind(db);
  (db as { query: unknown }).query = (...args: unknown[]) => {
    n++;
    return (orig as (...a: unknown[]) => unknown)(...args);
  };
  return { count: () => n };
}

async function main(): Promise<void> {
  let url = process.env.DATABASE_URL;
  let embedded: EmbeddedStore | undefined;
  let tmp: string | undefined;
  const lines: string[] = [];
  const print = (s: string) => {
    lines.push(s);
    console.log(s);
  };
  try {
    if (!url) {
      tmp = mkdtempSync(join(tmpdir(), 'lm-bench-pipeline-'));
      embedded = await startEmbeddedPostgres({ dataDir: tmp, password: 'bench', log: silentLogger, database: 'lm_bench' });
      url = embedded.url;
    }
    const db = createPool(url, { max: 10, applicationName: 'lm-bench-pipeline' });
    await migrate(db);
    const list = jobs(JOBS);

    // ---- memory coordination
    const mem = new MemoryCoordination({ clock: systemClock });
    const mta = await build(db, mem);
    const stores = mta.context.stores;
    for (let i = 0; i < SUPPRESSED; i += 10_000) {
      await stores.suppression.add(Array.from({ length: Math.min(10_000, SUPPRESSED - i) }, (_, k) => `gone${i + k}@bench.example`), 'hard_bounce');
    }
    print(`pipeline benchmark — node ${process.version}, ${cpus().length} cores, load ${loadavg().map((l) => l.toFixed(1)).join(' ')}`);
    print(`jobs ${fmt(JOBS)} (Redis ${fmt(REDIS_JOBS)}), concurrency ${CONCURRENCY}, ${ORGS} orgs, ${DOMAINS} domains, ${fmt(stores.suppression.size)} suppressed addresses cached`);

    const observe = mta.context.metrics.observePhase;
    await drive(mta.pipeline, list.slice(0, 20_000), noop);
    const base = await drive(mta.pipeline, list, noop);
    await drive(mta.pipeline, list.slice(0, 20_000), PHASES, observe); // warm-up
    const queries = countQueries(db);
    const before = queries.count();
    const memRun = await drive(mta.pipeline, list, PHASES, observe);
    const pgQueries = queries.count() - before;
    print('');
    print('memory coordination');
    print(`  baseline: runner over ten no-op phases   ${fmt(base.perSec)} jobs/s`);
    print(`  ten phases                               ${fmt(memRun.perSec)} jobs/s   (ratio to baseline ${fmt(memRun.perSec / base.perSec, 3)}; goal ≥ 20,000: ${memRun.perSec >= 20_000 ? 'met' : 'NOT met'})`);
    print(`  per job                                  ${fmt(1e6 / memRun.perSec, 1)} µs`);
    print(`  outcomes                                 ${JSON.stringify(memRun.outcomes)}`);
    print(`  PostgreSQL queries during the run        ${pgQueries}`);
    await mta.app.close();
    await mta.stop();

    // ---- Redis coordination
    if (!(await redisAnswers(REDIS_URL))) {
      print('');
      print(`Redis at ${REDIS_URL} does not answer: Redis run skipped`);
    } else {
      const prefix = `lmbench:${randomBytes(6).toString('hex')}:`;
      const redis = new RedisCoordination({ url: REDIS_URL, keyPrefix: prefix, clock: systemClock });
      try {
        const rmta = await build(db, redis);
        const rlist = list.slice(0, REDIS_JOBS);
        const ten: Phase[] = PHASES.map((p, i) => ({ name: p.name, needs: p.needs, produces: p.produces, run: async () => {
          await redis.getJson(`floor:${i}`);
          return { type: 'continue' as const };
        } }));
        await drive(rmta.pipeline, rlist.slice(0, 3_000), ten);
        const floor = await drive(rmta.pipeline, rlist, ten);
        await drive(rmta.pipeline, rlist.slice(0, 3_000), PHASES, rmta.context.metrics.observePhase);
        const rRun = await drive(rmta.pipeline, rlist, PHASES, rmta.context.metrics.observePhase);
        print('');
        print(`Redis coordination (${REDIS_URL}, prefix ${prefix})`);
        print(`  baseline: ten sequential GETs per job    ${fmt(floor.perSec)} jobs/s`);
        print(`  ten phases                               ${fmt(rRun.perSec)} jobs/s   (ratio to baseline ${fmt(rRun.perSec / floor.perSec, 3)})`);
        print(`  outcomes                                 ${JSON.stringify(rRun.outcomes)}`);
        await rmta.app.close();
        await rmta.stop();
      } finally {
        await redis.close();
        const r = new Redis(REDIS_URL);
        let cursor = '0';
        let deleted = 0;
        do {
          const [next, keys] = await r.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
          cursor = next;
          if (keys.length) deleted += await r.del(...keys);
        } while (cursor !== '0');
        r.disconnect();
        print(`  cleaned up ${fmt(deleted)} Redis keys`);
      }
    }
    await db.end();
  } finally {
    await embedded?.stop().catch(() => {});
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
