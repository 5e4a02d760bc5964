/**
 * MTA-STS (RFC 8461) against real peers on loopback: knotd serves the MX and `_mta-sts`
 * records, an HTTPS server with the test CA serves the policy files, and four MX sinks present
 * a valid certificate, a wrong-name certificate, an expired certificate and no STARTTLS.
 * The policy cache is PostgreSQL; its times follow a manual clock.
 */
import { createServer, type Server } from 'node:https';
import { generateKeyPairSync } from 'node:crypto';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../../../src/shared/clock.js';
import { MemoryCoordination } from '../../../src/shared/coord/memory.js';
import { silentLogger } from '../../../src/shared/log.js';
import { createDeliverer, type DeliveryEngine } from '../../../src/mta/delivery/deliverer.js';
import type { DeliveryRoute, OutboundMessage } from '../../../src/mta/delivery/types.js';
import { PgDkimKeyStore } from '../../../src/mta/stores/dkim.js';
import { mxMatches, StsResolver } from '../../../src/mta/tls/sts.js';
import { TlsRptRecorder } from '../../../src/mta/tls/tlsrpt.js';
import { TRANSPORT } from '../../../src/mta/tls/settings.js';
import { createTestDatabase, type TestDatabase } from '../../harness/db.js';
import { findFreePort, startDnsServer, type DnsRecord, type DnsServer } from '../../harness/dns.js';
import { startSmtpSink, type SmtpSink } from '../../harness/smtp-sink.js';
import { createTestCa } from '../../harness/tls.js';

const ROUTE: DeliveryRoute = { pool: 'transactional', bindIp: '127.0.0.2', ehloName: 'mta1.sender.test' };
const rsaPem = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
const clock = new ManualClock(Date.UTC(2026, 10, 25, 10, 0, 0));

const IP = { valid: '127.0.40.10', wrong: '127.0.40.11', expired: '127.0.40.12', plain: '127.0.40.13', https: '127.0.40.2' };

let db: TestDatabase;
let dns: DnsServer;
let port: number;
let httpsPort: number;
let https: Server;
let caCert: string;
const sinks: Record<'valid' | 'wrong' | 'expired' | 'plain', SmtpSink> = {} as never;
/** Policy file per `mta-sts.<domain>` host; a number is an HTTP status to answer instead. */
const policies = new Map<string, string | number | { status: number; type?: string; body?: string; location?: string }>();
const fetches: string[] = [];
let keys: PgDkimKeyStore;
let recorder: TlsRptRecorder;

const policy = (mode: string, mx: string[], maxAge = 86_400) => ['version: STSv1', `mode: ${mode}`, ...mx.map((m) => `mx: ${m}`), `max_age: ${maxAge}`, ''].join('\r\n');

/** A domain whose single MX is `mxName` at `ip`, with an `_mta-sts` record of `id` (none when null). */
function zone(mx: { name: string; ip: string; pref?: number }[], id: string | null): DnsRecord[] {
  return [
    ...mx.flatMap((m) => [
      { name: '@', type: 'MX' as const, value: `${m.pref ?? 10} ${m.name}` },
      { name: m.name, type: 'A' as const, value: m.ip },
    ]),
    { name: 'mta-sts', type: 'A', value: IP.https },
    ...(id ? [{ name: '_mta-sts', type: 'TXT' as const, value: `v=STSv1; id=${id}` }] : []),
  ];
}

function msg(to: string, n = 1): OutboundMessage {
  const id = `sts-${to}-${n}-${Math.random()}`;
  return { messageId: id, sendId: id, organizationId: 'org-1', from: 'News <news@sender.test>', to, subject: 'Hi', text: 'Hello', dkimDomain: 'sender.test' };
}

const engines: DeliveryEngine[] = [];
function sts(): StsResolver {
  return new StsResolver({ db: db.pool, clock, log: silentLogger, dnsServers: [dns.servers], ca: caCert, allowHosts: [...policies.keys()], policyPort: httpsPort });
}
function engine(resolver = sts()): DeliveryEngine {
  const e = createDeliverer({
    clock,
    coord: new MemoryCoordination({ clock }),
    db: db.pool,
    log: silentLogger,
    keys,
    verpKey: 'test-verp-key-0123456789abcdef',
    bounceHost: 'bounces.sender.test',
    dnsServers: [dns.servers],
    port,
    registry: new Registry(),
    tls: { ca: caCert },
    pool: { autoSweep: false },
    autoPrune: false,
    sts: resolver,
    tlsrpt: recorder,
  });
  engines.push(e);
  return e;
}

