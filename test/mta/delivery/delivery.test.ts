/**
 * The delivery engine against real peers on loopback: knotd for DNS, scriptable SMTP sinks
 * on 127.0.0.10+ (one port number), sending from 127.0.0.2/127.0.0.3, PostgreSQL for DKIM
 * keys and provenance, dkimpy for signature verification.
 */
import { generateKeyPairSync } from 'node:crypto';
import { simpleParser } from 'mailparser';
import { Registry } from 'prom-client';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../../../src/shared/clock.js';
import { MemoryCoordination } from '../../../src/shared/coord/memory.js';
import { silentLogger } from '../../../src/shared/log.js';
import { dkimTxtRecord } from '../../../src/mta/delivery/dkim/keys.js';
import { createDeliverer, type ConnectionFailureInfo, type DeliveryEngine } from '../../../src/mta/delivery/deliverer.js';
import { globalPermitKey } from '../../../src/mta/delivery/pool.js';
import type { DeliveryRoute, OutboundMessage } from '../../../src/mta/delivery/types.js';
import { parseVerpAddress } from '../../../src/mta/delivery/verp.js';
import { PgDkimKeyStore } from '../../../src/mta/stores/dkim.js';
import { createTestDatabase, type TestDatabase } from '../../harness/db.js';
import { findFreePort, startDnsServer, type DnsServer } from '../../harness/dns.js';
import { startSmtpSink, type SmtpSink } from '../../harness/smtp-sink.js';
import { createTestCa, type TestCertificates } from '../../harness/tls.js';
import { dkimpyVerify } from './dkimpy.js';

const VERP_KEY = 'test-verp-key-0123456789abcdef';
const BOUNCE_HOST = 'bounces.sender.test';
const rsaPem = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
const edPem = generateKeyPairSync('ed25519').privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();

const ROUTE_A: DeliveryRoute = { pool: 'transactional', bindIp: '127.0.0.2', ehloName: 'mta1.sender.test' };
const ROUTE_B: DeliveryRoute = { pool: 'campaign', bindIp: '127.0.0.3', ehloName: 'mta2.sender.test' };

let dns: DnsServer;
let db: TestDatabase;
let ca: TestCertificates;
let port: number;
let sinkA: SmtpSink; // 127.0.0.10, STARTTLS
let sinkB: SmtpSink; // 127.0.0.11, plain
let sinkBadTls: SmtpSink; // 127.0.0.13, STARTTLS offered but no handshake can succeed
let sinkBare: SmtpSink; // 127.0.0.14, no PIPELINING, no 8BITMIME
let sinkImpatient: SmtpSink; // 127.0.0.15, drops idle clients after 300 ms
let keys: PgDkimKeyStore;
const clock = new ManualClock(Date.UTC(2026, 0, 5, 10, 0, 0));

function msg(n: number | string, over: Partial<OutboundMessage> = {}): OutboundMessage {
  return {
    messageId: `msg-${n}`,
    sendId: `send-${n}`,
    organizationId: 'org-1',
    from: 'News <news@sender.test>',
    to: `user${n}@dest.test`,
    subject: `Hello ${n}`,
    html: `<p>Hello ${n}</p>`,
    text: `Hello ${n}`,
    dkimDomain: 'sender.test',
    campaignId: 'camp-1',
    ...over,
  };
}

const engines: DeliveryEngine[] = [];

/**
 * Every SMTP session the sink saw has ended. (The sink's openConnections counter misses the
 * close of a connection that was upgraded with STARTTLS, so sessions are checked instead.)
 */
const allClosed = (s: SmtpSink): boolean => s.sessions.every((x) => x.closedAt !== undefined);

/** Waits until every pooled connection finished its post-send RSET. */
async function waitIdle(e: DeliveryEngine): Promise<void> {
  for (let i = 0; i < 200 && e.pool.stats().busy > 0; i++) await new Promise((r) => setTimeout(r, 10));
  expect(e.pool.stats().busy).toBe(0);
}
function engine(over: Partial<Parameters<typeof createDeliverer>[0]> = {}): DeliveryEngine {
  const e = createDeliverer({
    clock,
    coord: new MemoryCoordination({ clock }),
    db: db.pool,
    log: silentLogger,
    keys,
    verpKey: VERP_KEY,
    bounceHost: BOUNCE_HOST,
    dnsServers: [dns.servers],
    port,
    registry: new Registry(),
    tls: { ca: ca.caCert },
    pool: { autoSweep: false },
    autoPrune: false,
    ...over,
  });
  engines.push(e);
  return e;
}

