/**
 * Team-inbox ingest benchmark (`npm run bench:inbox`): signed `inbound.received` events posted
 * over HTTP to the backend's `/webhooks/mta` (the feedback plugin alone, real PostgreSQL:
 * embedded in a temporary directory, or DATABASE_URL), BENCH_INBOX_EVENTS each, 8 in flight.
 *
 *   baseline  the parsed message only, as an MTA older than issue 18 posts it;
 *   raw       the same plus the message as received (BENCH_INBOX_KB, 64 KB by default, in
 *             base64), two attachment descriptions and the authentication results;
 *   linked    raw, and a reply whose In-Reply-To is one of 10,000 recorded Message-IDs
 *             (the email_sends lookup and the link written with the row).
 * Prints messages per second and each as a ratio to the baseline measured in the same run.
 */
import { createHmac, randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EventBus } from '../src/backend/events.js';
import { registerFeedback } from '../src/backend/feedback/index.js';
import { startEmbeddedPostgres, type EmbeddedStore } from '../src/runtime/embedded-postgres.js';
import { systemClock } from '../src/shared/clock.js';
import { loadConfig } from '../src/shared/config.js';
import { MemoryCoordination } from '../src/shared/coord/memory.js';
import { MTA_EVENT } from '../src/shared/contracts/mta.js';
import { migrate } from '../src/shared/db/migrate.js';
import { createPool, type Db } from '../src/shared/db/pool.js';
import { boundPort, createHttpApp } from '../src/shared/http.js';
import { silentLogger } from '../src/shared/log.js';

const EVENTS = Number(process.env.BENCH_INBOX_EVENTS ?? 2_000);
const KB = Number(process.env.BENCH_INBOX_KB ?? 64);
const IN_FLIGHT = 8;
const SECRET = 'bench-inbox-secret-0123456789abcdef';
const SENDS = 10_000;

const fmt = (n: number, digits = 0) => n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });

type Variant = 'baseline' | 'raw' | 'linked';

function event(i: number, variant: Variant, raw: string) {
  const data: Record<string, unknown> = {
    messageId: `<in-${variant}-${i}@readers.test>`,
    from: `Reader ${i} <reader${i}@readers.test>`,
    to: ['support@lettermill.test'],
    subject: `Question ${i}`,
    text: 'Hello, a question about my order.',
    html: null,
    inReplyTo: variant === 'linked' ? `<mid${i % SENDS}@news.test>` : null,
    references: [],
    receivedAt: new Date().toISOString(),
  };
  if (variant !== 'baseline') {
    Object.assign(data, {
      route: { domain: 'lettermill.test', address: 'support' },
      attachments: [
        { filename: 'invoice.pdf', contentType: 'application/pdf', size: 40_000, contentId: null },
        { filename: 'logo.png', contentType: 'image/png', size: 2_000, contentId: '<logo@x>' },
      ],
      authentication: { header: 'mx.lettermill.test; spf=pass; dkim=pass; dmarc=pass', spf: 'pass', dkim: 'pass', dmarc: 'pass', dmarcPolicy: 'none' },
      rawSize: (raw.length / 4) * 3,
      raw,
    });
  }
  return JSON.stringify({ id: `bench-${variant}-${i}-${randomBytes(4).toString('hex')}`, event: MTA_EVENT.inboundReceived, timestamp: new Date().toISOString(), data });
}

async function run(url: string, variant: Variant, raw: string): Promise<number> {
  let next = 0;
  const started = performance.now();
  const worker = async () => {
    while (next < EVENTS) {
      const body = event(next++, variant, raw);
      const ts = Math.floor(Date.now() / 1000);
      const sig = createHmac('sha256', SECRET).update(`${ts}.${body}`).digest('hex');
      const res = await fetch(`${url}/webhooks/mta`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-mta-timestamp': String(ts), 'x-mta-signature': sig }, body });
      if (res.status !== 200) throw new Error(`${variant}: ${res.status} ${await res.text()}`);
      await res.arrayBuffer();
    }
  };
  await Promise.all(Array.from({ length: IN_FLIGHT }, worker));
  return EVENTS / ((performance.now() - started) / 1000);
}

async function seedSends(db: Db): Promise<void> {
  await db.query(`INSERT INTO contacts (id, email, source, created_at, updated_at) SELECT 'ct_b' || i, 'b' || i || '@readers.test', 'api', now(), now() FROM generate_series(0, $1 - 1) i`, [SENDS]);
  await db.query(
    `INSERT INTO email_sends (id, type, contact_id, campaign_id, to_email, from_email, subject, message_id, provider, provider_message_id, status, created_at, updated_at)
     SELECT 'es_b' || i, 'campaign', 'ct_b' || i, 'cmp_bench', 'b' || i || '@readers.test', 'news@news.test', 'News', '<mid' || i || '@news.test>', 'mta', 'es_b' || i, 'accepted', now(), now()
       FROM generate_series(0, $1 - 1) i`,
    [SENDS],
  );
  await db.query('ANALYZE email_sends, contacts');
}

async function main(): Promise<void> {
  let url = process.env.DATABASE_URL;
  let embedded: EmbeddedStore | undefined;
  let tmp: string | undefined;
  const cleanup = async () => {
    await embedded?.stop().catch(() => {});
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  };
  try {
    if (!url) {
      tmp = mkdtempSync(join(tmpdir(), 'lm-bench-inbox-'));
      embedded = await startEmbeddedPostgres({ dataDir: tmp, password: 'bench', log: silentLogger, database: 'lm_bench' });
      url = embedded.url;
    }
    const db = createPool(url, { max: 10, applicationName: 'lm-bench-inbox' });
    await migrate(db);
    await seedSends(db);
    const config = loadConfig({ NODE_ENV: 'production', MTA_WEBHOOK_SECRET: SECRET });
    const app = createHttpApp({ log: silentLogger });
    const bus = new EventBus({ clock: systemClock, log: silentLogger });
    app.decorate('events', bus);
    registerFeedback(app, { config, log: silentLogger, db, coord: new MemoryCoordination({ clock: systemClock }), clock: systemClock }, bus);
    await app.listen({ host: '127.0.0.1', port: 0 });
    const base = `http://127.0.0.1:${boundPort(app)}`;
    const raw = randomBytes(KB * 768).toString('base64'); // KB of message, as base64
    await run(base, 'baseline', raw); // warm-up (JIT, pool, prepared statements)
    const results: [Variant, number][] = [];
    for (const v of ['baseline', 'raw', 'linked'] as const) results.push([v, await run(base, v, raw)]);
    const linked = await db.query(`SELECT count(*)::int AS n FROM feedback_inbox WHERE linked_by = 'in_reply_to'`);
    if (linked.rows[0].n !== EVENTS) throw new Error(`expected ${EVENTS} linked replies, found ${linked.rows[0].n}`);
    const baseRate = results[0]![1];
    process.stdout.write(`inbox ingest: ${fmt(EVENTS)} events per variant, ${IN_FLIGHT} in flight, raw ${KB} KB, ${fmt(SENDS)} recorded Message-IDs\n`);
    for (const [v, rate] of results) process.stdout.write(`  ${v.padEnd(9)} ${fmt(rate)} msg/s  (${fmt(rate / baseRate, 2)} × baseline)\n`);
    await app.close();
    await db.end();
  } finally {
    await cleanup();
  }
}

main().catch((err) => {
  process.stderr.write(`${err instanceof Error ? err.stack : String(err)}\n`);
  process.exit(1);
});
