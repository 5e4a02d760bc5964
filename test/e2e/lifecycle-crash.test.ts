/**
 * The lifecycle survives kill -9 (issue 15): a campaign of 10,000 messages runs through the real
 * product — backend fan-out → MTA /send → pipeline → delivery to a real SMTP sink → outbox →
 * backend feedback → customer webhooks — while the MTA is killed with SIGKILL three times at
 * random moments and restarted. Once drained, the backend holds exactly one send per message,
 * each `delivered`, and the customer's receiver has exactly one `email.sent` and one
 * `email.delivered` event per message: no gap, no duplicate.
 *
 * Two deployments: role all (the kill takes the backend down too) and role mta beside a
 * separate backend process (only the MTA dies). The sink may see a message twice (a kill
 * between the remote's 250 and the record of it); the lifecycle may not. A receiver counts an
 * event by its id, as docs/webhooks.md tells customers to: a webhook POST repeated after a
 * crash carries the same id.
 *
 * Killed jobs come back when their 2-minute lease passes, so each scenario takes 6 – 8 minutes.
 * LM_LIFECYCLE_TOTAL shrinks the run when debugging; the acceptance figure is 10,000.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { systemClock } from '../../src/shared/clock.js';
import { PgDkimKeyStore } from '../../src/mta/stores/dkim.js';
import { freePort } from '../../src/runtime/embedded-postgres.js';
import { createTestDatabase, type TestDatabase } from '../harness/db.js';
import { startDnsServer, type DnsServer } from '../harness/dns.js';
import { startHttpReceiver, type HttpReceiver } from '../harness/http-receiver.js';
import { startSmtpSink, type SmtpSink } from '../harness/smtp-sink.js';

const TOTAL = Number(process.env.LM_LIFECYCLE_TOTAL ?? 10_000);
const KILLS = 3;
const DOMAINS = 20;
const ADMIN = 'lm_admin_lifecycle_0123456789abcdef';
const MTA_KEY = 'lm_mta_lifecycle_0123456789abcdefghijklmnop';
const SECRET = 'lifecycle-webhook-secret-0123456789';
const VERP_KEY = 'lifecycle-verp-key-0123456789abcdef';

let dns: DnsServer;
let sink: SmtpSink;
let receiver: HttpReceiver;
let dkimPem: string;
const children = new Set<ChildProcess>();
const dirs: string[] = [];

beforeAll(async () => {
  sink = await startSmtpSink({ host: '127.0.0.10', port: 0 });
  const zone = [];
  for (let d = 0; d < DOMAINS; d++) zone.push({ name: `d${d}`, type: 'MX' as const, value: '10 mx.life.test' });
  zone.push({ name: 'mx', type: 'A' as const, value: '127.0.0.10' });
  dns = await startDnsServer({ zones: { 'life.test': zone } });
  receiver = await startHttpReceiver();
  // Ed25519: signing is not what this test measures.
  dkimPem = generateKeyPairSync('ed25519').privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
}, 60_000);

afterAll(async () => {
  for (const c of children) c.kill('SIGKILL');
  await Promise.all([sink?.close(), dns?.stop(), receiver?.close()]);
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

type Role = 'all' | 'mta' | 'backend';
interface Proc {
  proc: ChildProcess;
  backendUrl: string | null;
  mtaUrl: string | null;
}

function baseEnv(db: TestDatabase, dataDir: string): Record<string, string> {
  return {
    PATH: process.env.PATH ?? '',
    HOME: process.env.HOME ?? '',
    NODE_ENV: 'test',
    LOG_LEVEL: 'silent',
    HOST: '127.0.0.1',
    DATA_DIR: dataDir,
    DATABASE_URL: db.url,
    ADMIN_TOKEN: ADMIN,
    MTA_API_KEY: MTA_KEY,
    MTA_WEBHOOK_SECRET: SECRET,
    BOUNCE_VERP_KEY: VERP_KEY,
    BOUNCE_HOST: 'bounces.sender.test',
    BASE_URL: 'http://127.0.0.1:9',
    EMAIL_PROVIDER: 'mta',
    WEBHOOK_ALLOW_HOSTS: '127.0.0.1',
    DNS_SERVERS: dns.servers,
    MTA_DELIVERY_PORT: String(sink.port),
    MTA_POOLS: 'transactional:127.0.0.2@mta1.sender.test;campaign:127.0.0.3@mta2.sender.test',
    MTA_WARMED_IPS: '127.0.0.2,127.0.0.3',
  };
}

async function start(role: Role, env: Record<string, string>): Promise<Proc> {
  const proc = fork(fileURLToPath(new URL('./role-child.ts', import.meta.url)), [role], {
    execArgv: ['--import', 'tsx'],
    env,
    stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
  });
  children.add(proc);
  proc.once('exit', () => children.delete(proc));
  const [msg] = (await Promise.race([
    once(proc, 'message'),
    once(proc, 'exit').then(([code]) => {
      throw new Error(`${role} exited during start (${code})`);
    }),
  ])) as [{ backendUrl: string | null; mtaUrl: string | null }];
  return { proc, ...msg };
}

async function kill(p: Proc): Promise<void> {
  p.proc.kill('SIGKILL');
  if (p.proc.exitCode === null && p.proc.signalCode === null) await once(p.proc, 'exit');
}

async function stop(p: Proc): Promise<void> {
  p.proc.kill('SIGTERM');
  if (p.proc.exitCode === null && p.proc.signalCode === null) await once(p.proc, 'exit');
}

async function call(base: string, method: string, path: string, body?: unknown, key = ADMIN): Promise<any> {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

/** The receiver's events for this run, by type: emailId → distinct event ids. */
function received(campaignId: string): { sent: Map<string, Set<string>>; delivered: Map<string, Set<string>>; posts: number } {
  const out = { sent: new Map<string, Set<string>>(), delivered: new Map<string, Set<string>>(), posts: 0 };
  for (const r of receiver.requests) {
    const body = JSON.parse(r.rawBody.toString()) as { id: string; event: string; data: { emailId: string; campaignId: string | null } };
    if (body.data.campaignId !== campaignId) continue;
    out.posts++;
    const map = body.event === 'email.sent' ? out.sent : body.event === 'email.delivered' ? out.delivered : null;
    if (!map) continue;
    const ids = map.get(body.data.emailId) ?? new Set<string>();
    ids.add(body.id);
    map.set(body.data.emailId, ids);
  }
  return out;
}

