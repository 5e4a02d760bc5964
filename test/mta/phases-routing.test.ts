/** Phases 7 (resolve_pool), 8 (select_ip), 9 (acquire_slot) and 10 (warming_cap), each outcome. */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { resolvePool } from '../../src/mta/pipeline/07-resolve-pool.js';
import { selectIp } from '../../src/mta/pipeline/08-select-ip.js';
import { acquireSlot } from '../../src/mta/pipeline/09-acquire-slot.js';
import { warmingCap } from '../../src/mta/pipeline/10-warming-cap.js';
import type { PipelineContext } from '../../src/mta/pipeline/index.js';
import { parsePools } from '../../src/mta/pools.js';
import { startHttpReceiver, type HttpReceiver } from '../harness/http-receiver.js';
import { ctxFor, eventually, postedEvents, startMta, type TestMta } from './helpers.js';

let t: TestMta;
let backend: HttpReceiver;
let n = 0;
const MIN = 60_000;
const HOUR = 60 * MIN;

beforeAll(async () => {
  backend = await startHttpReceiver();
  t = await startMta({ env: { MTA_WEBHOOK_URL: backend.url, MTA_WEBHOOK_SECRET: 'routing-secret', MTA_WARMED_IPS: '10.9.9.9' } });
});
afterAll(async () => {
  await t?.close();
  await backend?.close();
});
beforeEach(() => backend.reset());

const events = (name: string) => postedEvents(backend.requests).filter((b) => b.event === name);

async function route(over: Parameters<typeof ctxFor>[1] = {}): Promise<PipelineContext> {
  const c = ctxFor(t, over);
  expect(await resolvePool.run(c)).toEqual({ type: 'continue' });
  return c;
}

describe('resolve_pool', () => {
  it("takes the job's ipPool when the organization has no rule", async () => {
    expect((await route({ ipPool: 'campaign' })).pool).toBe('campaign');
    expect((await route({ ipPool: 'transactional' })).pool).toBe('transactional');
  });

  it("prefers the organization's pool rule, and carries its dedicated IP", async () => {
    const org = `org-pool-${++n}`;
    expect((await t.call('POST', '/pool-rules', { organizationId: org, pool: 'campaign' })).status).toBe(201);
    const c = await route({ organizationId: org, ipPool: 'transactional' });
    expect(c.pool).toBe('campaign');
    expect(c.dedicatedIp).toBeUndefined();
    await t.call('POST', '/pool-rules', { organizationId: org, pool: 'campaign', dedicatedIp: '127.0.0.4' });
    expect((await route({ organizationId: org })).dedicatedIp).toBe('127.0.0.4');
  });

  it('falls back to the default pool, then to the first configured pool', async () => {
    const onlyTx = { ...t.mta.pipeline, pools: parsePools('transactional:10.1.1.1@a.example.test') };
    const c = ctxFor(t, { ipPool: 'campaign' }, onlyTx);
    await resolvePool.run(c);
    expect(c.pool).toBe('transactional');
    const other = { ...t.mta.pipeline, pools: parsePools('bulk:10.1.1.2@b.example.test') };
    const d = ctxFor(t, { ipPool: 'campaign' }, other);
    await resolvePool.run(d);
    expect(d.pool).toBe('bulk');
  });
});

