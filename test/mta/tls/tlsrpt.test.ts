/**
 * TLS-RPT (RFC 8460): a day of mixed results becomes one report per policy domain that
 * publishes `_smtp._tls`, valid against the RFC's JSON schema (a file in the fixtures),
 * gzipped and POSTed to a loopback HTTPS receiver trusted through the test CA; only the
 * lease holder sends. knotd serves the TLS-RPT records.
 */
import { readFileSync } from 'node:fs';
import { gunzipSync } from 'node:zlib';
import { Ajv } from 'ajv';
import addFormatsModule from 'ajv-formats';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../../src/shared/clock.js';
import { MemoryCoordination } from '../../../src/shared/coord/memory.js';
import { silentLogger } from '../../../src/shared/log.js';
import { TlsRptJob } from '../../../src/mta/tls/report-job.js';
import { TlsRptRecorder, parseTlsRptRecord } from '../../../src/mta/tls/tlsrpt.js';
import { createTestDatabase, type TestDatabase } from '../../harness/db.js';
import { findFreePort, startDnsServer, type DnsServer } from '../../harness/dns.js';
import { startHttpReceiver, type HttpReceiver } from '../../harness/http-receiver.js';
import { createTestCa } from '../../harness/tls.js';

const fixture = (name: string) => JSON.parse(readFileSync(new URL(`../../fixtures/tlsrpt/${name}`, import.meta.url), 'utf8'));
// ajv-formats is CommonJS with a default export; under NodeNext it arrives wrapped (as in src/shared/http.ts).
const addFormats = ((addFormatsModule as unknown as { default?: (a: Ajv) => Ajv }).default ?? addFormatsModule) as unknown as (a: Ajv) => Ajv;
const ajv = new Ajv({ allErrors: true, strict: true });
addFormats(ajv);
const validate = ajv.compile(fixture('rfc8460-report.schema.json'));

const DAY = Date.UTC(2026, 10, 24, 9, 0, 0);
const clock = new ManualClock(DAY);
let db: TestDatabase;
let dns: DnsServer;
let receiver: HttpReceiver;
let caCert: string;

beforeAll(async () => {
  db = await createTestDatabase();
  const certs = await createTestCa({ dnsNames: ['reports.rcv.test'], ips: [] });
  caCert = certs.caCert;
  const port = await findFreePort('127.0.41.2');
  receiver = await startHttpReceiver({ host: '127.0.41.2', port, tls: { key: certs.key, cert: certs.cert } });
  dns = await startDnsServer({
    zones: {
      'rcv.test': [{ name: 'reports', type: 'A', value: '127.0.41.2' }],
      'reported.test': [{ name: '_smtp._tls', type: 'TXT', value: `v=TLSRPTv1; rua=https://reports.rcv.test:${port}/tlsrpt` }],
      'silent.test': [{ name: 'mx', type: 'A', value: '127.0.41.9' }],
    },
  });
}, 120_000);

afterAll(async () => {
  await Promise.all([receiver?.close(), dns?.stop()]);
  await db?.drop();
});

function job(instanceId: string, coord: MemoryCoordination): TlsRptJob {
  return new TlsRptJob({
    db: db.pool,
    clock,
    coord,
    log: silentLogger,
    instanceId,
    dnsServers: [dns.servers],
    organizationName: 'Lettermill Test',
    contact: 'tlsrpt@sender.test',
    ca: caCert,
    allowHosts: ['reports.rcv.test'],
  });
}

describe('TLS-RPT records', () => {
  it('parses rua endpoints and ignores other records', () => {
    expect(parseTlsRptRecord([['v=TLSRPTv1; rua=mailto:a@b.test,https://r.test/x']])).toEqual(['mailto:a@b.test', 'https://r.test/x']);
    expect(parseTlsRptRecord([['v=spf1 -all']])).toBeNull();
    expect(parseTlsRptRecord([])).toBeNull();
  });

  it('the schema accepts the RFC 8460 example (the schema itself is right)', () => {
    expect(validate(fixture('rfc8460-example.json')), JSON.stringify(validate.errors)).toBe(true);
  });
});

