/**
 * Blocklist monitoring on a real MTA against knotd serving zen.spamhaus.org and the two
 * warning zones on loopback: never-observed addresses sending and reported `unknown` (decisions.md,
 * "Blocklist gating"), listing and delisting (each event once through the outbox), advisory
 * warning listings, `unknown` keeping the previous decision, emergency mode (503, jobs stay
 * queued, all_ips_blocked) and resumption, and the PTR identity check of select_ip.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Job } from '../../../src/shared/queue/types.js';
import type { MtaJobPayload } from '../../../src/mta/job.js';
import { DEFAULT_POLICY } from '../../../src/mta/policy.js';
import { selectIp } from '../../../src/mta/pipeline/08-select-ip.js';
import { resolvePool } from '../../../src/mta/pipeline/07-resolve-pool.js';
import { startDnsServer, type DnsServer } from '../../harness/dns.js';
import { startHttpReceiver, type HttpReceiver } from '../../harness/http-receiver.js';
import { ctxFor, emailJob, eventually, postedEvents, startMta, type TestMta } from '../helpers.js';
import { a } from './zones.js';

let dns: DnsServer;
let backend: HttpReceiver;
let t: TestMta;
const MIN = 60_000;
const fastPolicy = { ...DEFAULT_POLICY, reputation: { ...DEFAULT_POLICY.reputation, queryTimeoutMs: 150 } };

beforeAll(async () => {
  dns = await startDnsServer({
    zones: {
      'zen.spamhaus.org': [],
      'b.barracudacentral.org': [],
      'bl.spamcop.net': [],
      '0.0.127.in-addr.arpa': [
        { name: '2', type: 'PTR', value: 'mta1.example.test' },
        { name: '3', type: 'PTR', value: 'mta2.example.test' },
        { name: '4', type: 'PTR', value: 'mta3.example.test' },
      ],
      'example.test': [
        { name: 'mta1', type: 'A', value: '127.0.0.2' },
        { name: 'mta2', type: 'A', value: '127.0.0.3' },
        { name: 'mta3', type: 'A', value: '127.0.0.4' },
      ],
    },
  });
  backend = await startHttpReceiver();
  t = await startMta({
    env: { MTA_WEBHOOK_URL: backend.url, MTA_WEBHOOK_SECRET: 'rep-secret', DNS_SERVERS: dns.servers, DNSBL_MONITOR: 'true' },
    options: { policy: fastPolicy, dnsblSleep: async (ms) => t.clock.advance(ms) },
  });
});
afterAll(async () => {
  await t?.close();
  await backend?.close();
  await dns?.stop();
});

const events = (name: string) => postedEvents(backend.requests).filter((b) => b.event === name);
const sweep = async () => {
  const r = await t.call('POST', '/ip-reputation/sweep');
  expect(r.status).toBe(200);
  return r.body.data as { ip: string; quarantined: boolean; zones: { zone: string; state: string; codes: string[]; lists: string[] }[] }[];
};
const blocked = () => t.mta.context.state.ipStatus.blocked();
const monitor = () => t.mta.context.reputation.monitor;
/** Settles the outbox so "sent once" is checked after everything written was posted. */
const settle = () => new Promise((r) => setTimeout(r, 200));

async function pick(pool: 'campaign' | 'transactional') {
  const c = ctxFor(t, { ipPool: pool });
  await resolvePool.run(c);
  return { r: await selectIp.run(c), ip: c.ip?.address, viaRelay: c.viaRelay };
}