async function results(domain: string) {
  await recorder.drain();
  const r = await db.pool.query(`SELECT policy_type, policy_id, result, mx_host, count FROM mta_tlsrpt_results WHERE policy_domain = $1 ORDER BY result, mx_host`, [domain]);
  return r.rows;
}

beforeAll(async () => {
  db = await createTestDatabase();
  keys = new PgDkimKeyStore(db.pool, clock);
  await keys.upsert('sender.test', 'rsa1', rsaPem);
  recorder = new TlsRptRecorder({ db: db.pool, clock, log: silentLogger });
  const valid = await createTestCa({ dnsNames: ['mx.good.test', 'mx.skip.test', 'mx.testing.test', 'mx.none.test'], ips: [] });
  const wrong = await createTestCa({ dnsNames: ['somewhere-else.test'], ips: [] });
  const expired = await createTestCa({ dnsNames: ['mx.expired.test'], ips: [], expired: true });
  const web = await createTestCa({
    dnsNames: ['mta-sts.good.test', 'mta-sts.wrong.test', 'mta-sts.expired.test', 'mta-sts.plain.test', 'mta-sts.skip.test', 'mta-sts.testing.test', 'mta-sts.cache.test', 'mta-sts.late.test', 'mta-sts.broken.test', 'mta-sts.redirect.test', 'mta-sts.bigfile.test'],
    ips: [],
  });
  caCert = valid.caCert;
  for (let attempt = 0; ; attempt++) {
    port = await findFreePort(IP.valid);
    try {
      sinks.valid = await startSmtpSink({ host: IP.valid, port, tls: { key: valid.key, cert: valid.cert }, name: 'mx.good.test' });
      sinks.wrong = await startSmtpSink({ host: IP.wrong, port, tls: { key: wrong.key, cert: wrong.cert }, name: 'mx.wrong.test' });
      sinks.expired = await startSmtpSink({ host: IP.expired, port, tls: { key: expired.key, cert: expired.cert }, name: 'mx.expired.test' });
      sinks.plain = await startSmtpSink({ host: IP.plain, port, name: 'mx.plain.test' });
      break;
    } catch (err) {
      await Promise.all(Object.values(sinks).map((s) => s?.close()));
      if (attempt > 5) throw err;
    }
  }
  https = createServer({ key: web.key, cert: web.cert }, (req, res) => {
    const host = String(req.headers.host ?? '').replace(/:\d+$/, '');
    fetches.push(host);
    const p = policies.get(host);
    if (req.url !== '/.well-known/mta-sts.txt' || p === undefined) return void res.writeHead(404).end();
    if (typeof p === 'number') return void res.writeHead(p).end();
    if (typeof p === 'object') return void res.writeHead(p.status, { 'content-type': p.type ?? 'text/plain', ...(p.location ? { location: p.location } : {}) }).end(p.body ?? '');
    res.writeHead(200, { 'content-type': 'text/plain; charset=utf-8' }).end(p);
  });
  httpsPort = await findFreePort(IP.https);
  await new Promise<void>((r) => https.listen(httpsPort, IP.https, r));

  policies.set('mta-sts.good.test', policy('enforce', ['mx.good.test']));
  policies.set('mta-sts.wrong.test', policy('enforce', ['mx.wrong.test']));
  policies.set('mta-sts.expired.test', policy('enforce', ['mx.expired.test']));
  policies.set('mta-sts.plain.test', policy('enforce', ['mx.plain.test']));
  policies.set('mta-sts.skip.test', policy('enforce', ['*.skip.test']));
  policies.set('mta-sts.testing.test', policy('testing', ['mx.testing.test']));
  policies.set('mta-sts.cache.test', policy('enforce', ['mx.cache.test'], 86_400));
  policies.set('mta-sts.late.test', policy('enforce', ['mx.late.test']));
  policies.set('mta-sts.broken.test', { status: 200, type: 'text/html', body: '<html>' });
  policies.set('mta-sts.redirect.test', { status: 301, location: 'https://mta-sts.good.test/.well-known/mta-sts.txt' });
  policies.set('mta-sts.bigfile.test', { status: 200, body: policy('enforce', ['mx.bigfile.test']) + '#'.repeat(TRANSPORT.stsMaxBodyBytes) });

  dns = await startDnsServer({
    zones: {
      'good.test': zone([{ name: 'mx.good.test', ip: IP.valid }], '20261125a'),
      'wrong.test': zone([{ name: 'mx.wrong.test', ip: IP.wrong }], '1'),
      'expired.test': zone([{ name: 'mx.expired.test', ip: IP.expired }], '1'),
      'plain.test': zone([{ name: 'mx.plain.test', ip: IP.plain }], '1'),
      // mx1.other.test is preferred but outside the policy; mx.skip.test matches *.skip.test.
      'skip.test': zone([{ name: 'mx1.other.test', ip: IP.plain, pref: 5 }, { name: 'mx.skip.test', ip: IP.valid, pref: 10 }], '1'),
      'testing.test': zone([{ name: 'mx.testing.test', ip: IP.wrong }], '1'),
      'none.test': zone([{ name: 'mx.none.test', ip: IP.plain }], null),
      'cache.test': zone([{ name: 'mx.cache.test', ip: IP.plain }], 'one'),
      'late.test': zone([{ name: 'mx.late.test', ip: IP.plain }], null),
      'broken.test': zone([{ name: 'mx.broken.test', ip: IP.plain }], '1'),
      'redirect.test': zone([{ name: 'mx.redirect.test', ip: IP.plain }], '1'),
      'bigfile.test': zone([{ name: 'mx.bigfile.test', ip: IP.plain }], '1'),
    },
  });
}, 120_000);

