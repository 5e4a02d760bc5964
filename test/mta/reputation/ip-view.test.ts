/**
 * GET /ip-reputation/:ip, the full view of one sending address, against knotd on loopback:
 * identity readiness asked of DNS at the request (PTR names, forward confirmation, the EHLO
 * name matching and resolving; a resolver that fails is `unknown`, never ready), the history
 * (block marks set and lifted by the monitor, the last audit's verdict, outcomes per UTC day),
 * the 404 envelope for an address that is not configured, and the view in the OpenAPI document.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_POLICY } from '../../../src/mta/policy.js';
import { findFreePort, startDnsServer, type DnsServer } from '../../harness/dns.js';
import { startMta, type TestMta } from '../helpers.js';
import { a } from './zones.js';

const POOLS = 'transactional:127.0.0.2@mta1.example.test;campaign:127.0.0.3@mta2.example.test,127.0.0.4@mta3.example.test,127.0.1.5@mta5.broken.test';
const policy = { ...DEFAULT_POLICY, reputation: { ...DEFAULT_POLICY.reputation, queryTimeoutMs: 150, probeTimeoutMs: 300 } };
const DAY = 86_400_000;
let dns: DnsServer;
let t: TestMta;

beforeAll(async () => {
  dns = await startDnsServer({
    zones: {
      'zen.spamhaus.org': [],
      'b.barracudacentral.org': [],
      'bl.spamcop.net': [],
      '0.0.127.in-addr.arpa': [
        { name: '2', type: 'PTR', value: 'mta1.example.test' },
        { name: '3', type: 'PTR', value: 'other.example.test' },
      ],
      'example.test': [
        { name: 'mta1', type: 'A', value: '127.0.0.2' },
        { name: 'other', type: 'A', value: '127.0.0.3' },
        { name: 'mta2', type: 'A', value: '127.0.0.9' },
      ],
    },
    // 127.0.1.5's PTR and its EHLO name: a resolver that fails.
    servfailZones: ['1.0.127.in-addr.arpa', 'broken.test'],
  });
  t = await startMta({
    env: { MTA_POOLS: POOLS, DNS_SERVERS: dns.servers, DNSBL_MONITOR: 'true', AUDIT_PROBE_MX_HOSTS: `127.0.0.1:${await findFreePort('127.0.0.1')}` },
    options: { policy, dnsblSleep: async () => {} },
  });
});
afterAll(async () => {
  await t?.close();
  await dns?.stop();
});

const view = async (ip: string) => {
  const r = await t.call('GET', `/ip-reputation/${ip}`);
  expect(r.status).toBe(200);
  return r.body.data;
};

describe('GET /ip-reputation/:ip', () => {
  it('identity readiness: PTR, forward confirmation and the EHLO name, asked of DNS now', async () => {
    const ready = await view('127.0.0.2');
    expect(ready.identity).toEqual({
      ehloName: 'mta1.example.test',
      status: 'confirmed',
      ptr: ['mta1.example.test'],
      forwardConfirmed: ['mta1.example.test'],
      ehloMatchesPtr: true,
      ehloResolves: true,
      ready: true,
      problems: [],
      checkedAt: new Date(t.clock.now()).toISOString(),
    });
    // No sweep has run: the list view's last-sweep reverse DNS has no answer yet, the identity has.
    expect(ready.reverseDns).toMatchObject({ status: 'unknown', observedAt: null });

    const other = await view('127.0.0.3');
    expect(other.identity).toMatchObject({ status: 'confirmed', ptr: ['other.example.test'], forwardConfirmed: ['other.example.test'], ehloMatchesPtr: false, ehloResolves: false, ready: false });
    expect(other.identity.problems).toEqual(['the EHLO name mta2.example.test is not the confirmed PTR name (other.example.test)', 'the EHLO name mta2.example.test does not resolve to 127.0.0.3']);

    const none = await view('127.0.0.4');
    expect(none.identity).toMatchObject({ status: 'missing', ptr: [], forwardConfirmed: [], ehloMatchesPtr: false, ehloResolves: false, ready: false });
    expect(none.identity.problems[0]).toBe('no PTR record for 127.0.0.4: set one (ideally mta3.example.test)');

    const broken = await view('127.0.1.5');
    expect(broken.identity).toMatchObject({ status: 'unknown', ehloMatchesPtr: null, ehloResolves: null, ready: false });
    expect(broken.identity.problems.join(' | ')).toMatch(/did not answer.*ask again/);
  });

  it('history: block marks set and lifted by the monitor, newest first, with the list view\'s fields', async () => {
    await dns.setRecords('zen.spamhaus.org', a('127.0.0.3', '127.0.0.2'));
    expect((await t.call('POST', '/ip-reputation/sweep')).status).toBe(200);
    const listedAt = new Date(t.clock.now()).toISOString();
    const listed = await view('127.0.0.3');
    expect(listed).toMatchObject({ eligible: false, block: { reason: 'dnsbl_listed', zone: 'zen.spamhaus.org' }, blockReasons: ['dnsbl_listed: zen.spamhaus.org'] });
    expect(listed.blocklist.zones[0]).toMatchObject({ zone: 'zen.spamhaus.org', state: 'listed', codes: ['127.0.0.2'], lists: ['SBL'] });

    t.clock.advance(15 * 60_000);
    await dns.setRecords('zen.spamhaus.org', []);
    expect((await t.call('POST', '/ip-reputation/sweep')).status).toBe(200);
    const delisted = await view('127.0.0.3');
    expect(delisted).toMatchObject({ eligible: true, block: null, blockReasons: [] });
    // Whether never-observed addresses are marked is the monitor's policy: only the listing is asserted.
    expect(delisted.history.marks.filter((m: { reason: string }) => m.reason === 'dnsbl_listed')).toEqual([
      { at: new Date(t.clock.now()).toISOString(), action: 'unblocked', reason: 'dnsbl_listed', zone: 'zen.spamhaus.org' },
      { at: listedAt, action: 'blocked', reason: 'dnsbl_listed', zone: 'zen.spamhaus.org' },
    ]);
    expect((await view('127.0.0.2')).history.marks.filter((m: { reason: string }) => m.reason === 'dnsbl_listed')).toEqual([]);
    // An identity exclusion a sweep set (no PTR for 127.0.0.4) is in the history too.
    expect((await view('127.0.0.4')).history.marks).toEqual([{ at: listedAt, action: 'blocked', reason: 'ptr_missing', zone: null }]);
  });

  it('history: the last audit verdict and the outcomes of the last 7 UTC days', async () => {
    expect((await view('127.0.0.2')).history.audit).toBeNull();
    const run = await t.call('POST', '/ip-audit/run');
    const entry = run.body.data.entries.find((e: { ip: string }) => e.ip === '127.0.0.2');
    expect((await view('127.0.0.2')).history.audit).toEqual({ at: entry.at, verdict: entry.verdict, lowConfidence: entry.lowConfidence, headline: entry.headline, nextAction: entry.nextAction });

    const now = t.clock.now();
    const row = (status: 'sent' | 'bounced' | 'deferred', at: number, n: number) =>
      t.mta.context.stores.logs.append({ messageId: `view-${status}-${at}-${n}`, jobId: null, organizationId: 'org-view', recipient: 'r@dest.example', domain: 'dest.example', pool: 'transactional', ip: '127.0.0.2', status, at });
    await Promise.all([row('sent', now, 1), row('sent', now, 2), row('deferred', now, 3), row('bounced', now - DAY, 1), row('sent', now - 6 * DAY, 1), row('sent', now - 7 * DAY, 1)]);
    const day = (t: number) => new Date(t).toISOString().slice(0, 10);
    expect((await view('127.0.0.2')).history.days).toEqual([
      { day: day(now - 6 * DAY), outcomes: { sent: 1 } },
      { day: day(now - DAY), outcomes: { bounced: 1 } },
      { day: day(now), outcomes: { sent: 2, deferred: 1 } },
    ]);
    expect((await view('127.0.0.3')).history.days).toEqual([]);
  });

  it('an address that is not configured is a 404 in the envelope', async () => {
    for (const ip of ['10.0.0.1', 'not-an-ip']) {
      const r = await t.call('GET', `/ip-reputation/${ip}`);
      expect(r.status).toBe(404);
      expect(r.body).toEqual({ error: { message: `${ip} is not a configured sending IP`, category: 'not_found', data: { reason: 'ip_not_configured' } } });
    }
  });

  it('is published in the OpenAPI document with its identity and history', async () => {
    const doc = (await t.call('GET', '/openapi.json')).body;
    const schema = doc.paths['/ip-reputation/{ip}'].get.responses['200'].content['application/json'].schema.properties.data;
    expect(Object.keys(schema.properties)).toEqual(expect.arrayContaining(['blockReasons', 'blocklist', 'reverseDns', 'warming', 'identity', 'history']));
    expect(Object.keys(schema.properties.identity.properties)).toEqual(['ehloName', 'status', 'ptr', 'forwardConfirmed', 'ehloMatchesPtr', 'ehloResolves', 'ready', 'problems', 'checkedAt']);
    expect(Object.keys(schema.properties.history.properties)).toEqual(['marks', 'audit', 'days']);
    expect(doc.paths['/ip-reputation/{ip}'].get.responses['404']).toBeDefined();
    // The list keeps its summary shape.
    const list = doc.paths['/ip-reputation'].get.responses['200'].content['application/json'].schema.properties.data.items;
    expect(list.properties.identity).toBeUndefined();
  });
});