beforeAll(async () => {
  ca = await createTestCa({ dnsNames: ['mx1.dest.test'], ips: ['127.0.0.10'] });
  db = await createTestDatabase();
  keys = new PgDkimKeyStore(db.pool, clock);
  await keys.upsert('sender.test', 'rsa1', rsaPem);
  await keys.upsert('ed.sender.test', 'ed1', edPem);
  for (let attempt = 0; ; attempt++) {
    port = await findFreePort('127.0.0.10');
    try {
      sinkA = await startSmtpSink({ host: '127.0.0.10', port, tls: { key: ca.key, cert: ca.cert }, name: 'mx1.dest.test' });
      sinkB = await startSmtpSink({ host: '127.0.0.11', port, name: 'mx2.dest.test' });
      sinkBadTls = await startSmtpSink({
        host: '127.0.0.13',
        port,
        tls: { key: ca.key, cert: ca.cert },
        // Only TLS 1.0/1.1, which Node's client refuses: every handshake fails.
        serverOptions: { minVersion: 'TLSv1', maxVersion: 'TLSv1.1' } as never,
      });
      sinkBare = await startSmtpSink({ host: '127.0.0.14', port, serverOptions: { hidePIPELINING: true, hide8BITMIME: true } as never });
      sinkImpatient = await startSmtpSink({ host: '127.0.0.15', port, socketTimeoutMs: 300 });
      break;
    } catch (err) {
      await Promise.all([sinkA?.close(), sinkB?.close(), sinkBadTls?.close(), sinkBare?.close(), sinkImpatient?.close()]);
      if (attempt > 5) throw err;
    }
  }
  dns = await startDnsServer({
    zones: {
      'sender.test': [
        { name: 'rsa1._domainkey', type: 'TXT', value: dkimTxtRecord(rsaPem) },
        { name: 'ed1._domainkey.ed', type: 'TXT', value: dkimTxtRecord(edPem) },
      ],
      'dest.test': [
        { name: '@', type: 'MX', value: '10 mx1.dest.test' },
        { name: 'mx1', type: 'A', value: '127.0.0.10' },
      ],
      'fallback.test': [
        { name: '@', type: 'MX', value: '10 mxa.fallback.test' },
        { name: '@', type: 'MX', value: '20 mxb.fallback.test' },
        { name: 'mxa', type: 'A', value: '127.0.0.12' }, // nothing listens there
        { name: 'mxb', type: 'A', value: '127.0.0.11' },
      ],
      'amx.test': [{ name: '@', type: 'A', value: '127.0.0.11' }],
      'nullmx.test': [{ name: '@', type: 'MX', value: '0 .' }],
      'down.test': [
        { name: '@', type: 'MX', value: '10 mx.down.test' },
        { name: 'mx', type: 'A', value: '127.0.0.12' },
      ],
      'badtls.test': [
        { name: '@', type: 'MX', value: '10 mx.badtls.test' },
        { name: 'mx', type: 'A', value: '127.0.0.13' },
      ],
      'other.test': [
        { name: '@', type: 'MX', value: '10 mx1.dest.test' }, // shares dest.test's MX host
      ],
      // Plain-text MX (sinkB) for the connection-count tests: the sink's open-connection
      // counters are exact only for connections never upgraded with STARTTLS.
      'plain.test': [
        { name: '@', type: 'MX', value: '10 mx.plain.test' },
        { name: 'mx', type: 'A', value: '127.0.0.11' },
      ],
      'plain2.test': [{ name: '@', type: 'MX', value: '10 mx.plain.test' }],
      'bare.test': [
        { name: '@', type: 'MX', value: '10 mx.bare.test' },
        { name: 'mx', type: 'A', value: '127.0.0.14' },
      ],
      'impatient.test': [
        { name: '@', type: 'MX', value: '10 mx.impatient.test' },
        { name: 'mx', type: 'A', value: '127.0.0.15' },
      ],
    },
  });
}, 120_000);