afterAll(async () => {
  await Promise.all(engines.map((e) => e.close().catch(() => {})));
  await Promise.all([...Object.values(sinks).map((s) => s?.close()), dns?.stop(), new Promise((r) => https?.close(r))]);
  await db?.drop();
});

beforeEach(() => {
  for (const s of Object.values(sinks)) s.reset();
});

describe('MX patterns (RFC 8461 §4.1)', () => {
  it('matches exact names and one-label wildcards only', () => {
    expect(mxMatches('mx.example.com', ['mx.example.com'])).toBe(true);
    expect(mxMatches('MX.Example.com.', ['mx.example.com'])).toBe(true);
    expect(mxMatches('a.example.com', ['*.example.com'])).toBe(true);
    expect(mxMatches('a.b.example.com', ['*.example.com'])).toBe(false);
    expect(mxMatches('example.com', ['*.example.com'])).toBe(false);
    expect(mxMatches('mx.evil.com', ['mx.example.com', '*.example.com'])).toBe(false);
  });
});

describe('enforce', () => {
  it('delivers over validated TLS to a matching MX and records a success', async () => {
    const r = await engine().deliver(msg('a@good.test'), ROUTE);
    expect(r).toMatchObject({ status: 'sent', tls: true, mxHost: 'mx.good.test' });
    expect((await sinks.valid.waitForMessages(1))[0].secure).toBe(true);
    expect(await results('good.test')).toEqual([{ policy_type: 'sts', policy_id: '20261125a', result: 'success', mx_host: 'mx.good.test', count: 1 }]);
  });

  it.each([
    ['wrong.test', 'wrong', 'certificate-host-mismatch'],
    ['expired.test', 'expired', 'certificate-expired'],
    ['plain.test', 'plain', 'starttls-not-supported'],
  ] as const)('refuses %s (%s certificate): deferred, never bounced, nothing sent, %s recorded', async (domain, sink, type) => {
    const r = await engine().deliver(msg(`a@${domain}`), ROUTE);
    expect(r.status).toBe('deferred');
    expect(r.response).toContain(type);
    expect(sinks[sink].messages).toHaveLength(0);
    const rows = await results(domain);
    expect(rows).toEqual([expect.objectContaining({ policy_type: 'sts', result: type, mx_host: `mx.${domain}`, count: 1 })]);
  });

  it('skips MX hosts the policy does not list', async () => {
    const r = await engine().deliver(msg('a@skip.test'), ROUTE);
    expect(r).toMatchObject({ status: 'sent', mxHost: 'mx.skip.test', tls: true });
    expect(sinks.plain.connections).toBe(0); // mx1.other.test (preference 5) was never contacted
    expect(sinks.valid.messages).toHaveLength(1);
    const rows = await results('skip.test');
    expect(rows.map((x) => [x.result, x.mx_host])).toEqual([
      ['success', 'mx.skip.test'],
      ['validation-failure', 'mx1.other.test'],
    ]);
  });
});

