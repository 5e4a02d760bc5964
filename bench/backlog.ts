/**
 * Cost as the backlog grows (`npm run bench:backlog`, issue 26). For each depth of
 * BENCH_BACKLOG_DEPTHS (default 10,000, 100,000, 1,000,000), on one embedded PostgreSQL:
 *   1. the MTA queue is emptied and filled with `depth` queued 5 KB jobs by the queue's direct
 *      multi-row enqueue (Queue.enqueueMany, the payload POST /send stores, as the intake
 *      baseline of bench:mta does), while no MTA runs and the sink is stopped;
 *   2. disk per queued message: (pg_total_relation_size of queue_jobs + queue_groups) / count,
 *      after a CHECKPOINT, against the message's size;
 *   3. claim latency: the queue's claim (limit BENCH_CLAIM_LIMIT, 100) timed 20 times, each in
 *      a transaction rolled back, so the backlog is left as it was;
 *   4. the sink (Debian smtp-sink) starts, then the product as `npm start` runs it (role mta,
 *      bench/product.ts, configured beforehand through its API: DKIM key, org limits, ISP
 *      profiles, as bench:mta does); the drain rate is the messages accepted at the sink over
 *      the first BENCH_DRAIN_SECONDS (60) after the first one (or until the backlog is gone,
 *      if that comes first); the product's RSS is sampled
 *      every 500 ms from /proc (its peak is reported).
 * Prints each depth's figures and the ratio of each depth's drain rate to the first depth's,
 * then draws docs/backlog-chart.svg (drain rate and claim latency against depth).
 *
 * Environment: BENCH_BACKLOG_DEPTHS, BENCH_DRAIN_SECONDS, BENCH_CLAIM_LIMIT, BENCH_DOMAINS (50),
 * BENCH_ENQUEUE_BATCH (1000 jobs a statement), DATABASE_URL (default: an embedded PostgreSQL
 * in a temp dir), BENCH_SVG (0: do not write the chart), BENCH_EVENTS (down: the MTA's events go to
 * a port nobody listens on, a backend that is down, so the outbox keeps them; receiver: to a
 * loopback server answering 204, as bench:mta's role mta; default down).
 */
import { generateKeyPairSync } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { startEmbeddedPostgres, type EmbeddedStore } from '../src/runtime/embedded-postgres.js';
import { systemClock } from '../src/shared/clock.js';
import { migrate } from '../src/shared/db/migrate.js';
import { createPool, type Db } from '../src/shared/db/pool.js';
import { silentLogger } from '../src/shared/log.js';
import { createMtaQueue } from '../src/mta/queue.js';
import { findFreePort, startDnsServer, type DnsRecord, type DnsServer } from '../test/harness/dns.js';
import { startPostfixSmtpSink, type PostfixSmtpSink } from '../test/harness/smtp-sink-postfix.js';
import { benchJob, jsonClient } from './mta-e2e.js';
import { htmlBody } from './mta.js';
import { startProduct, type Product } from './product.js';

const DEPTHS = (process.env.BENCH_BACKLOG_DEPTHS ?? '10000,100000,1000000').split(',').map(Number).filter((n) => n > 0);
const DRAIN_S = Number(process.env.BENCH_DRAIN_SECONDS ?? 60);
const CLAIM_LIMIT = Number(process.env.BENCH_CLAIM_LIMIT ?? 100);
const DOMAINS = Number(process.env.BENCH_DOMAINS ?? 50);
const BATCH = Number(process.env.BENCH_ENQUEUE_BATCH ?? 1000);
const EVENTS = process.env.BENCH_EVENTS === 'receiver' ? 'receiver' : 'down';
const BYTES = 5 * 1024;
const SINK_HOST = '127.0.0.10';
const MTA_KEY = 'lm_mta_bench_0123456789abcdefghijklmnopqrstuvwxyz';
const OUT = join(import.meta.dirname, '..', 'docs', 'backlog-chart.svg');

const fmt = (n: number, digits = 0) => n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });

export interface DepthResult {
  depth: number;
  enqueueRate: number;
  diskBytesPerMessage: number;
  payloadBytes: number;
  claimMs: { median: number; p95: number };
  firstDeliveryS: number;
  drainRate: number;
  peakRssMb: number;
}

function rssMb(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : NaN;
}

function quantile(xs: number[], q: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))]!;
}

function productEnv(o: { databaseUrl: string; dataDir: string; dns: DnsServer; sinkPort: number; eventsUrl: string }): Record<string, string> {
  return {
    NODE_ENV: 'production',
    LOG_LEVEL: 'silent',
    HOST: '127.0.0.1',
    PORT: '0',
    MTA_PORT: '0',
    BASE_URL: 'https://bench.test',
    DATA_DIR: o.dataDir,
    DATABASE_URL: o.databaseUrl,
    MTA_API_KEY: MTA_KEY,
    ADMIN_TOKEN: 'bench-admin-token-0123456789abcdef',
    MTA_WEBHOOK_SECRET: 'bench-webhook-secret-0123456789',
    BOUNCE_VERP_KEY: 'bench-verp-key-0123456789abcdef',
    BOUNCE_HOST: 'bounces.sender.bench.test',
    DNS_SERVERS: o.dns.servers,
    MTA_DELIVERY_PORT: String(o.sinkPort),
    MTA_POOLS: 'transactional:127.0.0.2@mta1.bench.test;campaign:127.0.0.3@mta2.bench.test',
    MTA_WARMED_IPS: '127.0.0.2,127.0.0.3',
    EMAIL_PROVIDER: 'mta',
    // No DNSBL gate: the bench's sending addresses are loopback, never observed on a blocklist
    // zone (on by default in production since a9d6974, it kept every job deferred).
    DNSBL_MONITOR: 'false',
    // No URI blocklist lookups (on by default in production): the bench's DNS serves no such zone.
    CONTENT_URIBL: 'false',
    // Any free port for the inbound SMTP listener: 25 may be held by
    // another product on a shared machine.
    INBOUND_SMTP_PORT: '0',
    INBOUND_SMTP_HOST: '127.0.0.1',
    // BENCH_EVENTS: a port nobody listens on (the outbox keeps the events, as with a backend
    // that is down), or a receiver answering 204.
    MTA_WEBHOOK_URL: o.eventsUrl,
  };
}

async function enqueue(db: Db, depth: number): Promise<number> {
  const queue = createMtaQueue({ db, clock: systemClock });
  const bodies = Array.from({ length: 8 }, (_, i) => htmlBody(BYTES, i));
  const tag = `backlog-${depth}-${Date.now()}`;
  const input = (i: number) => {
    const job = benchJob(i, { tag, domains: DOMAINS, bodies });
    const domain = `d${i % DOMAINS}.bench.test`;
    const payload = { ...job, recipient: job.to, domain, engagementScore: null, band: 'default', acceptedAt: Date.now() };
    return { groupKey: `${job.ipPool}:${domain}`, payload, priority: 3, orgId: job.organizationId, dedupeKey: `${job.organizationId}:${job.messageId}` };
  };
  let next = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: 2 }, async () => {
      for (;;) {
        const from = next;
        if (from >= depth) return;
        next = Math.min(depth, from + BATCH);
        await queue.enqueueMany(Array.from({ length: next - from }, (_, k) => input(from + k)));
      }
    }),
  );
  return (depth * 1000) / (performance.now() - t0);
}

async function claimLatency(db: Db): Promise<{ median: number; p95: number }> {
  const times: number[] = [];
  for (let i = 0; i < 20; i++) {
    const client = await db.connect();
    try {
      await client.query('BEGIN');
      // The queue on this transaction's client: its claim is rolled back below.
      const queue = createMtaQueue({ db: client as unknown as Db, clock: systemClock });
      const t = performance.now();
      await queue.claim('bench-claim-probe', CLAIM_LIMIT);
      times.push(performance.now() - t);
    } finally {
      await client.query('ROLLBACK').catch(() => {});
      client.release();
    }
  }
  return { median: quantile(times, 0.5), p95: quantile(times, 0.95) };
}