const rand = (min: number, max: number) => min + Math.random() * (max - min);

async function waitFor(what: string, check: () => Promise<boolean> | boolean, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

/**
 * One scenario: `launch()` starts what runs (and returns the process to kill and the backend's
 * URL); `restart()` starts the killed process again.
 */
async function scenario(
  db: TestDatabase,
  launch: () => Promise<{ victim: Proc; backendUrl: string; mtaUrl: string; others: Proc[] }>,
  restart: () => Promise<Proc>,
): Promise<void> {
  const launched = await launch();
  const { backendUrl, mtaUrl, others } = launched;
  let victim = launched.victim;
  await new PgDkimKeyStore(db.pool, systemClock).upsert('sender.test', 'life1', dkimPem);
  // Operator settings (durable: they hold after every restart).
  await call(mtaUrl, 'POST', '/org-limits', { organizationId: 'default', daily: 10_000_000, hourly: 10_000_000 }, MTA_KEY);
  for (let d = 0; d < DOMAINS; d++) {
    await call(mtaUrl, 'PUT', `/isp-profiles/d${d}.life.test`, { defaultRate: 1_000_000, ceiling: 1_000_000, floor: 1, backoffFactor: 0.5, recoveryFactor: 1.1 }, MTA_KEY);
  }
  const topic = (await call(backendUrl, 'POST', '/admin/topics', { name: 'Lifecycle', requireDoubleOptIn: false })).data;
  const now = new Date().toISOString();
  await db.pool.query(
    `INSERT INTO contacts (id, email, source, created_at, updated_at)
     SELECT 'ct_life' || lpad(i::text, 6, '0'), 'u' || i || '@d' || (i % ${DOMAINS}) || '.life.test', 'api', $1, $1 FROM generate_series(1, $2) i`,
    [now, TOTAL],
  );
  await db.pool.query(
    `INSERT INTO topic_memberships (topic_id, contact_id, doi_status, source, created_at, updated_at)
     SELECT $1, 'ct_life' || lpad(i::text, 6, '0'), 'not_required', 'api', $2, $2 FROM generate_series(1, $3) i`,
    [topic.id, now, TOTAL],
  );
  await call(backendUrl, 'POST', '/admin/webhooks', { url: `${receiver.url}/hook`, events: ['email.sent', 'email.delivered'] });
  const campaign = (await call(backendUrl, 'POST', '/admin/campaigns', { name: 'Life', subject: 'Lifecycle', html: '<p>Hello</p>', from: 'News <news@sender.test>', topicId: topic.id })).data;
  const sending = (await call(backendUrl, 'POST', `/admin/campaigns/${campaign.id}/send`)).data;
  expect(sending.recipients).toBe(TOTAL);

  // Three kills at random moments while messages flow: the first once a random 10 – 40 % of
  // the run reached the sink, each later one once a random 2 – 10 % more arrived after the
  // previous restart (jobs the killed process held come back when their lease passes).
  const base = sink.messages.length; // the sink is shared by both scenarios
  const atSink = () => sink.messages.length - base;
  const kills: string[] = [];
  let mark = Math.floor(TOTAL * rand(0.1, 0.4));
  for (let k = 0; k < KILLS; k++) {
    await waitFor(`${mark} messages at the sink`, () => atSink() >= mark, 300_000);
    kills.push(`kill ${k + 1} at ${atSink()} messages at the sink`);
    await kill(victim);
    victim = await restart();
    mark = Math.min(atSink() + Math.floor(TOTAL * rand(0.02, 0.1)), TOTAL - 1);
  }

  // Drain: every send delivered, the outbox empty, every customer event posted.
  const pending = async () =>
    (await db.pool.query<{ n: string }>(`SELECT count(*) AS n FROM email_sends WHERE campaign_id = $1 AND status = 'delivered'`, [campaign.id])).rows[0]!.n;
  await waitFor(
    'every send delivered and every customer event received',
    async () => Number(await pending()) === TOTAL && received(campaign.id).delivered.size === TOTAL && received(campaign.id).sent.size === TOTAL,
    480_000,
  ).catch(async (err) => {
    const r = received(campaign.id);
    throw new Error(`${(err as Error).message} (${kills.join('; ')}; delivered sends ${await pending()}, email.sent ${r.sent.size}, email.delivered ${r.delivered.size}, sink ${atSink()})`);
  });
  // A moment for anything late (a duplicate would arrive now).
  await new Promise((r) => setTimeout(r, 3000));

  const sends = await db.pool.query<{ id: string; status: string }>(`SELECT id, status FROM email_sends WHERE campaign_id = $1`, [campaign.id]);
  expect(sends.rows).toHaveLength(TOTAL);
  expect(sends.rows.filter((s) => s.status !== 'delivered')).toEqual([]);
  const r = received(campaign.id);
  const ids = new Set(sends.rows.map((s) => s.id));
  for (const [name, map] of [['email.sent', r.sent], ['email.delivered', r.delivered]] as const) {
    expect([...map.keys()].filter((id) => !ids.has(id)), `${name} for unknown sends`).toEqual([]);
    expect(map.size, `${name}: one per message, no gap`).toBe(TOTAL);
    expect([...map].filter(([, events]) => events.size !== 1).map(([id, events]) => `${id}: ${events.size}`), `${name}: no duplicate`).toEqual([]);
  }
  expect((await db.pool.query(`SELECT count(*)::int AS n FROM mta_outbox`)).rows[0].n).toBe(0);
  // The sink saw every message at least once (a kill after a 250 may have sent one twice).
  expect(new Set(sink.messages.slice(base).map((m) => m.rcptTo[0])).size).toBe(TOTAL);
  console.log(`lifecycle (${TOTAL}): ${kills.join('; ')}; sink ${atSink()} messages; ${r.posts} webhook posts`);

  await stop(victim);
  for (const o of others) await stop(o);
}

describe('kill -9 of the MTA three times during a 10,000-message campaign', () => {
  it(
    'role all: exactly one delivered send, one email.sent and one email.delivered per message',
    async () => {
      const db = await createTestDatabase();
      const dataDir = mkdtempSync(join(tmpdir(), 'lm-life-all-'));
      dirs.push(dataDir);
      const env = { ...baseEnv(db, dataDir), PORT: '0', MTA_PORT: '0', INBOUND_SMTP_PORT: '0' };
      const up = () => start('all', env);
      try {
        await scenario(
          db,
          async () => {
            const p = await up();
            return { victim: p, backendUrl: p.backendUrl!, mtaUrl: p.mtaUrl!, others: [] };
          },
          up,
        );
      } finally {
        await db.drop();
      }
    },
    900_000,
  );

  it(
    'role mta beside a separate backend: the same, with only the MTA killed',
    async () => {
      const db = await createTestDatabase();
      const dataDir = mkdtempSync(join(tmpdir(), 'lm-life-split-'));
      dirs.push(dataDir);
      // Fixed ports: each side is configured with the other's URL, across restarts.
      const [bPort, mPort] = await Promise.all([freePort(), freePort()]);
      const env = {
        ...baseEnv(db, dataDir),
        PORT: String(bPort),
        MTA_PORT: String(mPort),
        INBOUND_SMTP_PORT: '0',
        MTA_URL: `http://127.0.0.1:${mPort}`,
        MTA_WEBHOOK_URL: `http://127.0.0.1:${bPort}/webhooks/mta`,
      };
      const mta = () => start('mta', env);
      try {
        await scenario(
          db,
          async () => {
            const backend = await start('backend', env);
            const m = await mta();
            return { victim: m, backendUrl: backend.backendUrl!, mtaUrl: m.mtaUrl!, others: [backend] };
          },
          mta,
        );
      } finally {
        await db.drop();
      }
    },
    900_000,
  );
});