describe('blocklist monitoring', () => {
  it('a never-observed address sends and reads unknown, also across an unanswered sweep (Blocklist gating)', async () => {
    expect(await blocked()).toEqual({});
    const view = await t.call('GET', '/ip-reputation/127.0.0.2');
    expect(view.body.data).toMatchObject({ eligible: true, blocklist: { monitored: true, status: 'unknown' }, blockReasons: [] });
    expect(view.body.data.blocklist.zones[0]).toMatchObject({ zone: 'zen.spamhaus.org', severity: 'critical', state: 'unknown', observedAt: null });
    expect(await pick('transactional')).toMatchObject({ r: { type: 'continue' }, ip: '127.0.0.2' });
    expect((await t.call('POST', '/send', emailJob({ ipPool: 'transactional' }))).status).toBe(202);
    const metrics = async () => (await t.call('GET', '/metrics')).body as string;
    expect(await metrics()).toContain('mta_blocklist_status{ip="127.0.0.2",zone="zen.spamhaus.org",status="unknown"} 1');

    await dns.pause();
    try {
      const out = await sweep();
      expect(out.every((e) => !e.quarantined)).toBe(true);
      expect(out[0]!.zones.map((z) => z.state)).toEqual(['unknown', 'unknown', 'unknown']);
    } finally {
      dns.resume();
    }
    expect(await blocked()).toEqual({});
    expect(await monitor().snapshot('transactional')).toBe('dnsbl_unknown');
    expect(await pick('campaign')).toMatchObject({ r: { type: 'continue' } });
    const after = (await t.call('GET', '/ip-reputation')).body.data;
    expect(after.map((v: any) => [v.ip, v.eligible, v.blocklist.status, v.reverseDns.status])).toEqual([
      ['127.0.0.2', true, 'unknown', 'unknown'],
      ['127.0.0.3', true, 'unknown', 'unknown'],
      ['127.0.0.4', true, 'unknown', 'unknown'],
    ]);
    expect(await metrics()).toContain('mta_blocklist_status{ip="127.0.0.3",zone="zen.spamhaus.org",status="unknown"} 1');
    await settle();
    expect(events('all_ips_blocked')).toHaveLength(0);
  });

  it('a clean sweep records each observation with its time, and checks reverse DNS', async () => {
    t.clock.advance(MIN);
    const out = await sweep();
    expect(out.map((e) => e.quarantined)).toEqual([false, false, false]);
    expect(await blocked()).toEqual({});
    const view = (await t.call('GET', '/ip-reputation/127.0.0.2')).body.data;
    expect(view.eligible).toBe(true);
    expect(view.blocklist.status).toBe('clean');
    expect(view.blocklist.zones.map((z: any) => [z.zone, z.state])).toEqual([
      ['zen.spamhaus.org', 'clean'],
      ['b.barracudacentral.org', 'clean'],
      ['bl.spamcop.net', 'clean'],
    ]);
    expect(view.blocklist.zones[0].observedAt).toBe(new Date(t.clock.now()).toISOString());
    expect(view.reverseDns).toMatchObject({ status: 'confirmed', ptr: ['mta1.example.test'], ehloAligned: true });
    expect(await monitor().snapshot('campaign')).toBe('ok');
    await settle();
    expect(events('ip.blocklisted')).toHaveLength(0);
    expect(events('ip.delisted')).toHaveLength(0);
  });

  it('a critical listing quarantines the address and sends ip.blocklisted once', async () => {
    await dns.setRecords('zen.spamhaus.org', a('127.0.0.3', '127.0.0.2'));
    await Promise.all([sweep(), sweep()]); // concurrent requests share one sweep
    await sweep();
    expect((await blocked())['127.0.0.3']).toMatchObject({ reason: 'dnsbl_listed', zone: 'zen.spamhaus.org' });
    await settle();
    const ev = events('ip.blocklisted');
    expect(ev).toHaveLength(1);
    expect(ev[0]!.data).toMatchObject({ ip: '127.0.0.3', zone: 'zen.spamhaus.org', pools: ['campaign'], severity: 'critical', quarantined: true, codes: ['127.0.0.2'], lists: ['SBL'] });
    expect(await monitor().snapshot('campaign')).toBe('dnsbl_partial');
    expect((await t.call('GET', '/ip-reputation/pools')).body.data[1]).toMatchObject({ pool: 'campaign', state: 'dnsbl_partial', eligible: ['127.0.0.4'] });
    for (let i = 0; i < 3; i++) expect((await pick('campaign')).ip).toBe('127.0.0.4');
  });

  it('a warning-zone listing is advisory: an event, no quarantine', async () => {
    backend.reset();
    await dns.setRecords('bl.spamcop.net', a('127.0.0.4', '127.0.0.2'));
    const out = await sweep();
    expect(out.find((e) => e.ip === '127.0.0.4')!.quarantined).toBe(false);
    expect((await blocked())['127.0.0.4']).toBeUndefined();
    await settle();
    const ev = events('ip.blocklisted');
    expect(ev).toHaveLength(1);
    expect(ev[0]!.data).toMatchObject({ ip: '127.0.0.4', zone: 'bl.spamcop.net', severity: 'warning', quarantined: false });
    expect((await pick('campaign')).ip).toBe('127.0.0.4');
  });

  it('an unknown answer keeps the previous decision, both ways, and sends nothing', async () => {
    backend.reset();
    await dns.pause();
    try {
      await sweep();
    } finally {
      dns.resume();
    }
    const b = await blocked();
    expect(b['127.0.0.3']?.reason).toBe('dnsbl_listed');
    expect(b['127.0.0.4']).toBeUndefined();
    const zen = (await t.call('GET', '/ip-reputation/127.0.0.3')).body.data.blocklist.zones[0];
    expect(zen).toMatchObject({ state: 'unknown', cause: 'timeout', confirmed: 'listed' });
    await settle();
    expect(events('ip.blocklisted')).toHaveLength(0);
    expect(events('ip.delisted')).toHaveLength(0);
  });

  let queuedJob = '';
  it('every address of a pool ejected: /send answers 503, queued jobs wait without spending attempts, all_ips_blocked names addresses and zones', async () => {
    backend.reset();
    const accepted = await t.call('POST', '/send', emailJob({ ipPool: 'campaign', to: 'someone@halt.example' }));
    expect(accepted.status).toBe(202);
    queuedJob = accepted.body.data.jobId;
    await dns.setRecords('zen.spamhaus.org', [...a('127.0.0.3', '127.0.0.2'), ...a('127.0.0.4', '127.0.0.4')]);
    await sweep();
    expect(await monitor().snapshot('campaign')).toBe('dnsbl_listed');
    expect(await monitor().snapshot('transactional')).toBe('ok');
    const snap = (await t.call('GET', '/ip-reputation/pools')).body.data;
    expect(snap).toEqual([
      { pool: 'transactional', state: 'ok', eligible: ['127.0.0.2'], blocked: [], viaRelay: false },
      { pool: 'campaign', state: 'dnsbl_listed', eligible: [], blocked: ['127.0.0.3', '127.0.0.4'], viaRelay: false },
    ]);

    const refused = await t.call('POST', '/send', emailJob({ ipPool: 'campaign' }));
    expect(refused.status).toBe(503);
    expect(refused.body.error).toMatchObject({ category: 'unavailable', data: { reason: 'all_ips_blocked' } });
    expect((await t.call('POST', '/send', emailJob({ ipPool: 'transactional' }))).status).toBe(202);

    const claimed = await t.mta.context.queue.claim('rep-test', 100);
    const job = claimed.find((j) => j.id === queuedJob) as Job<MtaJobPayload>;
    for (const other of claimed) if (other !== job) await t.mta.context.queue.defer(other, 0, 'not this test');
    const calls = t.deliverer.calls.length;
    const outcome = await t.mta.handler!(job, { signal: new AbortController().signal });
    expect(outcome).toMatchObject({ type: 'defer' });
    await t.mta.context.queue.apply(job, outcome);
    const after = (await t.mta.context.queue.get(queuedJob))!;
    expect(after.state).toBe('pending');
    expect(after.attempts).toBe(0);
    expect(t.deliverer.calls.length).toBe(calls);

    const [ev] = await eventually(() => (events('all_ips_blocked').length ? events('all_ips_blocked') : null));
    expect(ev.data).toMatchObject({
      pool: 'campaign',
      measured: true,
      viaRelay: false,
      addresses: [
        { ip: '127.0.0.3', reason: 'dnsbl_listed', zone: 'zen.spamhaus.org' },
        { ip: '127.0.0.4', reason: 'dnsbl_listed', zone: 'zen.spamhaus.org' },
      ],
    });
    const events2 = events('ip.blocklisted');
    expect(events2.map((e) => e.data.ip)).toEqual(['127.0.0.4']);
    expect(events2[0]!.data.lists).toEqual(['XBL']);
  });

  it('delisting sends ip.delisted once per address and zone, and sending resumes by itself', async () => {
    backend.reset();
    await dns.setRecords('zen.spamhaus.org', []);
    await dns.setRecords('bl.spamcop.net', []);
    await sweep();
    await sweep();
    expect(await blocked()).toEqual({});
    await settle();
    const ev = events('ip.delisted').map((e) => `${e.data.ip} ${e.data.zone}`).sort();
    expect(ev).toEqual(['127.0.0.3 zen.spamhaus.org', '127.0.0.4 bl.spamcop.net', '127.0.0.4 zen.spamhaus.org']);
    expect((await t.call('POST', '/send', emailJob({ ipPool: 'campaign' }))).status).toBe(202);

    t.clock.advance(fastPolicy.noEligibleIpDeferMs + MIN);
    const claimed = await t.mta.context.queue.claim('rep-test', 100);
    const job = claimed.find((j) => j.id === queuedJob) as Job<MtaJobPayload>;
    expect(job, 'the held job is claimable again').toBeDefined();
    for (const other of claimed) if (other !== job) await t.mta.context.queue.defer(other, 0, 'not this test');
    const outcome = await t.mta.handler!(job, { signal: new AbortController().signal });
    expect(outcome).toEqual({ type: 'complete' });
    await t.mta.context.queue.apply(job, outcome);
    expect(t.deliverer.calls.at(-1)!.message.to).toBe('someone@halt.example');
  });

  it('select_ip readiness: a confirmed missing or mismatched PTR takes the address out, a failed lookup changes nothing, a fixed PTR readmits it', async () => {
    backend.reset();
    const arpa = '0.0.127.in-addr.arpa';
    const ptrs = dns.getRecords(arpa)!;
    // 127.0.0.4 loses its PTR; 127.0.0.3's PTR names a host that resolves elsewhere.
    await dns.setRecords(arpa, [ptrs[0]!, { name: '3', type: 'PTR', value: 'elsewhere.example.test' }]);
    await dns.setRecords('example.test', [...dns.getRecords('example.test')!, { name: 'elsewhere', type: 'A', value: '127.0.0.9' }]);
    t.clock.advance(fastPolicy.eventRepeatMs.all_ips_blocked + MIN); // the event is sent once per pool per period
    await sweep();
    expect(await blocked()).toMatchObject({ '127.0.0.3': { reason: 'ptr_mismatch' }, '127.0.0.4': { reason: 'ptr_missing' } });
    const view = (await t.call('GET', '/ip-reputation/127.0.0.4')).body.data;
    expect(view).toMatchObject({ eligible: false, blockReasons: ['ptr_missing'], reverseDns: { status: 'missing' } });
    expect(await pick('campaign')).toMatchObject({ r: { type: 'defer', reason: 'no_eligible_ip' } });
    expect(await pick('transactional')).toMatchObject({ r: { type: 'continue' }, ip: '127.0.0.2' });
    const [ev] = await eventually(() => (events('all_ips_blocked').length ? events('all_ips_blocked') : null));
    expect(ev.data).toMatchObject({ pool: 'campaign', measured: true, addresses: [{ ip: '127.0.0.3', reason: 'ptr_mismatch' }, { ip: '127.0.0.4', reason: 'ptr_missing' }] });
    expect((await t.call('POST', '/send', emailJob({ ipPool: 'campaign' }))).status).toBe(503);

    // The resolver fails: nothing is readmitted (and nothing new ejected).
    await dns.pause();
    try {
      await sweep();
    } finally {
      dns.resume();
    }
    expect(Object.keys(await blocked()).sort()).toEqual(['127.0.0.3', '127.0.0.4']);

    // 127.0.0.3 fixed; 127.0.0.4 also listed: the listing is the reason shown, and once it is
    // delisted the missing PTR still keeps it out.
    await dns.setRecords(arpa, [ptrs[0]!, ptrs[1]!]);
    await dns.setRecords('zen.spamhaus.org', a('127.0.0.4', '127.0.0.2'));
    await sweep();
    expect(await blocked()).toEqual({ '127.0.0.4': expect.objectContaining({ reason: 'dnsbl_listed' }) });
    expect((await pick('campaign')).ip).toBe('127.0.0.3');
    await dns.setRecords('zen.spamhaus.org', []);
    await sweep();
    expect(await blocked()).toEqual({ '127.0.0.4': expect.objectContaining({ reason: 'ptr_missing' }) });

    await dns.setRecords(arpa, ptrs);
    await sweep();
    expect(await blocked()).toEqual({});
  });

  it('with policy.reputation.requirePtr off, a missing PTR is reported and does not exclude', async () => {
    const m = await startMta({
      db: t.db,
      env: { MTA_WEBHOOK_URL: backend.url, MTA_WEBHOOK_SECRET: 'rep-secret', DNS_SERVERS: dns.servers, DNSBL_MONITOR: 'true' },
      options: { policy: { ...fastPolicy, reputation: { ...fastPolicy.reputation, requirePtr: false } } },
    });
    try {
      const arpa = '0.0.127.in-addr.arpa';
      const ptrs = dns.getRecords(arpa)!;
      await dns.setRecords(arpa, [ptrs[0]!]);
      try {
        expect((await m.call('POST', '/ip-reputation/sweep')).status).toBe(200);
      } finally {
        await dns.setRecords(arpa, ptrs);
      }
      expect(await m.mta.context.state.ipStatus.blocked()).toEqual({});
      expect((await m.call('GET', '/ip-reputation/127.0.0.4')).body.data).toMatchObject({ eligible: true, reverseDns: { status: 'missing' } });
    } finally {
      await m.close();
    }
  });
});
