/**
 * A TLS-RPT report to a `mailto:` endpoint travels through our own queue, pipeline and
 * delivery engine: captured at an SMTP sink as a `multipart/report; report-type=tlsrpt`
 * message whose DKIM signature dkimpy verifies and whose gzipped report validates against
 * the RFC 8460 schema.
 */
import { generateKeyPairSync } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { gunzipSync } from 'node:zlib';
import { Ajv } from 'ajv';
import addFormatsModule from 'ajv-formats';
import { simpleParser } from 'mailparser';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { ManualClock } from '../../../src/shared/clock.js';
import { MemoryCoordination } from '../../../src/shared/coord/memory.js';
import { silentLogger } from '../../../src/shared/log.js';
import { createDeliverer } from '../../../src/mta/delivery/deliverer.js';
import { dkimTxtRecord } from '../../../src/mta/delivery/dkim/keys.js';
import { PgDkimKeyStore } from '../../../src/mta/stores/dkim.js';
import { createTestDatabase, type TestDatabase } from '../../harness/db.js';
import { startDnsServer, type DnsServer } from '../../harness/dns.js';
import { startSmtpSink, type SmtpSink } from '../../harness/smtp-sink.js';
import { dkimpyVerify } from '../delivery/dkimpy.js';
import { startMta, type TestMta } from '../helpers.js';

const addFormats = ((addFormatsModule as unknown as { default?: (a: Ajv) => Ajv }).default ?? addFormatsModule) as unknown as (a: Ajv) => Ajv;
const ajv = new Ajv({ strict: true });
addFormats(ajv);
const validate = ajv.compile(JSON.parse(readFileSync(new URL('../../fixtures/tlsrpt/rfc8460-report.schema.json', import.meta.url), 'utf8')));

const rsaPem = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
const DAY = Date.UTC(2026, 10, 24, 12, 0, 0);
let db: TestDatabase;
let dns: DnsServer;
let sink: SmtpSink;
let t: TestMta;

beforeAll(async () => {
  db = await createTestDatabase();
  sink = await startSmtpSink({ host: '127.0.43.10' });
  dns = await startDnsServer({
    zones: {
      'sender.test': [{ name: 'rsa1._domainkey', type: 'TXT', value: dkimTxtRecord(rsaPem) }],
      'mailrpt.test': [{ name: '_smtp._tls', type: 'TXT', value: 'v=TLSRPTv1; rua=mailto:reports@rcv.test' }],
      'rcv.test': [
        { name: '@', type: 'MX', value: '10 mx.rcv.test' },
        { name: 'mx', type: 'A', value: '127.0.43.10' },
      ],
    },
  });
  const clock = new ManualClock(DAY);
  const keys = new PgDkimKeyStore(db.pool, clock);
  await keys.upsert('sender.test', 'rsa1', rsaPem);
  const deliverer = createDeliverer({
    clock,
    coord: new MemoryCoordination({ clock }),
    db: db.pool,
    log: silentLogger,
    keys,
    verpKey: 'test-verp-key-0123456789abcdef',
    bounceHost: 'bounces.sender.test',
    dnsServers: [dns.servers],
    port: sink.port,
    registry: new Registry(),
    pool: { autoSweep: false },
    autoPrune: false,
  });
  t = await startMta({ db, clock, start: true, options: { deliverer }, env: { DNS_SERVERS: dns.servers, MTA_TLSRPT_FROM: 'TLS Reports <tlsrpt@sender.test>', ORGANIZATION_NAME: 'Lettermill Test' } });
}, 120_000);

afterAll(async () => {
  await t?.close();
  await Promise.all([sink?.close(), dns?.stop()]);
  await db?.drop();
});

it('queues a DKIM-signed multipart/report that a sink receives and dkimpy verifies', async () => {
  const rec = t.mta.context.transport.tlsrpt;
  await rec.record({ policyDomain: 'mailrpt.test', policyType: 'no-policy-found', result: 'success', mxHost: 'mx.mailrpt.test' });
  await rec.record({ policyDomain: 'mailrpt.test', policyType: 'no-policy-found', result: 'starttls-not-supported', mxHost: 'mx.mailrpt.test', sendingIp: '127.0.0.2' });
  t.clock.set(DAY + 86_400_000);

  const r = await t.call('POST', '/tls-reports/send', { date: '2026-11-24' });
  expect(r.status).toBe(200);
  expect(r.body.data).toMatchObject({ day: '2026-11-24', leader: true, outcomes: [{ domain: 'mailrpt.test', endpoint: 'mailto:reports@rcv.test', status: 'sent' }] });

  const [m] = await sink.waitForMessages(1, 30_000);
  expect(m.rcptTo).toEqual(['reports@rcv.test']);
  expect(await dkimpyVerify(m.data, dns)).toEqual(['pass']);
  const parsed = await simpleParser(m.data);
  expect(parsed.headers.get('content-type')).toMatchObject({ value: 'multipart/report', params: { 'report-type': 'tlsrpt' } });
  expect(parsed.subject).toMatch(/^Report Domain: mailrpt\.test Submitter: Lettermill Test Report-ID: <.+>$/);
  expect(parsed.headers.get('tls-report-domain')).toBe('mailrpt.test');
  const att = parsed.attachments.find((a) => a.contentType === 'application/tlsrpt+gzip')!;
  expect(att.filename).toMatch(/^LettermillTest!mailrpt\.test!\d+!\d+\.json\.gz$/);
  const report = JSON.parse(gunzipSync(att.content).toString('utf8'));
  expect(validate(report), JSON.stringify(validate.errors)).toBe(true);
  expect(report.policies[0].summary).toEqual({ 'total-successful-session-count': 1, 'total-failure-session-count': 1 });

  // No body: yesterday (the clock is on the 25th).
  const plain = await t.call('POST', '/tls-reports/send');
  expect(plain.status, JSON.stringify(plain.body)).toBe(200);
  expect(plain.body.data).toMatchObject({ day: '2026-11-24', leader: true });
  const bad = await t.call('POST', '/tls-reports/send', { date: '2026-13-45' });
  expect(bad.status).toBe(400);
  expect(bad.body.error).toMatchObject({ category: 'invalid_input', data: { reason: 'invalid_date' } });
  expect((await t.call('POST', '/tls-reports/send', { date: 'yesterday' })).status).toBe(400);
  expect((await t.call('POST', '/tls-reports/send', { date: '2026-02-31' })).body.error.data.reason).toBe('invalid_date');

  // Sent once: the route again does not queue a second mail.
  const again = await t.call('POST', '/tls-reports/send', { date: '2026-11-24' });
  expect(again.body.data.outcomes).toEqual([expect.objectContaining({ status: 'already-sent' })]);
}, 60_000);
