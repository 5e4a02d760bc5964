/**
 * The sending-address audit against knotd (the real zone names) and loopback SMTP sinks for
 * the egress probe (one answers, one refuses, one never answers): every verdict path, the
 * removal assistant, the recent run served again, feeds skipped without their credential and
 * used with it, the /24 neighbourhood, provider notes, and master auth on all three routes.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryCoordination } from '../../../src/shared/coord/memory.js';
import { SafeHttpClient } from '../../../src/shared/net/client.js';
import { createLookup, resolverLookup } from '../../../src/shared/net/resolve.js';
import { DEFAULT_POLICY } from '../../../src/mta/policy.js';
import { parsePools } from '../../../src/mta/pools.js';
import { AddressAudit } from '../../../src/mta/reputation/audit.js';
import { PROVIDER_NOTES } from '../../../src/mta/reputation/data.js';
import { DnsblResolver } from '../../../src/mta/reputation/dnsbl.js';
import { findFreePort, startDnsServer, startSilentResolver, type DnsServer } from '../../harness/dns.js';
import { startHttpReceiver, type HttpReceiver } from '../../harness/http-receiver.js';
import { startSmtpSink, type SmtpSink } from '../../harness/smtp-sink.js';
import { startMta, type TestMta } from '../helpers.js';
import { a } from './zones.js';

const POOLS = 'transactional:127.0.0.2@mta1.example.test;campaign:127.0.0.3@mta2.example.test,127.0.0.4@mta3.example.test,127.0.1.5@mta4.example.test,127.0.2.6@mta5.example.test';
const policy = { ...DEFAULT_POLICY, reputation: { ...DEFAULT_POLICY.reputation, queryTimeoutMs: 150, probeTimeoutMs: 400 } };
const DQS_KEY = 'dqskey0123456789';

let dns: DnsServer;
let open: SmtpSink;
let hang: SmtpSink;
let refusedPort: number;
let abuse: HttpReceiver;
let t: TestMta;

beforeAll(async () => {
  const neighbours = Array.from({ length: 254 }, (_, i) => i + 1).filter((x) => x !== 6).flatMap((x) => a(`127.0.2.${x}`, '127.0.0.2'));
  dns = await startDnsServer({
    zones: {
      'zen.spamhaus.org': [...a('127.0.0.3', '127.0.0.2', '127.0.0.10'), ...a('127.0.0.4', '127.255.255.254'), ...a('127.0.1.5', '127.0.0.9'), ...neighbours],
      'b.barracudacentral.org': a('127.0.0.3', '127.0.0.2'),
      'bl.spamcop.net': [],
      'psbl.surriel.com': [],
      'all.s5h.net': [],
      'ix.dnsbl.manitu.net': [],
      [`${DQS_KEY}.zen.dq.spamhaus.net`]: a('127.0.0.2', '127.0.0.3'),
      '0.0.127.in-addr.arpa': [{ name: '2', type: 'PTR', value: 'mta1.example.test' }],
      'example.test': [{ name: 'mta1', type: 'A', value: '127.0.0.2' }],
    },
  });
  open = await startSmtpSink({ name: 'mx.open.test' });
  hang = await startSmtpSink();
  hang.setConnectBehavior('hang');
  refusedPort = await findFreePort('127.0.0.1');
  abuse = await startHttpReceiver({ respond: () => ({ body: { data: { abuseConfidenceScore: 0 } } }) });
  t = await startMta({
    env: {
      MTA_POOLS: POOLS,
      DNS_SERVERS: dns.servers,
      AUDIT_PROBE_MX_HOSTS: [`127.0.0.1:${open.port}`, `127.0.0.1:${refusedPort}`, `127.0.0.1:${hang.port}`].join(','),
    },
    options: { policy },
  });
});
afterAll(async () => {
  await t?.close();
  await open?.close();
  await hang?.close();
  await abuse?.close();
  await dns?.stop();
});

const byIp = (entries: any[]) => Object.fromEntries(entries.map((e) => [e.ip, e]));

describe('POST /ip-audit/run and GET /ip-audit', () => {
  let first: any;
  it('gives every verdict path', async () => {
    expect((await t.call('GET', '/ip-audit')).body.data).toEqual({ at: null, fresh: false, entries: [] });
    const r = await t.call('POST', '/ip-audit/run');
    expect(r.status).toBe(200);
    first = r.body.data;
    expect(first.fresh).toBe(true);
    const e = byIp(first.entries);

    // The egress probe: the sink's greeting counts, the refusing and the silent hosts do not.
    expect(e['127.0.0.2'].egress.map((p: any) => p.state)).toEqual(['open', 'refused', 'timeout']);
    expect(open.sessions.some((s) => s.remoteAddress === '127.0.0.3')).toBe(true); // probed from the sending IP

    expect(e['127.0.0.2']).toMatchObject({ verdict: 'clean', lowConfidence: false, listings: [], reverseDns: { status: 'confirmed', ehloAligned: true } });
    expect(e['127.0.0.2'].neighbourhood).toMatchObject({ sampled: 8, listed: 0, prefix: '127.0.0.0/24' });

    const listed = e['127.0.0.3'];
    expect(listed.verdict).toBe('action_required');
    expect(listed.headline).toContain('zen.spamhaus.org (PBL, SBL)');
    const zen = listed.listings.find((l: any) => l.zone === 'zen.spamhaus.org');
    expect(zen).toMatchObject({ kind: 'critical', code: '127.0.0.10', lists: ['PBL', 'SBL'].sort(), removalUrl: 'https://check.spamhaus.org/' });
    expect(zen.assistant.removalUrl).toBe('https://check.spamhaus.org/');
    expect(zen.assistant.likelyCause[0]).toMatch(/no sending from this address recently/);
    expect(zen.assistant.requestText).toContain('127.0.0.3');
    expect(zen.assistant.delistingPath).toContain('https://check.spamhaus.org/');
    expect(listed.listings.find((l: any) => l.zone === 'b.barracudacentral.org')).toMatchObject({ kind: 'warning', removalUrl: 'https://www.barracudacentral.org/rbl/removal-request' });

    // A refusing resolver (reserved code) is never clean: re-run, low confidence.
    expect(e['127.0.0.4']).toMatchObject({ verdict: 'action_required', lowConfidence: true, listings: [] });
    expect(e['127.0.0.4'].nextAction).toMatch(/re-run/);
    expect(e['127.0.0.4'].blocklists[0]).toMatchObject({ zone: 'zen.spamhaus.org', state: 'unknown' });

    expect(e['127.0.1.5']).toMatchObject({ verdict: 'unusable' });
    expect(e['127.0.1.5'].headline).toMatch(/DROP/);

    // Most of the /24 is listed.
    expect(e['127.0.2.6'].neighbourhood).toMatchObject({ sampled: 8, listed: 8, prefix: '127.0.2.0/24' });
    expect(e['127.0.2.6']).toMatchObject({ verdict: 'unusable', listings: [] });

    // Feeds without their credential are skipped: no entry, no warning.
    for (const x of first.entries) expect(x.blocklists.map((b: any) => b.kind)).not.toContain('feed');
    expect(abuse.requests).toHaveLength(0);
    // The audit never quarantines.
    expect(await t.mta.context.state.ipStatus.blocked()).toEqual({});
  });

  it('serves the recent run instead of probing again, until it is older than auditFreshMs', async () => {
    const sessions = open.sessions.length;
    const again = (await t.call('POST', '/ip-audit/run')).body.data;
    expect(again).toMatchObject({ fresh: false, at: first.at });
    expect(open.sessions.length).toBe(sessions);
    expect((await t.call('GET', '/ip-audit')).body.data.entries).toHaveLength(5);
    t.clock.advance(policy.reputation.auditFreshMs + 1);
    const later = (await t.call('POST', '/ip-audit/run')).body.data;
    expect(later.fresh).toBe(true);
    expect(later.at).not.toBe(first.at);
  });

  it('asks for the master key on all three routes', async () => {
    for (const [m, p] of [['GET', '/ip-audit'], ['POST', '/ip-audit/run'], ['GET', '/ip-audit/provider-note/aws']] as const) {
      const r = await t.call(m, p, undefined, null);
      expect(r.status).toBe(401);
      expect(r.body.error.category).toBeTypeOf('string');
    }
  });
});

describe('egress and credential-gated feeds', () => {
  it('an address with no reachable MX on 25 is unusable; feeds with credentials are asked, the DQS key never shown', async () => {
    const coord = new MemoryCoordination({ clock: t.clock });
    const resolver = new DnsblResolver({ servers: [dns.servers], clock: t.clock, policy: policy.reputation, sleep: async () => {} });
    abuse.setResponder(() => ({ body: { data: { abuseConfidenceScore: 35 } } }));
    const audit = new AddressAudit({
      coord,
      clock: t.clock,
      pools: parsePools('transactional:127.0.0.2@mta1.example.test'),
      resolver,
      policy: policy.reputation,
      dnsServers: [dns.servers],
      zones: { critical: 'zen.spamhaus.org', warning: [], further: [] },
      feeds: {
        dqsKey: DQS_KEY,
        dqsZone: 'zen.dq.spamhaus.net',
        abuseIpdbKey: 'abuse-key',
        abuseIpdbUrl: `${abuse.url}/api/v2/check`,
        http: new SafeHttpClient({ allowHosts: ['127.0.0.1'], lookup: createLookup([dns.servers]) }),
      },
      probeHosts: [`127.0.0.1:${refusedPort}`, `127.0.0.1:${hang.port}`],
      lookup: createLookup([dns.servers]),
      recent: async () => ({ day: { sent: 900, bounced: 100 }, week: { sent: 1000, bounced: 100 } }),
    });
    const { run } = await audit.run();
    const [e] = run.entries;
    expect(e!.egress.map((p) => p.state)).toEqual(['refused', 'timeout']);
    expect(e!.verdict).toBe('unusable');
    expect(e!.headline).toMatch(/TCP\/25 is blocked/);
    const feeds = e!.blocklists.filter((b) => b.kind === 'feed');
    expect(feeds.map((f) => [f.zone, f.state])).toEqual([
      ['zen.dq.spamhaus.net', 'listed'],
      ['abuseipdb.com', 'listed'],
    ]);
    expect(JSON.stringify(run)).not.toContain(DQS_KEY);
    expect(abuse.requests[0]!.headers.key).toBe('abuse-key');
    expect(abuse.requests[0]!.url).toContain('ipAddress=127.0.0.2');
    const dqs = e!.listings.find((l) => l.zone === 'zen.dq.spamhaus.net')!;
    expect(dqs.lists).toEqual(['CSS']);
    // Likely cause from our own metrics: 10 % bounces and a volume spike.
    expect(dqs.assistant.likelyCause.join(' | ')).toMatch(/bounce rate 10\.0%/);
    expect(dqs.assistant.likelyCause.join(' | ')).toMatch(/volume spike/);
  });
});

describe('a resolver that fails (SERVFAIL) is never clean and never blocks port 25', () => {
  // Every other answer is clean: only the failing lookup stands between each address and `clean`.
  let broken: DnsServer;
  beforeAll(async () => {
    broken = await startDnsServer({
      zones: {
        'zen.spamhaus.org': [],
        '3.0.127.in-addr.arpa': [{ name: '2', type: 'PTR', value: 'mta1.example.test' }],
        'example.test': [{ name: 'mta1', type: 'A', value: '127.0.3.2' }],
      },
      // PTRs of 127.0.0.x; the first /24 neighbour sampled for 127.0.3.2 (127.0.3.34); the probe hosts' zone.
      servfailZones: ['0.0.127.in-addr.arpa', '34.3.0.127.zen.spamhaus.org', 'probe.test'],
    });
  });
  afterAll(() => broken?.stop());

  const auditOf = async (pool: string, probeHosts: string[], servers = [broken.servers]) => {
    const audit = new AddressAudit({
      coord: new MemoryCoordination({ clock: t.clock }),
      clock: t.clock,
      pools: parsePools(pool),
      resolver: new DnsblResolver({ servers, clock: t.clock, policy: policy.reputation, sleep: async () => {} }),
      policy: policy.reputation,
      dnsServers: servers,
      zones: { critical: 'zen.spamhaus.org', warning: [], further: [] },
      feeds: { dqsZone: 'zen.dq.spamhaus.net', abuseIpdbUrl: 'http://127.0.0.1:1/' },
      probeHosts,
      lookup: resolverLookup(servers, { timeoutMs: policy.reputation.queryTimeoutMs, tries: 1 }),
      recent: async () => ({ day: {}, week: {} }),
    });
    return (await audit.run()).run.entries[0]!;
  };

  it('a reverse-DNS lookup failure asks for a re-run', async () => {
    const e = await auditOf('transactional:127.0.0.2@mta1.example.test', [`127.0.0.1:${open.port}`]);
    expect(e.reverseDns.status).toBe('unknown');
    expect(e.blocklists.map((b) => b.state)).toEqual(['clean']);
    expect(e.neighbourhood).toMatchObject({ sampled: 8, listed: 0, unknown: 0 });
    expect(e).toMatchObject({ verdict: 'action_required', lowConfidence: true, headline: 'reverse DNS unknown' });
    expect(e.nextAction).toMatch(/re-run the audit/);
  });

  it('a /24 sample lookup failure asks for a re-run', async () => {
    const e = await auditOf('transactional:127.0.3.2@mta1.example.test', [`127.0.0.1:${open.port}`]);
    expect(e.reverseDns).toMatchObject({ status: 'confirmed', ehloAligned: true });
    expect(e.neighbourhood).toMatchObject({ sampled: 8, listed: 0, unknown: 1, prefix: '127.0.3.0/24' });
    expect(e).toMatchObject({ verdict: 'action_required', lowConfidence: true });
    expect(e.headline).toBe('1 of 8 sampled neighbours in 127.0.3.0/24 unknown');
    expect(e.nextAction).toMatch(/re-run the audit/);
  });

  it('probe host names that do not resolve are a resolver problem, not `TCP/25 blocked`', async () => {
    const e = await auditOf('transactional:127.0.3.2@mta1.example.test', [`mx1.probe.test:${open.port}`, `mx2.probe.test:${open.port}`]);
    expect(e.egress).toEqual([
      { host: `mx1.probe.test:${open.port}`, state: 'unresolved' },
      { host: `mx2.probe.test:${open.port}`, state: 'unresolved' },
    ]);
    expect(e.verdict).toBe('action_required');
    expect(e.headline).toMatch(/^outbound TCP\/25 not checked: mx1\.probe\.test:\d+, mx2\.probe\.test:\d+ did not resolve$/);
    expect(e.nextAction).toMatch(/DNS_SERVERS.*re-run the audit/);
    // One reachable host is enough: the unresolved one does not lower the verdict.
    const mixed = await auditOf('transactional:127.0.3.2@mta1.example.test', [`mx1.probe.test:${open.port}`, `127.0.0.1:${refusedPort}`]);
    expect(mixed.egress.map((p) => p.state)).toEqual(['unresolved', 'refused']);
    expect(mixed.verdict).toBe('action_required');
    expect(mixed.headline).toMatch(/did not resolve/);
  });

  it('a resolver that never answers (timeouts) gives a re-run, not `unusable`', async () => {
    const silent = await startSilentResolver();
    try {
      const e = await auditOf('transactional:127.0.3.2@mta1.example.test', [`mx1.probe.test:${open.port}`], [silent.servers]);
      expect(e.egress.map((p) => p.state)).toEqual(['unresolved']);
      expect(e.reverseDns.status).toBe('unknown');
      expect(e.neighbourhood).toMatchObject({ sampled: 8, unknown: 8 });
      expect(e).toMatchObject({ verdict: 'action_required', lowConfidence: true });
      expect(e.nextAction).toMatch(/re-run the audit/);
      expect(silent.queries()).toBeGreaterThan(0);
    } finally {
      await silent.close();
    }
  });
});

describe('GET /ip-audit/provider-note/:provider', () => {
  it('covers the providers, dated, with aliases; an unknown one is a 404 in the envelope', async () => {
    for (const p of ['aws', 'gcp', 'azure', 'digitalocean', 'hetzner', 'ovh', 'linode', 'vultr', 'oracle', 'scaleway', 'upcloud']) {
      const r = await t.call('GET', `/ip-audit/provider-note/${p}`);
      expect(r.status).toBe(200);
      expect(r.body.data).toMatchObject({ provider: p, checked: '2026-11-25' });
      expect(['open', 'open_after_tenure', 'blocked']).toContain(r.body.data.port25);
    }
    expect(Object.keys(PROVIDER_NOTES)).toHaveLength(11);
    expect((await t.call('GET', '/ip-audit/provider-note/Akamai')).body.data.provider).toBe('linode');
    const missing = await t.call('GET', '/ip-audit/provider-note/constructor');
    expect(missing.status).toBe(404);
    expect(missing.body.error).toMatchObject({ category: 'not_found', data: { reason: 'provider_unknown' } });
  });
});