afterAll(async () => {
  await Promise.all(engines.map((e) => e.close().catch(() => {})));
  await Promise.all([sinkA?.close(), sinkB?.close(), sinkBadTls?.close(), sinkBare?.close(), sinkImpatient?.close(), dns?.stop()]);
  await db?.drop();
});

afterEach(async () => {
  // Each test's engines close, so connections never leak into the next test's counts.
  await Promise.all(engines.splice(0).map((e) => e.close().catch(() => {})));
  await Promise.all([sinkA, sinkB, sinkBadTls, sinkBare, sinkImpatient].map((s) => s.waitUntil(() => allClosed(s), 5_000, 'connections closed')));
});

beforeEach(() => {
  sinkBare.reset();
  sinkImpatient.reset();
  sinkA.reset();
  sinkB.reset();
  sinkBadTls.reset();
});

describe('delivery to real SMTP peers', () => {
  it('delivers through the MX, bound to the route IP with its EHLO name, over STARTTLS, DKIM-signed, with a VERP return path and provenance', async () => {
    const e = engine();
    const r = await e.deliver(msg(1), ROUTE_A);
    expect(r).toMatchObject({ status: 'sent', code: 250, mxHost: 'mx1.dest.test', tls: true });
    const [m] = await sinkA.waitForMessages(1);
    expect(m.remoteAddress).toBe('127.0.0.2');
    expect(m.clientHostname).toBe('mta1.sender.test');
    expect(m.secure).toBe(true);
    expect(m.rcptTo).toEqual(['user1@dest.test']);
    expect(parseVerpAddress(m.mailFrom, { key: VERP_KEY, bounceHost: BOUNCE_HOST })).toEqual({ id: 'send-1', legacy: false, verified: true });
    expect(await dkimpyVerify(m.data, dns)).toEqual(['pass']);
    const tampered = Buffer.from(m.data.toString('latin1').replace('Hello 1</p>', 'Hello 2</p>'), 'latin1');
    expect(await dkimpyVerify(tampered, dns)).toEqual(['fail']);
    await e.provenance.close();
    expect(await e.provenance.lookup({ id: 'send-1', legacy: false })).toMatchObject({ sendId: 'send-1', messageId: 'msg-1', organizationId: 'org-1', campaignId: 'camp-1', recipient: 'user1@dest.test', domain: 'dest.test', sentAt: clock.now() });

    // Another sending IP of another pool is seen as such.
    expect(await e.deliver(msg(2), ROUTE_B)).toMatchObject({ status: 'sent' });
    const [, m2] = await sinkA.waitForMessages(2);
    expect(m2.remoteAddress).toBe('127.0.0.3');
    expect(m2.clientHostname).toBe('mta2.sender.test');
  });

  it('provenance: records made together share one write; a send recorded twice keeps its last row; one message id of two organizations keeps both', async () => {
    const e = engine();
    const row = (recipient: string, sendId = 'prov-dup', org = 'org-p') => ({ sendId, messageId: 'same-id', organizationId: org, campaignId: null, recipient, domain: 'dest.test', ip: null, sentAt: clock.now() });
    const at = (id: string) => e.provenance.lookup({ id, legacy: false });
    // Same turn: one INSERT, which may not touch a row twice.
    await Promise.all([e.provenance.record(row('first@dest.test')), e.provenance.record(row('other@dest.test', 'prov-other', 'org-q')), e.provenance.record(row('second@dest.test'))]);
    expect(await at('prov-dup')).toMatchObject({ recipient: 'second@dest.test', organizationId: 'org-p' });
    expect(await at('prov-other')).toMatchObject({ recipient: 'other@dest.test', organizationId: 'org-q', messageId: 'same-id' });
    // A later record of the send (a later attempt) replaces its row, and only its row.
    await e.provenance.record(row('third@dest.test'));
    expect(await at('prov-dup')).toMatchObject({ recipient: 'third@dest.test' });
    expect(await at('prov-other')).toMatchObject({ recipient: 'other@dest.test' });
    // A send id is never read as a legacy token's message id, nor the reverse.
    expect(await e.provenance.lookup({ id: 'same-id', legacy: true })).toBeNull();
  });

  it('signs with Ed25519 for a domain whose key is Ed25519 (dkimpy verifies)', async () => {
    const e = engine();
    const r = await e.deliver(msg('ed', { from: 'x@ed.sender.test', dkimDomain: 'ed.sender.test' }), ROUTE_A);
    expect(r.status).toBe('sent');
    const [m] = await sinkA.waitForMessages(1);
    expect(m.data.toString('latin1')).toMatch(/a=ed25519-sha256/);
    expect(await dkimpyVerify(m.data, dns)).toEqual(['pass']);
  });

  it('falls back to the next MX by priority when the first refuses connections', async () => {
    const e = engine();
    const r = await e.deliver(msg(3, { to: 'u@fallback.test' }), ROUTE_A);
    expect(r).toMatchObject({ status: 'sent', mxHost: 'mxb.fallback.test', tls: false });
    expect((await sinkB.waitForMessages(1))[0].rcptTo).toEqual(['u@fallback.test']);
  });

  it('uses the domain A record when there is no MX (RFC 5321 §5.1)', async () => {
    const e = engine();
    expect(await e.deliver(msg(4, { to: 'u@amx.test' }), ROUTE_A)).toMatchObject({ status: 'sent', mxHost: 'amx.test' });
    expect(sinkB.messages).toHaveLength(1);
  });

  it('null MX and a non-existent domain bounce permanently without any connection', async () => {
    const e = engine();
    expect(await e.deliver(msg(5, { to: 'u@nullmx.test' }), ROUTE_A)).toMatchObject({ status: 'bounced', hard: true, reason: 'notaccept', enhancedCode: '5.1.10' });
    expect(await e.deliver(msg(6, { to: 'u@nosuch.dest.test' }), ROUTE_A)).toMatchObject({ status: 'bounced', hard: true, reason: 'hostunknown' });
    expect(sinkA.connections + sinkB.connections).toBe(0);
  });

  it('every MX unreachable → deferred connection failure, reported to the degradation tracker', async () => {
    const failures: ConnectionFailureInfo[] = [];
    const e = engine({ onConnectionFailure: (f) => void failures.push(f) });
    const r = await e.deliver(msg(7, { to: 'u@down.test' }), ROUTE_A);
    expect(r).toMatchObject({ status: 'deferred', connectionFailure: true, mxHost: 'mx.down.test' });
    expect(failures).toEqual([{ domain: 'down.test', bindIp: '127.0.0.2', attempts: [{ mxHost: 'mx.down.test', error: expect.stringMatching(/ECONNREFUSED|refused/i) }] }]);
  });

  it('4xx then success: the first attempt is deferred with the reply, the retry is delivered', async () => {
    const e = engine();
    sinkA.failNext({ stage: 'rcpt', code: 451, message: '4.7.1 Greylisted, try again later' });
    const first = await e.deliver(msg(8), ROUTE_A);
    expect(first).toMatchObject({ status: 'deferred', code: 451, enhancedCode: '4.7.1', connectionFailure: false, mxHost: 'mx1.dest.test' });
    expect(sinkA.messages).toHaveLength(0);
    expect(await e.deliver(msg(8), ROUTE_A)).toMatchObject({ status: 'sent' });
    expect(sinkA.messages).toHaveLength(1);
    expect(sinkA.connections).toBe(1); // the connection survived the 4xx (RSET) and was reused
  });

  it('5xx user unknown → hard bounce; 5xx mailbox full → soft bounce', async () => {
    const e = engine();
    sinkA.failNext({ stage: 'rcpt', code: 550, message: '5.1.1 <u@dest.test>: Recipient address rejected: User unknown' });
    expect(await e.deliver(msg(9), ROUTE_A)).toMatchObject({ status: 'bounced', hard: true, reason: 'userunknown', code: 550, enhancedCode: '5.1.1' });
    sinkA.failNext({ stage: 'data', code: 552, message: '5.2.2 Mailbox full' });
    expect(await e.deliver(msg(10), ROUTE_A)).toMatchObject({ status: 'bounced', hard: false, reason: 'mailboxfull' });
  });

  it('a failed STARTTLS handshake retries the same host once in plain text, and records it', async () => {
    const registry = new Registry();
    const e = engine({ registry });
    const r = await e.deliver(msg(11, { to: 'u@badtls.test' }), ROUTE_A);
    expect(r).toMatchObject({ status: 'sent', tls: false, tlsFallback: true, mxHost: 'mx.badtls.test' });
    expect(sinkBadTls.connections).toBe(2);
    expect(sinkBadTls.messages[0].secure).toBe(false);
    expect(await registry.getSingleMetricAsString('mta_smtp_tls_fallback_total')).toMatch(/mta_smtp_tls_fallback_total 1/);
  });

  it('talks to a server without PIPELINING or 8BITMIME; lines starting with a dot arrive intact', async () => {
    const e = engine();
    const text = 'line one\n.\n..two dots\n.three\nGrüße';
    for (const n of [1, 2]) {
      expect(await e.deliver(msg(`bare${n}`, { to: `u${n}@bare.test`, text, html: '<p>.x</p>\n.<p>y</p>' }), ROUTE_A)).toMatchObject({ status: 'sent' });
    }
    const [m1, m2] = await sinkBare.waitForMessages(2);
    expect(sinkBare.connections).toBe(1); // reused without pipelining too
    expect(m1.bodyType).not.toBe('8bitmime');
    const parsed = await simpleParser(m2.data);
    expect(parsed.text?.replace(/\n$/, '')).toBe(text);
    expect(parsed.html).toContain('\n.<p>y</p>');
    expect(await dkimpyVerify(m1.data, dns)).toEqual(['pass']);
  });

  it('a pooled connection the server dropped while idle is replaced without failing the send', async () => {
    const e = engine();
    expect(await e.deliver(msg('i1', { to: 'u@impatient.test' }), ROUTE_A)).toMatchObject({ status: 'sent' });
    await sinkImpatient.waitUntil(() => allClosed(sinkImpatient), 5_000, 'the sink dropped the idle client');
    expect(await e.deliver(msg('i2', { to: 'u@impatient.test' }), ROUTE_A)).toMatchObject({ status: 'sent' });
    expect(sinkImpatient.messages).toHaveLength(2);
    expect(sinkImpatient.connections).toBe(2);
  });

  it('no DKIM key → deferred locally, nothing sent unsigned', async () => {
    const e = engine();
    expect(await e.deliver(msg(12, { from: 'a@nokey.test', dkimDomain: 'nokey.test' }), ROUTE_A)).toMatchObject({ status: 'deferred', local: true, connectionFailure: false });
    expect(sinkA.connections).toBe(0);
  });
});

