/**
 * DKIM rotation and the records a sending domain publishes, through the MTA's HTTP API
 * against knotd (DKIM, SPF, MTA-STS, TLS-RPT and TLSA records), with a manual clock; messages
 * are delivered by the real engine to an SMTP sink and verified with dkimpy against the
 * selector each names.
 */
import { generateKeyPairSync } from 'node:crypto';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { silentLogger } from '../../../src/shared/log.js';
import { createDeliverer, type DeliveryEngine } from '../../../src/mta/delivery/deliverer.js';
import { DkimRotationJob } from '../../../src/mta/tls/dkim-rotation.js';
import { startDnsServer, type DnsRecord, type DnsServer } from '../../harness/dns.js';
import { startSmtpSink, type SmtpSink } from '../../harness/smtp-sink.js';
import { dkimpyVerify } from '../delivery/dkimpy.js';
import { startMta, type TestMta } from '../helpers.js';

const H = 3_600_000;
const rsaPem = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
let dns: DnsServer;
let t: TestMta;
let sink: SmtpSink;
const senderZone: DnsRecord[] = [{ name: '@', type: 'MX', value: '10 mx.sender.test' }, { name: 'mx', type: 'A', value: '127.0.42.10' }];

beforeAll(async () => {
  sink = await startSmtpSink({ host: '127.0.42.10' });
  dns = await startDnsServer({ zones: { 'sender.test': senderZone, 'dest.test': [{ name: '@', type: 'MX', value: '10 mx.dest.test' }, { name: 'mx', type: 'A', value: '127.0.42.10' }] } });
  t = await startMta({ env: { DNS_SERVERS: dns.servers, MTA_TLSRPT_RUA: 'mailto:tlsrpt@sender.test', BOUNCE_HOST: 'bounces.sender.test', BOUNCE_VERP_KEY: 'test-verp-key-0123456789abcdef' } });
}, 120_000);

afterAll(async () => {
  await t?.close();
  await Promise.all([sink?.close(), dns?.stop()]);
});

const publish = (extra: DnsRecord[]) => dns.setRecords('sender.test', [...senderZone, ...extra]);
const txt = (name: string, value: string): DnsRecord => ({ name, type: 'TXT', value });

/** A fresh engine per send: its key cache is empty, so it signs with the key active now. */
async function sendAndVerify(n: number): Promise<{ selector: string; result: string[] }> {
  const engine: DeliveryEngine = createDeliverer({
    clock: t.clock,
    coord: t.coord,
    db: t.db.pool,
    log: silentLogger,
    keys: t.mta.context.stores.dkim,
    verpKey: 'test-verp-key-0123456789abcdef',
    bounceHost: 'bounces.sender.test',
    dnsServers: [dns.servers],
    port: sink.port,
    registry: new Registry(),
    pool: { autoSweep: false },
    autoPrune: false,
  });
  try {
    const r = await engine.deliver({ messageId: `rot-${n}`, sendId: `rot-${n}`, organizationId: 'o', from: 'a@sender.test', to: `u${n}@dest.test`, subject: `m${n}`, text: 'hi', dkimDomain: 'sender.test' }, { pool: 'transactional', bindIp: '127.0.0.2', ehloName: 'mta1.sender.test' });
    expect(r.status).toBe('sent');
  } finally {
    await engine.close();
  }
  const m = sink.messages.at(-1)!;
  const selector = /DKIM-Signature:[^]*?\bs=([A-Za-z0-9-]+)/.exec(m.data.toString('latin1'))![1]!;
  return { selector, result: await dkimpyVerify(m.data, dns) };
}