describe('select_ip', () => {
  const ipStatus = () => t.mta.context.state.ipStatus;
  afterAll(async () => {
    for (const ip of ['127.0.0.2', '127.0.0.3', '127.0.0.4']) await ipStatus().unblock(ip);
  });

  async function pick(over: Parameters<typeof ctxFor>[1] = {}) {
    const c = await route(over);
    const r = await selectIp.run(c);
    return { r, ip: c.ip?.address, ehlo: c.ip?.ehloName };
  }

  it('uses the only address of a one-address pool, with its EHLO name', async () => {
    expect(await pick({ ipPool: 'transactional' })).toEqual({ r: { type: 'continue' }, ip: '127.0.0.2', ehlo: 'mta1.example.test' });
  });

  it('goes round-robin over the eligible addresses of the pool', async () => {
    const seen = [];
    for (let i = 0; i < 6; i++) seen.push((await pick({ ipPool: 'campaign' })).ip);
    expect(seen.filter((ip) => ip === '127.0.0.3')).toHaveLength(3);
    expect(seen.filter((ip) => ip === '127.0.0.4')).toHaveLength(3);
    for (let i = 1; i < seen.length; i++) expect(seen[i]).not.toBe(seen[i - 1]);
  });

  it('skips a blocked address', async () => {
    await ipStatus().markBlocked('127.0.0.3', 'listed', 'zen.example');
    for (let i = 0; i < 4; i++) expect((await pick({ ipPool: 'campaign' })).ip).toBe('127.0.0.4');
    await ipStatus().unblock('127.0.0.3');
  });

  it('defers and emits all_ips_blocked (once per 15 minutes) when no address is eligible', async () => {
    await ipStatus().markBlocked('127.0.0.3', 'listed', 'zen.example');
    await ipStatus().markBlocked('127.0.0.4', 'manual');
    const a = await pick({ ipPool: 'campaign' });
    expect(a).toMatchObject({ r: { type: 'defer', delayMs: 5 * MIN, reason: 'no_eligible_ip' }, ip: undefined });
    await pick({ ipPool: 'campaign' });
    const [ev] = await eventually(() => (events('all_ips_blocked').length ? events('all_ips_blocked') : null));
    expect(ev.data).toMatchObject({
      pool: 'campaign',
      measured: true,
      addresses: [
        { ip: '127.0.0.3', reason: 'listed', zone: 'zen.example' },
        { ip: '127.0.0.4', reason: 'manual', zone: null },
      ],
    });
    await new Promise((r) => setTimeout(r, 150));
    expect(events('all_ips_blocked')).toHaveLength(1);
    t.clock.advance(15 * MIN);
    await pick({ ipPool: 'campaign' });
    await eventually(() => events('all_ips_blocked').length === 2);
    await ipStatus().unblock('127.0.0.3');
    await ipStatus().unblock('127.0.0.4');
  });

  it('a dedicated IP bypasses round-robin, must pass the same check, and never falls back', async () => {
    const org = `org-ded-${++n}`;
    await t.call('POST', '/pool-rules', { organizationId: org, pool: 'campaign', dedicatedIp: '127.0.0.4' });
    for (let i = 0; i < 3; i++) expect((await pick({ organizationId: org })).ip).toBe('127.0.0.4');
    await ipStatus().markBlocked('127.0.0.4', 'listed', 'zen.example');
    expect(await pick({ organizationId: org })).toMatchObject({ r: { type: 'defer', reason: 'dedicated_ip_blocked' }, ip: undefined });
    expect((await pick({ ipPool: 'campaign' })).ip).toBe('127.0.0.3'); // others still use the pool
    await ipStatus().unblock('127.0.0.4');
  });
});

