/**
 * Outbound webhook benchmark (`npm run bench:webhooks`). Embedded PostgreSQL in a temporary
 * directory (or DATABASE_URL), three receivers on 127.0.0.1 answering 204 at once.
 *
 *   baseline  raw node http POSTs (keep-alive, signed bodies of the same size) to the same
 *             receivers, with as many in flight as the webhook worker may have for three
 *             endpoints (3 × lanesPerEndpoint), i.e. the cost of HTTP alone;
 *   burst     BENCH_EVENTS (10,000) email.sent events emitted at once through the EventBus,
 *             fanned out to 3 endpoints: durable write, queue, signed POST, attempt log;
 *   paced     BENCH_PACED_RATE events/s for BENCH_PACED_SECONDS: emit-to-delivery latency
 *             when there is no backlog.
 * Latency is emit() call → request received by the receiver.
 */
import http from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { EventBus } from '../src/backend/events.js';
import type { EmailSentData } from '../src/backend/webhooks/catalog.js';
import { WEBHOOK_POLICY } from '../src/backend/webhooks/policy.js';
import { buildWebhookRequest } from '../src/backend/webhooks/signing.js';
import { WebhookService } from '../src/backend/webhooks/service.js';
import { startEmbeddedPostgres, type EmbeddedStore } from '../src/runtime/embedded-postgres.js';
import { systemClock } from '../src/shared/clock.js';
import { loadConfig } from '../src/shared/config.js';
import { createPool, type Db } from '../src/shared/db/pool.js';
import { migrate } from '../src/shared/db/migrate.js';
import { silentLogger } from '../src/shared/log.js';

const EVENTS = Number(process.env.BENCH_EVENTS ?? 10_000);
const ENDPOINTS = 3;
const PACED_RATE = Number(process.env.BENCH_PACED_RATE ?? 200);
const PACED_SECONDS = Number(process.env.BENCH_PACED_SECONDS ?? 5);

const fmt = (n: number, digits = 0) => n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });
const pct = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? NaN;

interface Receiver {
  url: string;
  received: number;
  onBody?: (body: Buffer, at: number) => void;
  close(): Promise<void>;
}

async function startReceiver(): Promise<Receiver> {
  const r: Receiver = { url: '', received: 0, close: async () => {} };
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const at = performance.now();
      r.received++;
      r.onBody?.(Buffer.concat(chunks), at);
      res.writeHead(204).end();
    });
  });
  server.keepAliveTimeout = 10_000;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  r.url = `http://127.0.0.1:${(server.address() as { port: number }).port}/hook`;
  r.close = () =>
    new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    });
  return r;
}

function sample(i: number): EmailSentData {
  return {
    emailId: `es_bench_${i}`,
    messageId: `<es_bench_${i}@mail.acme.test>`,
    to: `user${i}@example.com`,
    from: 'Acme <news@acme.test>',
    subject: 'March product update',
    contactId: `ct_bench_${i}`,
    type: 'campaign',
    campaignId: 'cmp_bench',
    sentAt: new Date().toISOString(),
  };
}

/** Raw HTTP: `total` signed POSTs spread over the receivers, `inFlight` at a time. */
async function baseline(receivers: Receiver[], total: number, inFlight: number): Promise<{ perSec: number; p95: number }> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: inFlight });
  const latencies: number[] = [];
  let next = 0;
  const start = performance.now();
  await Promise.all(
    Array.from({ length: inFlight }, async () => {
      for (;;) {
        const i = next++;
        if (i >= total) return;
        const target = new URL(receivers[i % receivers.length].url);
        const { body, headers } = buildWebhookRequest({ eventId: `evt_${i}`, event: 'email.sent', data: sample(i), webhookId: 'wh_bench', secret: 'whsec_bench', now: Date.now() });
        const t = performance.now();
        await new Promise<void>((resolve, reject) => {
          const req = http.request({ host: target.hostname, port: target.port, path: target.pathname, method: 'POST', agent, headers: { ...headers, 'Content-Length': String(Buffer.byteLength(body)) } }, (res) => {
            res.resume();
            res.on('end', () => resolve());
          });
          req.on('error', reject);
          req.end(body);
        });
        latencies.push(performance.now() - t);
      }
    }),
  );
  const secs = (performance.now() - start) / 1000;
  agent.destroy();
  latencies.sort((a, b) => a - b);
  return { perSec: total / secs, p95: pct(latencies, 95) };
}

async function reset(db: Db): Promise<void> {
  await db.query(`DELETE FROM webhook_events; DELETE FROM queue_jobs WHERE queue = 'webhooks'; DELETE FROM queue_groups WHERE queue = 'webhooks'`);
  await db.query('VACUUM ANALYZE webhook_deliveries, webhook_attempts, webhook_events, queue_jobs, queue_groups');
}

