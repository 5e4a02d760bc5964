/**
 * Crash safety (issue 8): the MTA is killed with SIGKILL in the middle of a 10,000-message run
 * and restarted; every message must reach the sink at least once (duplicates are allowed: a
 * job is completed only after the remote accepted it, so a kill between the remote's 250 and
 * the queue's bookkeeping sends it again). Real processes, PostgreSQL, DNS and SMTP.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { generateKeyPairSync } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { systemClock } from '../../../src/shared/clock.js';
import { groupKeyOf, type MtaJobPayload } from '../../../src/mta/job.js';
import { createMtaQueue } from '../../../src/mta/queue.js';
import { parseVerpAddress } from '../../../src/mta/delivery/verp.js';
import { PgDkimKeyStore } from '../../../src/mta/stores/dkim.js';
import { createTestDatabase, type TestDatabase } from '../../harness/db.js';
import { startDnsServer, type DnsServer } from '../../harness/dns.js';
import { startSmtpSink, type SmtpSink } from '../../harness/smtp-sink.js';

// LM_CRASH_TOTAL shrinks the run when debugging; the acceptance figure is 10,000.
const TOTAL = Number(process.env.LM_CRASH_TOTAL ?? 10_000);
const DOMAINS = 20;
const VERP_KEY = 'crash-verp-key-0123456789abcdef';
const MTA_KEY = 'lm_mta_crash_0123456789abcdefghijklmnopqrstuvwxyz';
const FILLER = '<p>Lettermill crash test filler, the same words in every message.</p>'.repeat(160);

let db: TestDatabase;
let dns: DnsServer;
let sink: SmtpSink;
let child: ChildProcess | undefined;
// Both starts share it (the restart reuses the generated secrets); removed afterwards.
const dataDir = mkdtempSync(join(tmpdir(), 'lm-crash-test-'));

beforeAll(async () => {
  db = await createTestDatabase();
  sink = await startSmtpSink({ host: '127.0.0.10', port: 0 });
  const zone = [];
  for (let d = 0; d < DOMAINS; d++) zone.push({ name: `d${d}`, type: 'MX' as const, value: `10 mx.crash.test` });
  zone.push({ name: 'mx', type: 'A' as const, value: '127.0.0.10' });
  dns = await startDnsServer({ zones: { 'crash.test': zone } });
  const pem = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
  await new PgDkimKeyStore(db.pool, systemClock).upsert('sender.test', 'crash1', pem);
}, 60_000);

afterAll(async () => {
  child?.kill('SIGKILL');
  await Promise.all([sink?.close(), dns?.stop()]);
  await db?.drop();
  rmSync(dataDir, { recursive: true, force: true });
});

async function startMta(): Promise<{ proc: ChildProcess; url: string }> {
  const proc = fork(fileURLToPath(new URL('./crash-child.ts', import.meta.url)), [], {
    execArgv: ['--import', 'tsx'],
    // Not process.env: vitest adds variables (BASE_URL=/ among them) that are not ours.
    env: {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      NODE_ENV: 'test',
      LOG_LEVEL: 'silent',
      HOST: '127.0.0.1',
      MTA_PORT: '0',
      INBOUND_SMTP_PORT: '0',
      DATA_DIR: dataDir,
      DATABASE_URL: db.url,
      MTA_API_KEY: MTA_KEY,
      BOUNCE_VERP_KEY: VERP_KEY,
      BOUNCE_HOST: 'bounces.sender.test',
      DNS_SERVERS: dns.servers,
      MTA_DELIVERY_PORT: String(sink.port),
      MTA_POOLS: 'transactional:127.0.0.2@mta1.sender.test',
      MTA_WARMED_IPS: '127.0.0.2',
      EMAIL_PROVIDER: 'mta',
    },
    stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
  });
  const [msg] = (await Promise.race([once(proc, 'message'), once(proc, 'exit').then(() => { throw new Error('MTA child exited during start'); })])) as [{ mtaUrl: string }];
  return { proc, url: msg.mtaUrl };
}

/** Distinct sends (queue jobs, one per message) that reached the sink, read from the signed VERP return path (incrementally: checked on every sink event). */
const seen = new Set<string>();
let scanned = 0;
function delivered(): Set<string> {
  for (; scanned < sink.messages.length; scanned++) {
    const t = parseVerpAddress(sink.messages[scanned].mailFrom, { key: VERP_KEY, bounceHost: 'bounces.sender.test' });
    if (t) seen.add(t.id);
  }
  return seen;
}