describe('acquire_slot', () => {
  const throttle = () => t.mta.context.state.throttle;
  const profiles = () => t.mta.context.stores.profiles;
  async function slot(domain: string, ip = '127.0.0.2') {
    const c = ctxFor(t, { to: `x@${domain}` });
    c.ip = { address: ip, ehloName: 'e.example.test', pool: 'transactional' };
    return acquireSlot.run(c);
  }

  it('allows the profile rate per minute per (IP, domain), then defers 5 s until the window slides', async () => {
    const d = `slot-${++n}.example`; // "Other domains": 30/min
    for (let i = 0; i < 30; i++) expect(await slot(d)).toEqual({ type: 'continue' });
    expect(await slot(d)).toEqual({ type: 'defer', delayMs: 5_000, reason: 'throttle' });
    expect(await slot(d, '127.0.0.3')).toEqual({ type: 'continue' }); // another IP has its own window
    t.clock.advance(30_000);
    expect((await slot(d)).type).toBe('defer');
    t.clock.advance(30_000);
    expect(await slot(d)).toEqual({ type: 'continue' });
  });

  it("uses the provider profile (gmail 100/min) and counts its alias domain in the same window", async () => {
    t.clock.advance(2 * MIN);
    for (let i = 0; i < 50; i++) expect((await slot('gmail.com', '127.0.0.3')).type).toBe('continue');
    for (let i = 0; i < 50; i++) expect((await slot('googlemail.com', '127.0.0.3')).type).toBe('continue');
    expect(await slot('gmail.com', '127.0.0.3')).toMatchObject({ type: 'defer', reason: 'throttle' });
    expect(await slot('googlemail.com', '127.0.0.3')).toMatchObject({ type: 'defer', reason: 'throttle' });
  });

  it('applies a custom profile from PUT /isp-profiles', async () => {
    const d = `custom-${++n}.example`;
    const r = await t.call('PUT', `/isp-profiles/${d}`, { defaultRate: 2, floor: 1, ceiling: 4, backoffFactor: 0.5, recoveryFactor: 2 });
    expect(r.status).toBe(201);
    expect((await slot(d)).type).toBe('continue');
    expect((await slot(d)).type).toBe('continue');
    expect((await slot(d)).type).toBe('defer');
  });

  it('adapts the rate: × backoffFactor on 4xx, × recoveryFactor after 50 successes, within floor and ceiling', async () => {
    const d = `adapt-${++n}.example`;
    const p = profiles().resolve(d);
    expect(p.domain).toBe('default');
    let s = await throttle().onResult('127.0.0.2', p, d, 'temp');
    expect(s.rate).toBeCloseTo(22.5);
    for (let i = 0; i < 49; i++) s = await throttle().onResult('127.0.0.2', p, d, 'ok');
    expect(s.rate).toBeCloseTo(22.5);
    s = await throttle().onResult('127.0.0.2', p, d, 'ok');
    expect(s.rate).toBeCloseTo(24.75);
    // The window now admits 24 per minute.
    t.clock.advance(2 * MIN);
    for (let i = 0; i < 24; i++) expect((await slot(d)).type).toBe('continue');
    expect((await slot(d)).type).toBe('defer');
    for (let i = 0; i < 9; i++) s = await throttle().onResult('127.0.0.2', p, d, 'temp'); // 24.75 × 0.75^9 → floor
    expect(s.rate).toBe(2);
    for (let i = 0; i < 50 * 45; i++) s = await throttle().onResult('127.0.0.2', p, d, 'ok');
    expect(s.rate).toBe(100); // ceiling
  });

  it('at the ceiling a success rewrites nothing within a window; the state stays alive while traffic lasts, and a 4xx still steps down', async () => {
    const d = `steady-${++n}.example`;
    const r = await t.call('PUT', `/isp-profiles/${d}`, { defaultRate: 4, floor: 1, ceiling: 4, backoffFactor: 0.5, recoveryFactor: 2 });
    expect(r.status).toBe(201);
    const p = profiles().resolve(d);
    const key = `mta:thr:s:127.0.0.2:${d}`;
    const stored = () => t.coord.getJson<{ rate: number; ok: number; fail: number; savedAt?: number }>(key);
    // No state yet: the first success writes it.
    expect((await throttle().onResult('127.0.0.2', p, d, 'ok')).rate).toBe(4);
    const first = await stored();
    expect(first).toMatchObject({ rate: 4, ok: 1, fail: 0, savedAt: t.clock.now() });
    t.clock.advance(30_000);
    for (let i = 0; i < 20; i++) expect((await throttle().onResult('127.0.0.2', p, d, 'ok')).rate).toBe(4);
    expect(await stored()).toEqual(first);
    // A window after the write it is written again, so the 24 h TTL never passes under traffic.
    t.clock.advance(30_000);
    await throttle().onResult('127.0.0.2', p, d, 'ok');
    expect((await stored())!.savedAt).toBe(t.clock.now());
    for (let h = 0; h < 30; h++) {
      t.clock.advance(60 * MIN);
      await throttle().onResult('127.0.0.2', p, d, 'ok');
    }
    expect(await stored()).toMatchObject({ rate: 4, fail: 0, savedAt: t.clock.now() });
    // A 4xx at the ceiling is never skipped.
    expect((await throttle().onResult('127.0.0.2', p, d, 'temp')).rate).toBe(2);
    expect(await stored()).toMatchObject({ rate: 2, ok: 0, fail: 1 });
    // Below the ceiling every success counts toward the recovery step.
    const s = await throttle().onResult('127.0.0.2', p, d, 'ok');
    expect(s).toMatchObject({ rate: 2, ok: 1, fail: 0 });
    expect(await stored()).toMatchObject({ rate: 2, ok: 1, fail: 0 });
  });

  it("acquire hands a success its quiet state: the success then reads and writes nothing; otherwise it reads afresh", async () => {
    const d = `quiet-${++n}.example`;
    const r = await t.call('PUT', `/isp-profiles/${d}`, { defaultRate: 4, floor: 1, ceiling: 4, backoffFactor: 0.5, recoveryFactor: 2 });
    expect(r.status).toBe(201);
    const p = profiles().resolve(d);
    const key = `mta:thr:s:127.0.0.2:${d}`;
    const slotOk = async () => {
      const s = await throttle().acquire('127.0.0.2', p, d);
      if (!s.ok) throw new Error('no slot');
      return s.quiet;
    };
    t.clock.advance(2 * MIN);
    // Nothing stored yet, then a fresh state at the ceiling: quiet.
    expect(await slotOk()).toBeNull();
    await throttle().onResult('127.0.0.2', p, d, 'ok');
    const quiet = await slotOk();
    expect(quiet).toMatchObject({ rate: 4, fail: 0 });
    // Another instance's 4xx lands before this send's success: the success, holding its quiet
    // state, leaves the stored 4xx as it is (it would have been skipped in the same race anyway).
    await throttle().onResult('127.0.0.2', p, d, 'temp');
    expect(await throttle().onResult('127.0.0.2', p, d, 'ok', quiet)).toEqual(quiet);
    expect(await t.coord.getJson(key)).toMatchObject({ rate: 2, fail: 1 });
    // Below the ceiling acquire hands nothing: the success reads the state and counts.
    t.clock.advance(MIN);
    const below = await slotOk();
    expect(below).toBeNull();
    expect(await throttle().onResult('127.0.0.2', p, d, 'ok', below)).toMatchObject({ rate: 2, ok: 1, fail: 0 });
    // At the ceiling but written a window ago: not quiet, so the success rewrites it (kept alive).
    for (let i = 0; i < 49; i++) await throttle().onResult('127.0.0.2', p, d, 'ok');
    expect(await t.coord.getJson(key)).toMatchObject({ rate: 4, savedAt: t.clock.now() });
    t.clock.advance(MIN);
    const stale = await slotOk();
    expect(stale).toBeNull();
    await throttle().onResult('127.0.0.2', p, d, 'ok', stale);
    expect(await t.coord.getJson(key)).toMatchObject({ rate: 4, savedAt: t.clock.now() });
  });

  it('blocks the pair after 10 consecutive 4xx, for 15 minutes', async () => {
    const d = `block-${++n}.example`;
    const p = profiles().resolve(d);
    for (let i = 0; i < 9; i++) await throttle().onResult('127.0.0.2', p, d, 'temp');
    expect((await slot(d)).type).toBe('continue');
    await throttle().onResult('127.0.0.2', p, d, 'temp');
    expect(await slot(d)).toEqual({ type: 'defer', delayMs: 15 * MIN, reason: 'throttle_blocked' });
    t.clock.advance(15 * MIN);
    expect(await slot(d)).toEqual({ type: 'continue' });
  });
});

