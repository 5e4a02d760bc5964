/**
 * The engine inside the real product (startTestApp, role all): POST /send → queue → ten phases →
 * delivery to a scriptable sink; a 5xx user-unknown lands the address in suppression. With
 * both ports 0 and no MTA_URL or MTA_WEBHOOK_URL, the halves reach each other only through
 * their peer options; the configuration they were built from is frozen.
 */
import { generateKeyPairSync } from 'node:crypto';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { bearerApi, startTestApp, type TestApp } from '../../harness/app.js';
import { pollUntil, startDnsServer, type DnsServer } from '../../harness/dns.js';
import { startSmtpSink, type SmtpSink } from '../../harness/smtp-sink.js';
import { dkimpyVerify } from './dkimpy.js';

const KEY = 'lm_mta_e2e_0123456789abcdefghijklmnopqrstuvwxyz';
const ADMIN = 'lm_admin_e2e_0123456789abcdefghijklmnopqrstuvwxyz';
const rsaPem = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
let dns: DnsServer;
let sink: SmtpSink;
let app: TestApp;

const api = bearerApi(() => app.mtaUrl!, KEY);

beforeAll(async () => {
  sink = await startSmtpSink({ host: '127.0.0.16', port: 0 });
  const { dkimTxtRecord } = await import('../../../src/mta/delivery/dkim/keys.js');
  dns = await startDnsServer({
    zones: {
      'e2e.test': [
        { name: '@', type: 'MX', value: '10 mx.e2e.test' },
        { name: 'mx', type: 'A', value: '127.0.0.16' },
      ],
      'sender.test': [{ name: 'e2e._domainkey', type: 'TXT', value: dkimTxtRecord(rsaPem) }],
    },
  });
  app = await startTestApp({
    role: 'all',
    env: {
      ADMIN_TOKEN: ADMIN,
      MTA_API_KEY: KEY,
      BOUNCE_VERP_KEY: 'e2e-verp-key-0123456789abcdef',
      BOUNCE_HOST: 'bounces.sender.test',
      DNS_SERVERS: dns.servers,
      MTA_DELIVERY_PORT: String(sink.port),
      MTA_POOLS: 'transactional:127.0.0.2@mta1.sender.test;campaign:127.0.0.3@mta2.sender.test',
      MTA_WARMED_IPS: '127.0.0.2,127.0.0.3',
      EMAIL_PROVIDER: 'mta',
    },
  });
  expect((await api('POST', '/dkim', { domain: 'sender.test', selector: 'e2e', privateKey: rsaPem })).status).toBeLessThan(300);
}, 120_000);

afterAll(async () => {
  await app?.close();
  await Promise.all([sink?.close(), dns?.stop()]);
});

const job = (to: string, messageId: string) => ({
  messageId,
  to,
  from: 'News <news@sender.test>',
  subject: 'Hello',
  html: '<p>Hello</p>',
  ipPool: 'transactional',
  organizationId: 'org-e2e',
  dkimDomain: 'sender.test',
});

it('POST /send is delivered from the pool IP, DKIM-signed, and logged as sent', async () => {
  expect((await api('POST', '/send', job('alice@e2e.test', 'e2e-1'))).status).toBe(202);
  const [m] = await sink.waitForMessages(1, 20_000);
  expect(m.remoteAddress).toBe('127.0.0.2');
  expect(m.clientHostname).toBe('mta1.sender.test');
  expect(m.rcptTo).toEqual(['alice@e2e.test']);
  expect(await dkimpyVerify(m.data, dns)).toEqual(['pass']);
});

it('a 5xx user unknown at the sink puts the address into suppression (hard_bounce)', async () => {
  sink.setRcptRule((rcpt) => (rcpt === 'gone@e2e.test' ? { code: 550, message: '5.1.1 <gone@e2e.test>: Recipient address rejected: User unknown' } : undefined));
  expect((await api('POST', '/send', job('gone@e2e.test', 'e2e-2'))).status).toBe(202);
  await sink.waitUntil(() => sink.rejections.length >= 1, 20_000, 'the RCPT rejection');
  let check: any;
  for (let i = 0; i < 100; i++) {
    check = (await api('GET', '/suppression/check/gone@e2e.test')).body.data;
    if (check.suppressed) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  expect(check).toMatchObject({ suppressed: true, reason: 'hard_bounce' });
});

it('the prepared configuration is frozen; the peers\' URLs are options, not written into it', () => {
  expect(app.services.config).toBe(app.config);
  expect(() => {
    (app.config as { MTA_URL?: string }).MTA_URL = 'http://elsewhere.test';
  }).toThrow(TypeError);
  expect(() => (app.config.MTA_WARMED_IPS as string[]).push('192.0.2.1')).toThrow(TypeError);
  expect(app.config.MTA_URL).toBeUndefined();
  expect(app.config.MTA_WEBHOOK_URL).toBeUndefined();
  expect(app.config.MTA_WEBHOOK_SECRET).toMatch(/\w{16,}/); // generated on first boot, before freezing
});

it('a transactional send reaches the MTA\'s /send through the backend\'s peer option; its `sent` event comes back through the MTA\'s', async () => {
  const admin = bearerApi(() => app.backendUrl!, ADMIN);
  const created = await admin('POST', '/admin/api-keys', { scopes: ['transactional:send'] });
  expect(created.status).toBe(201);
  const rest = bearerApi(() => app.backendUrl!, created.body.data.key);
  const r = await rest('POST', '/api/v1/transactional', { to: 'carol@e2e.test', from: 'News <news@sender.test>', subject: 'Round trip', html: '<p>Hi</p>' });
  expect(r.status, JSON.stringify(r.body)).toBe(202);
  const id = r.body.data.id as string;
  await sink.waitUntil(() => sink.messages.some((m) => m.rcptTo.includes('carol@e2e.test')), 20_000, 'the message at the sink');
  // Delivered only once the backend has taken the MTA's `sent` event at /webhooks/mta.
  const status = () => app.db.pool.query<{ status: string }>('SELECT status FROM email_sends WHERE id = $1', [id]).then((q) => q.rows[0]?.status);
  await pollUntil(async () => (await status()) === 'delivered', 20_000, () => `email_sends ${id} is not delivered`);
});