it(
  'kill -9 in the middle of a 10,000-message run, then restart: every message reaches the sink at least once',
  async () => {
    let mta = await startMta();
    child = mta.proc;
    const api = (method: string, path: string, body: unknown) =>
      fetch(`${mta.url}${path}`, { method, headers: { authorization: `Bearer ${MTA_KEY}`, 'content-type': 'application/json' }, body: JSON.stringify(body) }).then(async (r) => {
        if (r.status >= 300) throw new Error(`${method} ${path}: ${r.status} ${await r.text()}`);
      });
    // Operator settings (durable, so they hold after the restart too).
    await api('POST', '/org-limits', { organizationId: 'org-crash', daily: 10_000_000, hourly: 10_000_000 });
    for (let d = 0; d < DOMAINS; d++) {
      await api('PUT', `/isp-profiles/d${d}.crash.test`, { defaultRate: 1_000_000, ceiling: 1_000_000, floor: 1, backoffFactor: 0.5, recoveryFactor: 1.1 });
    }

    // 10,000 jobs straight into the durable queue, as /send would leave them.
    const queue = createMtaQueue<MtaJobPayload>({ db: db.pool, clock: systemClock });
    const now = Date.now();
    for (let off = 0; off < TOTAL; off += 1000) {
      await queue.enqueueMany(
        Array.from({ length: Math.min(1000, TOTAL - off) }, (_, j) => {
          const i = off + j;
          const domain = `d${i % DOMAINS}.crash.test`;
          const payload: MtaJobPayload = {
            messageId: `crash-${i}`,
            to: `user${i}@${domain}`,
            from: 'Crash <news@sender.test>',
            subject: `Crash test ${i}`,
            // ~11 KB: over the codec's 8 KB, so every job is stored brotli-compressed (payload-codec.ts).
            html: `<p>message ${i}</p>${FILLER}`,
            ipPool: 'transactional',
            organizationId: 'org-crash',
            dkimDomain: 'sender.test',
            recipient: `user${i}@${domain}`,
            domain,
            band: 'default',
            acceptedAt: now,
          };
          return { groupKey: groupKeyOf('transactional', domain), payload, orgId: 'org-crash' };
        }),
      );
    }

    const compressed = await db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM queue_jobs WHERE queue = 'mta' AND get_byte(payload, 0) = 1");
    expect(compressed.rows[0]!.n).toBe(TOTAL);

    // Kill -9 once a part of the run has been delivered.
    await sink.waitUntil(() => sink.messages.length >= TOTAL / 4, 180_000, 'a quarter delivered before the kill');
    mta.proc.kill('SIGKILL');
    await once(mta.proc, 'exit');
    const beforeRestart = delivered().size;
    expect(beforeRestart).toBeGreaterThanOrEqual(TOTAL / 4);
    expect(beforeRestart).toBeLessThan(TOTAL);

    mta = await startMta();
    child = mta.proc;
    // Jobs that were in flight come back when their 2-minute lease passes (mta.md → Queue).
    await sink.waitUntil(() => delivered().size >= TOTAL, 420_000, 'every message delivered after the restart');
    // The token names the send; its provenance (written before the message left) names the message.
    const sent = await db.pool.query<{ send_id: string; message_id: string }>('SELECT send_id, message_id FROM mta_send_provenance');
    const messageOf = new Map(sent.rows.map((r) => [r.send_id, r.message_id]));
    const ids = new Set([...delivered()].map((id) => messageOf.get(id)));
    for (let i = 0; i < TOTAL; i++) expect(ids.has(`crash-${i}`)).toBe(true);
    expect(sink.messages.length).toBeGreaterThanOrEqual(TOTAL); // duplicates allowed, losses not
    // Bodies came back whole from the compressed rows (the filler is plain ASCII: no transfer encoding).
    for (const m of sink.messages.slice(0, 50).concat(sink.messages.slice(-50))) expect(m.data.toString('latin1').replace(/=\r?\n/g, '')).toContain(FILLER.slice(0, 200));
    mta.proc.kill('SIGTERM');
    await once(mta.proc, 'exit');
    child = undefined;
  },
  660_000,
);