describe('connection pool', () => {
  it('reuses one connection for many messages (RSET between) and reports the gauge', async () => {
    const registry = new Registry();
    const e = engine({ registry });
    for (let i = 0; i < 20; i++) expect((await e.deliver(msg(`r${i}`), ROUTE_A)).status).toBe('sent');
    expect(sinkA.messages).toHaveLength(20);
    expect(sinkA.connections).toBe(1);
    expect(new Set(sinkA.messages.map((m) => m.connectionNumber)).size).toBe(1);
    await waitIdle(e);
    const gauge = await registry.getSingleMetricAsString('mta_smtp_pool_connections');
    expect(gauge).toMatch(/mta_smtp_pool_connections\{state="idle"\} 1/);
    expect(gauge).toMatch(/mta_smtp_pool_connections\{state="busy"\} 0/);
  });

  it('never opens more than 3 connections per key, however many sends run at once', async () => {
    const e = engine();
    sinkB.failNext({ stage: 'data', delayMs: 150, count: 30 });
    const results = await Promise.all(Array.from({ length: 30 }, (_, i) => e.deliver(msg(`c${i}`, { to: `u${i}@plain.test` }), ROUTE_A)));
    expect(results.every((r) => r.status === 'sent')).toBe(true);
    expect(sinkB.messages).toHaveLength(30);
    expect(sinkB.peakConnections).toBe(3);
    expect(sinkB.connections).toBe(3);
    expect(e.pool.count({ mxHost: 'mx.plain.test', bindIp: '127.0.0.2', dkimDomain: 'sender.test' })).toBe(3);
  });

  it('holds the fleet-wide cap per MX host across keys and instances (coordination semaphore)', async () => {
    const coord = new MemoryCoordination({ clock });
    // Two instances sharing one coordination store, fleet cap 4, each sending on two keys.
    // Real-time sweeps (every 100 ms) so idle connections of one instance give way to the other.
    const pool = { autoSweep: true, sweepIntervalMs: 100 };
    const e1 = engine({ coord, globalMaxPerHost: 4, instanceId: 'i1', pool });
    const e2 = engine({ coord, globalMaxPerHost: 4, instanceId: 'i2', pool });
    sinkB.failNext({ stage: 'data', delayMs: 100, count: 48 });
    const to = (i: number) => ({ to: `u${i}@plain.test` });
    const sends = [];
    for (let i = 0; i < 12; i++) {
      sends.push(e1.deliver(msg(`g1-${i}`, to(i)), ROUTE_A), e1.deliver(msg(`g2-${i}`, to(i)), ROUTE_B));
      sends.push(e2.deliver(msg(`g3-${i}`, { to: `x${i}@plain2.test` }), ROUTE_A), e2.deliver(msg(`g4-${i}`, to(i)), ROUTE_B));
    }
    const results = await Promise.all(sends);
    expect(results.filter((r) => r.status !== 'sent')).toEqual([]);
    expect(sinkB.messages).toHaveLength(48);
    expect(sinkB.peakConnections).toBeLessThanOrEqual(4);
    expect(sinkB.peakConnections).toBeGreaterThanOrEqual(2);
    expect(new Set(sinkB.messages.map((m) => m.remoteAddress))).toEqual(new Set(['127.0.0.2', '127.0.0.3']));
    expect(await coord.semaphoreCount(globalPermitKey('mx.plain.test'))).toBeLessThanOrEqual(4);
    await e1.close();
    await e2.close();
    expect(await coord.semaphoreCount(globalPermitKey('mx.plain.test'))).toBe(0);
  });

  it('the sweep closes idle and aged connections but never one with a send in flight', async () => {
    const e = engine();
    const key = { mxHost: 'mx1.dest.test', bindIp: '127.0.0.2', dkimDomain: 'sender.test' };
    expect((await e.deliver(msg('s1'), ROUTE_A)).status).toBe('sent');
    await waitIdle(e);
    expect(e.pool.count(key)).toBe(1);
    clock.advance(29_000);
    await e.pool.sweep();
    expect(e.pool.count(key)).toBe(1); // idle 29 s < 30 s
    clock.advance(2_000);
    await e.pool.sweep();
    expect(e.pool.count(key)).toBe(0);
    await sinkA.waitUntil(() => allClosed(sinkA), 5_000, 'idle connection closed');

    // In flight: the DATA reply is held back while the clock passes every limit.
    sinkA.failNext({ stage: 'data', delayMs: 400 });
    const pending = e.deliver(msg('s2'), ROUTE_A);
    for (let i = 0; i < 200 && e.pool.count(key) === 0; i++) await new Promise((r) => setTimeout(r, 10));
    await new Promise((r) => setTimeout(r, 100));
    clock.advance(10 * 60_000);
    await e.pool.sweep();
    expect(e.pool.count(key)).toBe(1);
    expect(await pending).toMatchObject({ status: 'sent' });
    // Past its maximum age it is not reused: closed on release.
    expect(e.pool.count(key)).toBe(0);
  });

  it('close() drains sends in flight before closing connections', async () => {
    const e = engine();
    sinkA.failNext({ stage: 'data', delayMs: 300 });
    const pending = e.deliver(msg('d1'), ROUTE_A);
    for (let i = 0; i < 200 && e.pool.stats().busy === 0; i++) await new Promise((r) => setTimeout(r, 10));
    await new Promise((r) => setTimeout(r, 50));
    const closed = e.close();
    expect(await e.deliver(msg('d2'), ROUTE_A)).toMatchObject({ status: 'deferred', local: true });
    expect(await pending).toMatchObject({ status: 'sent' });
    await closed;
    expect(sinkA.messages.map((m) => m.rcptTo[0])).toEqual(['userd1@dest.test']);
    await sinkA.waitUntil(() => allClosed(sinkA), 5_000, 'connection closed after drain');
  });
});