describe('testing and none', () => {
  it('testing: delivers despite a wrong-name certificate, and reports it', async () => {
    const r = await engine().deliver(msg('a@testing.test'), ROUTE);
    expect(r).toMatchObject({ status: 'sent', tls: true });
    expect(sinks.wrong.messages).toHaveLength(1);
    expect(await results('testing.test')).toEqual([expect.objectContaining({ policy_type: 'sts', result: 'certificate-host-mismatch', count: 1 })]);
  });

  it('no policy: opportunistic, plain text accepted, recorded under no-policy-found', async () => {
    const r = await engine().deliver(msg('a@none.test'), ROUTE);
    expect(r).toMatchObject({ status: 'sent', tls: false });
    expect(await results('none.test')).toEqual([expect.objectContaining({ policy_type: 'no-policy-found', result: 'starttls-not-supported' })]);
  });

  it.each([
    ['broken.test', 'sts-policy-invalid'],
    ['redirect.test', 'sts-policy-fetch-error'],
    ['bigfile.test', 'sts-policy-invalid'],
  ])('%s: a policy that cannot be had falls back to opportunistic TLS and reports %s', async (domain, type) => {
    const r = await engine().deliver(msg(`a@${domain}`), ROUTE);
    expect(r.status).toBe('sent');
    const rows = await results(domain);
    expect(rows).toContainEqual(expect.objectContaining({ policy_type: 'sts', result: type }));
    // The redirect was not followed.
    if (domain === 'redirect.test') expect(fetches.filter((h) => h === 'mta-sts.good.test').length).toBeLessThanOrEqual(1);
  });
});

describe('policy cache (PostgreSQL, manual clock)', () => {
  it('keeps a policy 5 minutes without DNS, renews it on the same id, refetches on a new id', async () => {
    const r = sts();
    const count = () => fetches.filter((h) => h === 'mta-sts.cache.test').length;
    expect(await r.lookup('cache.test')).toMatchObject({ source: 'fetched', policy: { mode: 'enforce', id: 'one' } });
    expect(count()).toBe(1);
    // A new id inside the 5 minutes is not even read.
    await dns.setRecords('cache.test', zone([{ name: 'mx.cache.test', ip: IP.plain }], 'two'));
    policies.set('mta-sts.cache.test', policy('testing', ['mx.cache.test'], 86_400));
    clock.advance(TRANSPORT.stsMinCacheMs - 1_000);
    expect(await r.lookup('cache.test')).toMatchObject({ source: 'cache', policy: { id: 'one', mode: 'enforce' } });
    clock.advance(2_000);
    expect(await r.lookup('cache.test')).toMatchObject({ source: 'fetched', policy: { id: 'two', mode: 'testing' } });
    expect(count()).toBe(2);
    clock.advance(TRANSPORT.stsMinCacheMs + 1);
    expect(await r.lookup('cache.test')).toMatchObject({ source: 'renewed', policy: { id: 'two' } });
    expect(count()).toBe(2);
  });

  it('each instance re-reads a cached row at most every 30 s (the table stays the truth)', async () => {
    const r = sts();
    await r.lookup('good.test');
    clock.advance(1_000);
    expect(await r.lookup('good.test')).toMatchObject({ source: 'cache' }); // read from the table, memoised
    await db.pool.query(`UPDATE mta_sts_policies SET mode = 'testing' WHERE domain = 'good.test'`);
    clock.advance(TRANSPORT.stsMemoMs - 2_000);
    expect(await r.lookup('good.test')).toMatchObject({ policy: { mode: 'enforce' } });
    clock.advance(2_000);
    expect(await r.lookup('good.test')).toMatchObject({ source: 'cache', policy: { mode: 'testing' } });
    await db.pool.query(`UPDATE mta_sts_policies SET mode = 'enforce' WHERE domain = 'good.test'`);
  });

  it('remembers "no policy" for 1 hour', async () => {
    const r = sts();
    expect(await r.lookup('late.test')).toMatchObject({ source: 'negative', policy: null });
    await dns.setRecords('late.test', zone([{ name: 'mx.late.test', ip: IP.plain }], 'now'));
    clock.advance(TRANSPORT.stsNegativeCacheMs - 1_000);
    expect(await r.lookup('late.test')).toMatchObject({ source: 'negative', policy: null });
    clock.advance(2_000);
    expect(await r.lookup('late.test')).toMatchObject({ source: 'fetched', policy: { mode: 'enforce' } });
  });

  it('a cached enforce policy survives a restart (new resolver, same database) and a DNS outage, until max_age', async () => {
    expect(await sts().lookup('plain.test')).toMatchObject({ policy: { mode: 'enforce' } });
    clock.advance(TRANSPORT.stsMinCacheMs + 1);
    await dns.pause();
    try {
      // A new resolver: nothing in memory, the policy comes from PostgreSQL.
      const looked = await sts().lookup('plain.test');
      expect(looked).toMatchObject({ source: 'stale-dns', policy: { mode: 'enforce', mx: ['mx.plain.test'] } });
    } finally {
      dns.resume();
    }
    // An expired policy is gone: after max_age (1 day) plus a DNS outage, nothing is enforced.
    clock.advance(86_400_000 + 1);
    await dns.pause();
    try {
      expect(await sts().lookup('plain.test')).toMatchObject({ policy: null });
    } finally {
      dns.resume();
    }
  }, 60_000);
});
