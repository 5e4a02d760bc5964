/**
 * Intake mode of `npm run bench:mta` (BENCH_MODE=intake|all): how fast `POST /send` stores
 * jobs, without delivery, against the database's own ceiling measured in the same run.
 *
 *   baseline: `Queue.enqueueMany` called directly with the same payloads, batches of
 *             BENCH_CLIENTS jobs, INTAKE_BATCH.maxInFlight statements in flight (what group
 *             commit can at best achieve with that many clients);
 *   intake:   BENCH_CLIENTS keep-alive clients posting to the MTA (the product as `npm start`
 *             runs it, bench/product.ts, role mta, no delivery engine) until N jobs were answered 202.
 *
 * Runs in its own database (created and dropped here), so its jobs never reach the e2e run.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { systemClock } from '../src/shared/clock.js';
import { createPool } from '../src/shared/db/pool.js';
import { migrate } from '../src/shared/db/migrate.js';
import { INTAKE_BATCH } from '../src/mta/intake.js';
import { createMtaQueue } from '../src/mta/queue.js';
import { productCpuMeter, scratchDatabase, startProduct, type CpuPerUnit } from './product.js';
import { benchJob, benchJobJson, CLIENTS, jsonClient, postAll } from './mta-e2e.js';

const MTA_KEY = 'lm_mta_bench_0123456789abcdefghijklmnopqrstuvwxyz';

export interface IntakeResult {
  baselineRate: number;
  rate: number;
  elapsedMs: number;
  /** CPU ms per request of the product's process, of PostgreSQL and of the generator (this process). */
  cpu: CpuPerUnit;
}

export async function runIntake(o: {
  databaseUrl: string;
  n: number;
  bytes: number;
  domains: number;
  html: (bytes: number, seed: number) => string;
  pgDir?: string;
}): Promise<IntakeResult> {
  const scratch = await scratchDatabase(o.databaseUrl, 'lm_bench_intake');
  const url = scratch.url;
  const dataDir = mkdtempSync(join(tmpdir(), 'lm-bench-intake-'));
  const db = createPool(url, { max: 10, applicationName: 'lm-bench-intake' });
  try {
    await migrate(db);
    const bodies = Array.from({ length: 8 }, (_, i) => o.html(o.bytes, i));

    // Baseline: the queue's multi-row enqueue on the same database, payloads as /send stores them.
    const queue = createMtaQueue({ db, clock: systemClock });
    const tag = `intake-base-${o.bytes}`;
    const input = (i: number) => {
      const job = benchJob(i, { tag, domains: o.domains, bodies });
      const domain = `d${i % o.domains}.bench.test`;
      const payload = { ...job, recipient: job.to, domain, engagementScore: null, band: 'default', acceptedAt: Date.now() };
      return { groupKey: `${job.ipPool}:${domain}`, payload, priority: 3, orgId: job.organizationId, dedupeKey: `${job.organizationId}:${job.messageId}` };
    };
    let next = 0;
    const t0 = performance.now();
    await Promise.all(
      Array.from({ length: INTAKE_BATCH.maxInFlight }, async () => {
        for (;;) {
          const from = next;
          if (from >= o.n) return;
          next = Math.min(o.n, from + CLIENTS);
          await queue.enqueueMany(Array.from({ length: next - from }, (_, k) => input(from + k)));
        }
      }),
    );
    const baselineRate = (o.n * 1000) / (performance.now() - t0);
    await db.query("DELETE FROM queue_jobs WHERE queue = 'mta'; DELETE FROM queue_groups WHERE queue = 'mta'");

    const product = await startProduct({
      role: 'mta',
      env: {
        NODE_ENV: 'test',
        LOG_LEVEL: 'silent',
        HOST: '127.0.0.1',
        MTA_PORT: '0',
        DATA_DIR: dataDir,
        DATABASE_URL: url,
        MTA_API_KEY: MTA_KEY,
        BOUNCE_VERP_KEY: 'bench-verp-key-0123456789abcdef',
        MTA_POOLS: 'transactional:127.0.0.2@mta1.bench.test;campaign:127.0.0.3@mta2.bench.test',
        // No DNS_SERVERS: under NODE_ENV=test no delivery engine runs, jobs stay queued.
      },
    });
    const client = jsonClient(product.mtaUrl!, MTA_KEY);
    try {
      const warm = `intake-warm-${o.bytes}`;
      await postAll(client, Math.min(1000, o.n), benchJobJson({ tag: warm, domains: o.domains, bodies }));
      const run = `intake-${o.bytes}`;
      const meter = await productCpuMeter(product, { pgDir: o.pgDir });
      const t1 = performance.now();
      await postAll(client, o.n, benchJobJson({ tag: run, domains: o.domains, bodies }));
      const elapsedMs = performance.now() - t1;
      return { baselineRate, rate: (o.n * 1000) / elapsedMs, elapsedMs, cpu: await meter.stop(o.n) };
    } finally {
      client.close();
      await product.stop();
    }
  } finally {
    await db.end().catch(() => {});
    await scratch.drop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}