async function main(): Promise<void> {
  const started = performance.now();
  let url = process.env.DATABASE_URL;
  let embedded: EmbeddedStore | undefined;
  const tmp = mkdtempSync(join(tmpdir(), 'lm-bench-backlog-'));
  let dns: DnsServer | undefined;
  let sink: PostfixSmtpSink | undefined;
  let product: Product | undefined;
  let db: Db | undefined;
  let receiver: Server | undefined;
  const cleanup = async () => {
    await product?.stop().catch(() => {});
    if (receiver) await new Promise((r) => receiver!.close(r));
    await sink?.stop().catch(() => {});
    await dns?.stop().catch(() => {});
    await db?.end().catch(() => {});
    await embedded?.stop().catch(() => {});
    rmSync(tmp, { recursive: true, force: true });
  };
  process.once('SIGINT', () => void cleanup().then(() => process.exit(130)));
  try {
    if (!url) {
      embedded = await startEmbeddedPostgres({ dataDir: tmp, password: 'bench', log: silentLogger, database: 'lm_backlog' });
      url = embedded.url;
    }
    db = createPool(url, { max: 4, applicationName: 'lm-bench-backlog' });
    await migrate(db);
    const zone: DnsRecord[] = [];
    for (let d = 0; d < DOMAINS; d++) zone.push({ name: `d${d}`, type: 'MX', value: `10 mx.d${d}.bench.test` }, { name: `mx.d${d}`, type: 'A', value: SINK_HOST });
    dns = await startDnsServer({ zones: { 'bench.test': zone } });
    const sinkPort = await findFreePort(SINK_HOST);
    let eventsUrl = 'http://127.0.0.1:9/webhooks/mta';
    if (EVENTS === 'receiver') {
      receiver = createServer((req, res) => req.resume().on('end', () => res.writeHead(204).end()));
      await new Promise<void>((r) => receiver!.listen(0, '127.0.0.1', r));
      eventsUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/webhooks/mta`;
    }
    const env = productEnv({ databaseUrl: url, dataDir: join(tmp, 'data'), dns, sinkPort, eventsUrl });

    console.log(`MTA backlog benchmark — ${new Date().toISOString()}`);
    console.log(`machine: ${cpus().length} × ${cpus()[0]?.model ?? 'cpu'}, node ${process.version}`);
    console.log(`load average at start: ${loadavg().map((l) => l.toFixed(2)).join(', ')} (1, 5, 15 min)`);
    console.log(`setup: ${DOMAINS} recipient domains × 2 pools (${DOMAINS * 2} queue groups), 5 KB HTML messages, DKIM RSA-2048, Debian smtp-sink; drain measured over ${DRAIN_S} s; events ${EVENTS === 'down' ? 'to a closed port (a backend that is down)' : 'to a 204 receiver'}`);

    // Configure once through the API (stored in PostgreSQL), with an empty queue.
    product = await startProduct({ role: 'mta', env });
    const client = jsonClient(product.mtaUrl!, MTA_KEY, 4);
    const rsaPem = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
    await client.call('POST', '/dkim', { domain: 'sender.bench.test', selector: 'bench1', privateKey: rsaPem });
    await client.call('POST', '/org-limits', { organizationId: 'org-bench', daily: 100_000_000, hourly: 100_000_000 });
    for (let d = 0; d < DOMAINS; d++) {
      await client.call('PUT', `/isp-profiles/d${d}.bench.test`, { defaultRate: 1_000_000, ceiling: 1_000_000, floor: 1, backoffFactor: 0.5, recoveryFactor: 1.1 });
    }
    client.close();
    await product.stop();
    product = undefined;

    const results: DepthResult[] = [];
    for (const depth of DEPTHS) {
      await db.query('TRUNCATE queue_jobs, queue_groups');
      const enqueueRate = await enqueue(db, depth);
      await db.query('CHECKPOINT');
      const size = await db.query<{ bytes: string; n: string; payload: string }>(
        "SELECT pg_total_relation_size('queue_jobs') + pg_total_relation_size('queue_groups') AS bytes, (SELECT count(*) FROM queue_jobs) AS n, (SELECT avg(octet_length(payload)) FROM (SELECT payload FROM queue_jobs LIMIT 1000) s) AS payload",
      );
      const diskBytesPerMessage = Number(size.rows[0]!.bytes) / Number(size.rows[0]!.n);
      const payloadBytes = Number(size.rows[0]!.payload);
      const claimMs = await claimLatency(db);

      sink = await startPostfixSmtpSink({ host: SINK_HOST, port: sinkPort, countOnly: true, maxConnections: 2048 });
      const t0 = performance.now();
      product = await startProduct({ role: 'mta', env });
      let peakRssMb = rssMb(product.pid);
      const sampler = setInterval(() => {
        if (product) peakRssMb = Math.max(peakRssMb, rssMb(product.pid));
      }, 500);
      const deadline = Date.now() + 300_000;
      while (sink.count() === 0) {
        if (Date.now() > deadline) throw new Error('backlog: no message reached the sink in 5 minutes');
        await new Promise((r) => setTimeout(r, 10));
      }
      const firstDeliveryS = (performance.now() - t0) / 1000;
      // Over the first DRAIN_S seconds, or until the backlog is gone if that comes first.
      const c0 = sink.count();
      const m0 = performance.now();
      while (performance.now() - m0 < DRAIN_S * 1000 && sink.count() < depth) await new Promise((r) => setTimeout(r, 50));
      const drainS = (performance.now() - m0) / 1000;
      const drained = sink.count() - c0;
      const drainRate = drained / drainS;
      clearInterval(sampler);
      await product.stop();
      product = undefined;
      await sink.stop();
      sink = undefined;
      const r: DepthResult = { depth, enqueueRate, diskBytesPerMessage, payloadBytes, claimMs, firstDeliveryS, drainRate, peakRssMb };
      results.push(r);
      const base = results[0]!;
      console.log(
        `depth ${fmt(depth)}: enqueue ${fmt(enqueueRate)} jobs/s | disk ${fmt(diskBytesPerMessage)} B per queued message (×${fmt(diskBytesPerMessage / BYTES, 2)} of 5 KB; stored payload ${fmt(payloadBytes)} B of JSON) | ` +
          `claim of ${CLAIM_LIMIT}: median ${fmt(claimMs.median, 1)} ms, p95 ${fmt(claimMs.p95, 1)} ms | first delivery ${fmt(firstDeliveryS, 1)} s after start | ` +
          `drain ${fmt(drainRate)} msg/s over ${fmt(drainS, 1)} s, ${fmt(drained)} messages (×${fmt(drainRate / base.drainRate, 2)} of depth ${fmt(base.depth)}) | peak RSS ${fmt(peakRssMb)} MB | load ${loadavg()[0]!.toFixed(2)}`,
      );
    }
    const first = results[0]!;
    const last = results[results.length - 1]!;
    console.log(
      `goals: drain at ${fmt(last.depth)} ×${fmt(last.drainRate / first.drainRate, 2)} of ${fmt(first.depth)} (≥ 0.8: ${last.drainRate / first.drainRate >= 0.8 ? 'met' : 'NOT met'}); ` +
        `peak RSS ${fmt(Math.max(...results.map((r) => r.peakRssMb)))} MB (≤ 512: ${results.every((r) => r.peakRssMb <= 512) ? 'met' : 'NOT met'}); ` +
        `disk ≤ 2.5× 5 KB: ${results.every((r) => r.diskBytesPerMessage <= 2.5 * BYTES) ? 'met' : 'NOT met'}`,
    );
    if (process.env.BENCH_SVG !== '0') {
      writeFileSync(OUT, chart(results, new Date().toISOString().slice(0, 10)));
      console.log(`chart: ${OUT}`);
    }
    console.log(`load average at end: ${loadavg().map((l) => l.toFixed(2)).join(', ')}; total ${fmt((performance.now() - started) / 1000, 1)} s`);
  } finally {
    await cleanup();
  }
}

/** The SVG by hand, as bench/warming.ts draws its chart: two polylines on a log depth axis; `day` is the run's date, for the title. */
export function chart(results: DepthResult[], day: string): string {
  const W = 640;
  const H = 320;
  const L = 70;
  const R = 70;
  const T = 40;
  const B = 50;
  const xs = results.map((r) => Math.log10(r.depth));
  const x0 = Math.floor(Math.min(...xs));
  const x1 = Math.max(x0 + 1, Math.ceil(Math.max(...xs)));
  const X = (d: number) => L + ((Math.log10(d) - x0) / (x1 - x0)) * (W - L - R);
  const maxRate = Math.max(...results.map((r) => r.drainRate)) * 1.2 || 1;
  const maxClaim = Math.max(...results.map((r) => r.claimMs.median)) * 1.2 || 1;
  const Y = (v: number, max: number) => H - B - (v / max) * (H - T - B);
  const parts: string[] = [
    `<rect width="${W}" height="${H}" fill="white"/>`,
    `<text x="${W / 2}" y="22" text-anchor="middle" font-family="sans-serif" font-size="14">Drain rate and claim latency against queued 5 KB messages (${day})</text>`,
    `<line x1="${L}" y1="${H - B}" x2="${W - R}" y2="${H - B}" stroke="black"/>`,
    `<line x1="${L}" y1="${T}" x2="${L}" y2="${H - B}" stroke="black"/>`,
    `<line x1="${W - R}" y1="${T}" x2="${W - R}" y2="${H - B}" stroke="black"/>`,
  ];
  for (let e = x0; e <= x1; e++) {
    const x = X(10 ** e);
    parts.push(`<line x1="${x}" y1="${H - B}" x2="${x}" y2="${H - B + 5}" stroke="black"/>`, `<text x="${x}" y="${H - B + 20}" text-anchor="middle" font-family="sans-serif" font-size="11">${fmt(10 ** e)}</text>`);
  }
  for (let k = 0; k <= 4; k++) {
    const v = (maxRate * k) / 4;
    const c = (maxClaim * k) / 4;
    const y = Y(v, maxRate);
    parts.push(
      `<text x="${L - 6}" y="${y + 4}" text-anchor="end" font-family="sans-serif" font-size="11" fill="#1f5fa8">${fmt(v)}</text>`,
      `<text x="${W - R + 6}" y="${y + 4}" font-family="sans-serif" font-size="11" fill="#b5471b">${fmt(c, 1)}</text>`,
    );
  }
  parts.push(
    `<text x="${W / 2}" y="${H - 12}" text-anchor="middle" font-family="sans-serif" font-size="12">queued messages at the start (log scale)</text>`,
    `<text x="14" y="${H / 2}" transform="rotate(-90 14 ${H / 2})" text-anchor="middle" font-family="sans-serif" font-size="12" fill="#1f5fa8">drain, msg/s (first ${DRAIN_S} s)</text>`,
    `<text x="${W - 14}" y="${H / 2}" transform="rotate(90 ${W - 14} ${H / 2})" text-anchor="middle" font-family="sans-serif" font-size="12" fill="#b5471b">claim latency, ms (median)</text>`,
  );
  const line = (pts: [number, number][], color: string) =>
    `<polyline fill="none" stroke="${color}" stroke-width="2" points="${pts.map(([x, y]) => `${x.toFixed(1)},${y.toFixed(1)}`).join(' ')}"/>` +
    pts.map(([x, y]) => `<circle cx="${x.toFixed(1)}" cy="${y.toFixed(1)}" r="3" fill="${color}"/>`).join('');
  parts.push(line(results.map((r) => [X(r.depth), Y(r.drainRate, maxRate)]), '#1f5fa8'), line(results.map((r) => [X(r.depth), Y(r.claimMs.median, maxClaim)]), '#b5471b'));
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}">\n${parts.join('\n')}\n</svg>\n`;
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