async function main(): Promise<void> {
  let url = process.env.DATABASE_URL;
  let embedded: EmbeddedStore | undefined;
  let tmp: string | undefined;
  const cleanup = async () => {
    await embedded?.stop().catch(() => {});
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  };
  process.once('SIGINT', () => void cleanup().then(() => process.exit(130)));
  const receivers: Receiver[] = [];
  try {
    if (!url) {
      tmp = mkdtempSync(join(tmpdir(), 'lm-bench-webhooks-'));
      embedded = await startEmbeddedPostgres({ dataDir: tmp, password: 'bench', log: silentLogger, database: 'lm_bench' });
      url = embedded.url;
    }
    const db = createPool(url, { max: 30, applicationName: 'lm-bench-webhooks' });
    await migrate(db);
    for (let i = 0; i < ENDPOINTS; i++) receivers.push(await startReceiver());

    const inFlight = ENDPOINTS * WEBHOOK_POLICY.lanesPerEndpoint;
    await baseline(receivers, 2_000, inFlight); // warm-up
    const base = await baseline(receivers, EVENTS * ENDPOINTS, inFlight);

    const config = loadConfig({ WEBHOOK_ALLOW_HOSTS: '127.0.0.1' });
    const service = new WebhookService({ config, db, log: silentLogger, clock: systemClock }, { sweepMs: 0 });
    const bus = new EventBus({ clock: systemClock, log: silentLogger });
    bus.subscribe(service.accept);
    await service.start();
    for (const r of receivers) await service.createWebhook({ url: r.url, events: ['email.sent'] });

    // Emit times by emailId; receivers compute emit → receipt.
    let emitted = new Map<string, number>();
    let latencies: number[] = [];
    let lastAt = 0;
    const marker = /"emailId":"(es_bench_\d+)"/;
    for (const r of receivers) {
      r.onBody = (body, at) => {
        const m = marker.exec(body.toString('utf8'));
        const t = m ? emitted.get(m[1]) : undefined;
        if (t !== undefined) latencies.push(at - t);
        lastAt = at;
      };
    }
    const waitAll = async (n: number) => {
      const deadline = Date.now() + 600_000;
      while (latencies.length < n) {
        if (Date.now() > deadline) throw new Error(`only ${latencies.length} of ${n} deliveries arrived`);
        await new Promise((r) => setTimeout(r, 20));
      }
    };

    // Warm-up through the whole path.
    for (let i = 0; i < 300; i++) {
      emitted.set(`es_bench_${i}`, performance.now());
      void bus.emit('email.sent', sample(i));
    }
    await waitAll(300 * ENDPOINTS);
    await reset(db);

    // Burst.
    emitted = new Map();
    latencies = [];
    const burstStart = performance.now();
    const settles: Promise<void>[] = [];
    for (let i = 0; i < EVENTS; i++) {
      emitted.set(`es_bench_${i}`, performance.now());
      settles.push(bus.emit('email.sent', sample(i)));
    }
    const emitCallMs = performance.now() - burstStart;
    await Promise.all(settles);
    const durableMs = performance.now() - burstStart;
    await waitAll(EVENTS * ENDPOINTS);
    const burstSecs = (lastAt - burstStart) / 1000;
    const burstRate = (EVENTS * ENDPOINTS) / burstSecs;
    const burstLat = [...latencies].sort((a, b) => a - b);
    // Every delivery logged as succeeded with exactly one attempt.
    const logged = (
      await db.query<{ ok: number; attempts: number }>(
        `SELECT count(*) FILTER (WHERE status = 'succeeded')::int AS ok, (SELECT count(*)::int FROM webhook_attempts) AS attempts FROM webhook_deliveries`,
      )
    ).rows[0];
    await new Promise((r) => setTimeout(r, 300));
    await reset(db);

    // Paced.
    emitted = new Map();
    latencies = [];
    const pacedTotal = PACED_RATE * PACED_SECONDS;
    const pacedStart = performance.now();
    for (let i = 0; i < pacedTotal; i++) {
      const due = pacedStart + (i * 1000) / PACED_RATE;
      const wait = due - performance.now();
      if (wait > 1) await new Promise((r) => setTimeout(r, wait));
      emitted.set(`es_bench_${EVENTS + i}`, performance.now());
      void bus.emit('email.sent', sample(EVENTS + i));
    }
    await waitAll(pacedTotal * ENDPOINTS);
    const pacedLat = [...latencies].sort((a, b) => a - b);

    await service.stop();
    await db.end();

    const lines = [
      `bench:webhooks — ${EVENTS} events × ${ENDPOINTS} endpoints on loopback; ${cpus().length} CPUs, node ${process.version}`,
      `  baseline  raw http POST loop (keep-alive, ${inFlight} in flight): ${fmt(base.perSec)} req/s, p95 request ${fmt(base.p95, 2)} ms`,
      `  burst     ${fmt(burstRate)} deliveries/s = ${fmt(burstRate / base.perSec, 3)} × baseline; all ${fmt(EVENTS * ENDPOINTS)} in ${fmt(burstSecs, 2)} s`,
      `            emit(): ${fmt((emitCallMs * 1000) / EVENTS, 1)} µs per call; all ${fmt(EVENTS)} events durable after ${fmt(durableMs)} ms`,
      `            emit→delivery p50 ${fmt(pct(burstLat, 50))} ms, p95 ${fmt(pct(burstLat, 95))} ms, max ${fmt(burstLat[burstLat.length - 1])} ms (backlog of ${fmt(EVENTS * ENDPOINTS)})`,
      `            delivery log: ${fmt(logged.ok)} succeeded, ${fmt(logged.attempts)} attempts recorded`,
      `  paced     ${PACED_RATE} events/s × ${PACED_SECONDS} s (${fmt(PACED_RATE * ENDPOINTS)} deliveries/s): emit→delivery p50 ${fmt(pct(pacedLat, 50), 1)} ms, p95 ${fmt(pct(pacedLat, 95), 1)} ms = ${fmt(pct(pacedLat, 95) / base.p95, 1)} × baseline p95 request`,
    ];
    console.log(lines.join('\n'));
  } finally {
    for (const r of receivers) await r.close();
    await cleanup();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