describe('warming_cap', () => {
  async function warm(ip: string) {
    const c = ctxFor(t);
    c.ip = { address: ip, ehloName: 'w.example.test', pool: 'campaign' };
    return warmingCap.run(c);
  }

  it('caps day 1 at 50 and defers to the next UTC day, bounded at one hour', async () => {
    t.clock.set(Date.UTC(2026, 3, 1, 12, 0, 0));
    const ip = '10.0.0.1';
    for (let i = 0; i < 50; i++) expect(await warm(ip)).toEqual({ type: 'continue' });
    expect(await warm(ip)).toEqual({ type: 'defer', delayMs: HOUR, reason: 'warming_cap' });
    t.clock.set(Date.UTC(2026, 3, 1, 23, 50, 0));
    expect(await warm(ip)).toEqual({ type: 'defer', delayMs: 10 * MIN, reason: 'warming_cap' });
    t.clock.set(Date.UTC(2026, 3, 1, 23, 59, 55));
    expect(await warm(ip)).toEqual({ type: 'defer', delayMs: 30_000, reason: 'warming_cap' }); // minimum deferral
    t.clock.set(Date.UTC(2026, 3, 2, 0, 0, 0)); // day 2: cap 100
    for (let i = 0; i < 100; i++) expect((await warm(ip)).type).toBe('continue');
    expect((await warm(ip)).type).toBe('defer');
  });

  it('follows the schedule between listed days (day 4 keeps the day-3 cap of 200)', async () => {
    const ip = '10.0.0.2';
    t.clock.set(Date.UTC(2026, 4, 1, 8, 0, 0));
    expect((await warm(ip)).type).toBe('continue'); // day 1 starts
    t.clock.set(Date.UTC(2026, 4, 4, 8, 0, 0));
    for (let i = 0; i < 200; i++) expect((await warm(ip)).type).toBe('continue');
    expect((await warm(ip)).type).toBe('defer');
    expect(await t.mta.context.state.warming.view(ip)).toMatchObject({ day: 4, cap: 200, sentToday: 200 });
  });

  it('graduates on day 30: no cap, and ip.warming_complete once', async () => {
    const ip = '10.0.0.3';
    t.clock.set(Date.UTC(2026, 5, 1, 8, 0, 0));
    await warm(ip);
    t.clock.set(Date.UTC(2026, 5, 29, 8, 0, 0)); // day 29: 30,000
    expect(await t.mta.context.state.warming.view(ip)).toMatchObject({ day: 29, cap: 30_000 });
    t.clock.set(Date.UTC(2026, 5, 30, 8, 0, 0)); // day 30
    for (let i = 0; i < 5; i++) expect(await warm(ip)).toEqual({ type: 'continue' });
    const [ev] = await eventually(() => (events('ip.warming_complete').length ? events('ip.warming_complete') : null));
    expect(ev.data).toMatchObject({ ip, day: 30, startedAt: '2026-06-01T00:00:00.000Z' });
    await new Promise((r) => setTimeout(r, 100));
    expect(events('ip.warming_complete')).toHaveLength(1);
  });

  it('never caps an address listed in MTA_WARMED_IPS', async () => {
    for (let i = 0; i < 200; i++) expect((await warm('10.9.9.9')).type).toBe('continue');
  });
});