describe('DKIM rotation (manual clock, knotd, dkimpy)', () => {
  it('pending → not before 48 h → not while the record is missing → activated once published → forced', async () => {
    expect((await t.call('POST', '/dkim', { domain: 'sender.test', selector: 'old1', privateKey: rsaPem })).status).toBe(201);
    const active = (await t.call('GET', '/dkim')).body.data.find((k: any) => k.domain === 'sender.test');
    await publish([txt('old1._domainkey', active.dnsValue)]);
    const before = await sendAndVerify(1);
    expect(before).toEqual({ selector: 'old1', result: ['pass'] });

    const rot = await t.call('POST', '/dkim/sender.test/rotate');
    expect(rot.status).toBe(201);
    expect(rot.body.data).toMatchObject({ activeSelector: 'old1', activated: false });
    const pending = rot.body.data;
    let listed = (await t.call('GET', '/dkim')).body.data.find((k: any) => k.domain === 'sender.test');
    expect(listed).toMatchObject({ selector: 'old1', published: 'published', ageDays: 0, rotationRecommended: false, pending: { selector: pending.selector, published: 'missing' } });
    expect(JSON.stringify(listed)).not.toContain('PRIVATE KEY');

    const job = t.mta.context.transport.rotation;
    const other = new DkimRotationJob({ keys: t.mta.context.stores.dkim, clock: t.clock, coord: t.coord, log: silentLogger, instanceId: 'another-instance', publication: t.mta.context.transport.publication });
    expect(await job.run()).toMatchObject({ leader: true, outcomes: [{ domain: 'sender.test', action: 'waiting-overlap' }] });
    expect(await other.run()).toEqual({ leader: false, outcomes: [] }); // only the leader acts

    t.clock.advance(47 * H);
    await publish([txt('old1._domainkey', active.dnsValue), txt(`${pending.selector}._domainkey`, pending.dnsValue)]);
    expect((await job.run()).outcomes).toEqual([expect.objectContaining({ action: 'waiting-overlap' })]);
    expect((await sendAndVerify(2)).selector).toBe('old1');

    // Overlap over, but the record is gone again: not activated.
    await publish([txt('old1._domainkey', active.dnsValue)]);
    t.clock.advance(2 * H);
    expect((await job.run()).outcomes).toEqual([expect.objectContaining({ action: 'waiting-dns', detail: 'missing' })]);
    // A record with another key is a mismatch: still not activated.
    await publish([txt('old1._domainkey', active.dnsValue), txt(`${pending.selector}._domainkey`, active.dnsValue)]);
    expect((await job.run()).outcomes).toEqual([expect.objectContaining({ action: 'waiting-dns', detail: 'mismatch' })]);
    expect((await sendAndVerify(3)).selector).toBe('old1');

    await publish([txt('old1._domainkey', active.dnsValue), txt(`${pending.selector}._domainkey`, pending.dnsValue)]);
    expect((await job.run()).outcomes).toEqual([{ domain: 'sender.test', selector: pending.selector, action: 'activated' }]);
    const after = await sendAndVerify(4);
    expect(after).toEqual({ selector: pending.selector, result: ['pass'] });
    // The message signed before still verifies against the selector it names.
    expect(await dkimpyVerify(sink.messages[0]!.data, dns)).toEqual(['pass']);

    // Forced activation skips the DNS check; without force an unpublished key is refused.
    const rot2 = (await t.call('POST', '/dkim/sender.test/rotate')).body.data;
    const refused = await t.call('POST', '/dkim/sender.test/activate');
    expect(refused.status).toBe(409);
    expect(refused.body.error.data.reason).toBe('dkim_record_not_published');
    const forced = await t.call('POST', '/dkim/sender.test/activate', { force: true });
    expect(forced.body).toEqual({ data: { domain: 'sender.test', selector: rot2.selector, activated: true, forced: true } });
    listed = (await t.call('GET', '/dkim')).body.data.find((k: any) => k.domain === 'sender.test');
    expect(listed).toMatchObject({ selector: rot2.selector, pending: null, published: 'missing' });
    expect((await t.call('POST', '/dkim/sender.test/activate', {})).status).toBe(404);
  }, 120_000);

  it('recommends rotating a key older than 180 days', async () => {
    t.clock.advance(181 * 24 * H);
    const r = await t.mta.context.transport.rotation.run();
    expect(r.outcomes).toContainEqual(expect.objectContaining({ domain: 'sender.test', action: 'rotation-recommended' }));
    const listed = (await t.call('GET', '/dkim')).body.data.find((k: any) => k.domain === 'sender.test');
    expect(listed).toMatchObject({ rotationRecommended: true, ageDays: 181 });
  });
});

describe('GET /domains/:domain/records and /check', () => {
  it('lists each record with its value and reports ok, missing and mismatch, TLSA syntax included', async () => {
    const records = (await t.call('GET', '/domains/sender.test/records')).body.data as any[];
    const byKind = Object.fromEntries(records.map((r) => [r.kind, r]));
    expect(byKind.spf).toMatchObject({ name: 'sender.test', type: 'TXT', value: 'v=spf1 ip4:127.0.0.2 ip4:127.0.0.3 ip4:127.0.0.4 ~all' });
    expect(byKind['tls-rpt']).toMatchObject({ name: '_smtp._tls.sender.test', value: 'v=TLSRPTv1; rua=mailto:tlsrpt@sender.test' });
    expect(byKind['mta-sts'].value).toMatch(/^v=STSv1; id=[0-9a-f]{8}$/);
    expect(byKind['mta-sts-policy']).toMatchObject({ name: 'https://mta-sts.sender.test/.well-known/mta-sts.txt', type: 'HTTPS' });
    expect(byKind['return-path']).toMatchObject({ name: 'bounces.sender.test', type: 'MX', value: '10 mta1.example.test' });
    expect(byKind.dkim.name).toMatch(/\._domainkey\.sender\.test$/);

    await publish([
      txt(byKind.dkim.name, byKind.dkim.value),
      txt('@', 'v=spf1 ip4:10.1.2.3 -all'), // mismatch: our IPs are missing
      txt('_mta-sts', byKind['mta-sts'].value),
      txt('_smtp._tls', byKind['tls-rpt'].value),
      { name: '_25._tcp.mx', type: 'TLSA', value: `3 1 1 ${'ab'.repeat(32)}` },
      { name: '_25._tcp.mx', type: 'TLSA', value: `3 1 2 ${'cd'.repeat(32)}` }, // SHA-512 needs 64 bytes
    ]);
    await dns.setRecords('bounces.sender.test', [{ name: '@', type: 'MX', value: '10 mta1.example.test' }]);
    const checked = (await t.call('GET', '/domains/sender.test/check')).body.data as any[];
    const state = (kind: string) => checked.filter((c) => c.kind === kind).map((c) => c.state);
    expect(state('dkim')).toEqual(['ok']);
    expect(state('spf')).toEqual(['mismatch']);
    expect(checked.find((c) => c.kind === 'spf').found).toEqual(['v=spf1 ip4:10.1.2.3 -all']);
    expect(state('dmarc')).toEqual(['missing']);
    expect(state('mta-sts')).toEqual(['ok']);
    expect(state('mta-sts-policy')).toEqual(['missing']); // no policy host in this zone
    expect(state('tls-rpt')).toEqual(['ok']);
    expect(state('return-path')).toEqual(['ok']);
    const tlsa = checked.filter((c) => c.kind === 'tlsa');
    expect(tlsa.map((c) => [c.value.slice(0, 5), c.state])).toEqual(
      expect.arrayContaining([
        ['3 1 1', 'ok'],
        ['3 1 2', 'mismatch'],
      ]),
    );
    expect(tlsa.find((c) => c.state === 'mismatch').problem).toMatch(/64 bytes/);
  }, 60_000);
});