describe('the daily report job', () => {
  it('sends one valid, gzipped report per domain with _smtp._tls, only from the leader, once', async () => {
    const rec = new TlsRptRecorder({ db: db.pool, clock, log: silentLogger });
    await db.pool.query(
      `INSERT INTO mta_sts_policies (domain, policy_id, mode, mx, max_age, policy_text, fetched_at, checked_at, expires_at)
       VALUES ('reported.test', 'p1', 'enforce', '{mx.reported.test}', 86400, $1, $2, $2, $2)`,
      ['version: STSv1\r\nmode: enforce\r\nmx: mx.reported.test\r\nmax_age: 86400\r\n', new Date(DAY)],
    );
    const sts = { policyDomain: 'reported.test', policyType: 'sts' as const, policyId: 'p1', mxHost: 'mx.reported.test', receivingIp: '127.0.41.5', sendingIp: '127.0.0.2' };
    await Promise.all([
      ...Array.from({ length: 7 }, () => rec.record({ ...sts, result: 'success' })),
      rec.record({ ...sts, result: 'certificate-expired', detail: 'CERT_HAS_EXPIRED' }),
      rec.record({ ...sts, result: 'certificate-expired', detail: 'CERT_HAS_EXPIRED' }),
      rec.record({ ...sts, result: 'starttls-not-supported', mxHost: 'mx2.reported.test', receivingIp: '127.0.41.6' }),
      rec.record({ policyDomain: 'reported.test', policyType: 'no-policy-found', result: 'success', mxHost: 'mx.reported.test' }),
      // A domain without _smtp._tls: recorded, never reported.
      rec.record({ policyDomain: 'silent.test', policyType: 'no-policy-found', result: 'starttls-not-supported', mxHost: 'mx.silent.test' }),
    ]);
    await rec.drain();
    // An MTA-STS row expired days ago: pruned by the job (a recently expired one is kept for its report).
    await db.pool.query(
      `INSERT INTO mta_sts_policies (domain, policy_id, mode, checked_at, expires_at, failure) VALUES ('gone.test', NULL, NULL, $1, $2, 'no-policy')`,
      [new Date(DAY - 4 * 86_400_000), new Date(DAY - 3 * 86_400_000)],
    );
    clock.set(DAY + 86_400_000); // the next day: the job reports yesterday

    const coord = new MemoryCoordination({ clock });
    const leader = await job('a', coord).run();
    const follower = await job('b', coord).run();
    expect(follower).toEqual({ day: '2026-11-24', leader: false, outcomes: [] });
    expect(leader.leader).toBe(true);
    expect(leader.outcomes).toEqual([expect.objectContaining({ domain: 'reported.test', status: 'sent' })]);

    const [req] = await receiver.waitFor(1);
    expect(receiver.requests).toHaveLength(1);
    expect(req.method).toBe('POST');
    expect(req.url).toBe('/tlsrpt');
    expect(req.headers['content-type']).toBe('application/tlsrpt+gzip');
    const report = JSON.parse(gunzipSync(req.rawBody).toString('utf8'));
    expect(validate(report), JSON.stringify(validate.errors)).toBe(true);
    expect(report['date-range']).toEqual({ 'start-datetime': '2026-11-24T00:00:00Z', 'end-datetime': '2026-11-24T23:59:59Z' });
    const sts1 = report.policies.find((p: { policy: { 'policy-type': string } }) => p.policy['policy-type'] === 'sts');
    expect(sts1.policy).toEqual({
      'policy-type': 'sts',
      'policy-string': ['version: STSv1', 'mode: enforce', 'mx: mx.reported.test', 'max_age: 86400'],
      'policy-domain': 'reported.test',
      'mx-host': ['mx.reported.test'],
    });
    expect(sts1.summary).toEqual({ 'total-successful-session-count': 7, 'total-failure-session-count': 3 });
    expect(sts1['failure-details']).toContainEqual({
      'result-type': 'certificate-expired',
      'sending-mta-ip': '127.0.0.2',
      'receiving-mx-hostname': 'mx.reported.test',
      'receiving-ip': '127.0.41.5',
      'failed-session-count': 2,
      'failure-reason-code': 'CERT_HAS_EXPIRED',
    });
    const none = report.policies.find((p: { policy: { 'policy-type': string } }) => p.policy['policy-type'] === 'no-policy-found');
    expect(none.summary).toEqual({ 'total-successful-session-count': 1, 'total-failure-session-count': 0 });

    expect((await db.pool.query(`SELECT domain FROM mta_sts_policies ORDER BY domain`)).rows).toEqual([{ domain: 'reported.test' }]);

    // The leader running again (a restart, or the route) does not send the day twice.
    const again = await job('a', coord).run();
    expect(again.outcomes).toEqual([expect.objectContaining({ domain: 'reported.test', status: 'already-sent' })]);
    expect(receiver.requests).toHaveLength(1);
  });
});
