/** Phases 4 (org_limit), 5 (smtp_intel) and 6 (domain_backoff), each outcome, on a ManualClock. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isBlocking } from '../../src/mta/effects.js';
import { orgLimit } from '../../src/mta/pipeline/04-org-limit.js';
import { smtpIntel } from '../../src/mta/pipeline/05-smtp-intel.js';
import { domainBackoff } from '../../src/mta/pipeline/06-domain-backoff.js';
import { releaseAll } from '../../src/mta/pipeline/index.js';
import { DEFAULT_POLICY } from '../../src/mta/policy.js';
import { ctxFor, startMta, type TestMta } from './helpers.js';

let t: TestMta;
let n = 0;
beforeAll(async () => {
  t = await startMta();
});
afterAll(async () => t?.close());

const HOUR = 3_600_000;
const MIN = 60_000;

describe('org_limit', () => {
  it('uses the defaults of 50,000 a day and 5,000 an hour', async () => {
    const r = await t.call('GET', '/org-limits/org-defaults');
    expect(r.body.data.limits).toMatchObject({ daily: 50_000, hourly: 5_000, source: 'default' });
  });

  it('defers to the next hour at the hourly limit and to midnight UTC at the daily limit', async () => {
    const org = `org-limit-${++n}`;
    t.clock.set(Date.UTC(2026, 2, 10, 12, 20, 0));
    expect((await t.call('POST', '/org-limits', { organizationId: org, daily: 3, hourly: 2 })).status).toBe(200);
    const run = () => orgLimit.run(ctxFor(t, { organizationId: org }));
    expect(await run()).toEqual({ type: 'continue' });
    expect(await run()).toEqual({ type: 'continue' });
    expect(await run()).toEqual({ type: 'defer', delayMs: 40 * MIN, reason: 'org_limit_hourly' });
    t.clock.set(Date.UTC(2026, 2, 10, 13, 0, 0)); // next hour: the hourly counter starts again
    expect(await run()).toEqual({ type: 'continue' });
    expect(await run()).toEqual({ type: 'defer', delayMs: 11 * HOUR, reason: 'org_limit_daily' });
    const usage = await t.call('GET', `/org-limits/${org}`);
    expect(usage.body.data.usage).toMatchObject({ daily: 3, hourly: 1, dailyResetsAt: '2026-03-11T00:00:00.000Z', hourlyResetsAt: '2026-03-10T14:00:00.000Z' });
    t.clock.set(Date.UTC(2026, 2, 11, 0, 0, 0)); // next UTC day
    expect(await run()).toEqual({ type: 'continue' });
  });

  it('gives the slot back when the attempt does not reach delivery', async () => {
    const org = `org-limit-${++n}`;
    await t.mta.context.stores.orgLimits.set(org, { daily: 1, hourly: 1 });
    const c = ctxFor(t, { organizationId: org });
    expect(await orgLimit.run(c)).toEqual({ type: 'continue' });
    expect((await orgLimit.run(ctxFor(t, { organizationId: org }))).type).toBe('defer');
    await releaseAll(c, false);
    expect(await orgLimit.run(ctxFor(t, { organizationId: org }))).toEqual({ type: 'continue' });
  });

  it('keeps counters in persist: keys with the spec TTLs (48 h daily, 2 h hourly)', async () => {
    const org = `org-limit-${++n}`;
    t.clock.set(Date.UTC(2026, 2, 12, 23, 30, 0));
    await orgLimit.run(ctxFor(t, { organizationId: org }));
    const dirty = t.coord.dirtyPersistentEntries().filter((e) => e.key.includes(org));
    const byKind = Object.fromEntries(dirty.map((e) => [e.key.includes(':d:') ? 'day' : 'hour', e]));
    expect(byKind.day).toMatchObject({ key: `persist:mta:org:${org}:d:20260312`, kind: 'counter', value: 1, expiresAt: t.clock.now() + 48 * HOUR });
    expect(byKind.hour).toMatchObject({ key: `persist:mta:org:${org}:h:2026031223`, kind: 'counter', value: 1, expiresAt: t.clock.now() + 2 * HOUR });
  });
});

describe('smtp_intel', () => {
  const intel = () => t.mta.context.state.intel;
  const run = (domain: string) => smtpIntel.run(ctxFor(t, { to: `x@${domain}` }));

  it('continues for a domain without history', async () => {
    expect(await run('quiet.example')).toEqual({ type: 'continue' });
  });

  it('defers the whole queue group while 4xx replies reach 30 % of at least 20 results (degraded), then lets traffic probe again', async () => {
    const d = `intel-${++n}.example`;
    for (let i = 0; i < 15; i++) await intel().record(d, 'ok');
    for (let i = 0; i < 6; i++) await intel().record(d, 'temp'); // 6 of 21 = 28.6 %
    expect(await run(d)).toEqual({ type: 'continue' });
    await intel().record(d, 'temp'); // 7 of 22 = 31.8 %
    expect(await run(d)).toEqual({ type: 'defer', delayMs: 2 * MIN, reason: 'smtp_intel_degraded', scope: 'group' });
    t.clock.advance(2 * MIN);
    expect(await run(d)).toEqual({ type: 'continue' });
  });

  it('defers 30 minutes while half of the replies are policy blocks (blocking)', async () => {
    const d = `intel-${++n}.example`;
    for (let i = 0; i < 10; i++) await intel().record(d, 'ok');
    for (let i = 0; i < 9; i++) await intel().record(d, 'block'); // 19 results: below the minimum sample
    expect(await run(d)).toEqual({ type: 'continue' });
    await intel().record(d, 'block');
    expect(await run(d)).toEqual({ type: 'defer', delayMs: 30 * MIN, reason: 'smtp_intel_blocking', scope: 'group' });
  });

  it('forgets results older than the 10-minute window', async () => {
    const d = `intel-${++n}.example`;
    for (let i = 0; i < 15; i++) await intel().record(d, 'temp');
    t.clock.advance(11 * MIN);
    for (let i = 0; i < 5; i++) await intel().record(d, 'temp'); // only 5 in the window: no verdict
    t.clock.advance(3 * MIN); // the old verdict has expired too
    expect(await run(d)).toEqual({ type: 'continue' });
  });

  it('counts policy and reputation 5xx against the domain, never recipient-specific ones', () => {
    expect(isBlocking(DEFAULT_POLICY, { reason: 'blocked' })).toBe(true);
    expect(isBlocking(DEFAULT_POLICY, { reason: 'spamdetected' })).toBe(true);
    expect(isBlocking(DEFAULT_POLICY, { enhancedCode: '5.7.1' })).toBe(true);
    expect(isBlocking(DEFAULT_POLICY, { reason: 'userunknown', enhancedCode: '5.1.1' })).toBe(false);
    expect(isBlocking(DEFAULT_POLICY, { reason: 'mailboxfull', enhancedCode: '5.2.2' })).toBe(false);
  });
});

describe('domain_backoff', () => {
  const backoff = () => t.mta.context.state.backoff;
  const run = (domain: string) => domainBackoff.run(ctxFor(t, { to: `x@${domain}` }));

  it('defers the whole queue group after 3 connection failures in a row, doubling per further failure up to 30 minutes', async () => {
    const d = `down-${++n}.example`;
    await backoff().recordFailure(d);
    await backoff().recordFailure(d);
    expect(await run(d)).toEqual({ type: 'continue' });
    await backoff().recordFailure(d);
    expect(await run(d)).toEqual({ type: 'defer', delayMs: MIN, reason: 'domain_backoff', scope: 'group' });
    await backoff().recordFailure(d);
    expect(await run(d)).toEqual({ type: 'defer', delayMs: 2 * MIN, reason: 'domain_backoff', scope: 'group' });
    for (let i = 0; i < 10; i++) await backoff().recordFailure(d);
    expect(await run(d)).toEqual({ type: 'defer', delayMs: 30 * MIN, reason: 'domain_backoff', scope: 'group' });
    t.clock.advance(10 * MIN);
    expect(await run(d)).toEqual({ type: 'defer', delayMs: 20 * MIN, reason: 'domain_backoff', scope: 'group' });
  });

  it('decides with the clock of its own turn on a backoff read when the attempt started', async () => {
    const d = `down-${++n}.example`;
    for (let i = 0; i < 3; i++) await backoff().recordFailure(d); // one minute
    const c = ctxFor(t, { to: `x@${d}` });
    const early = domainBackoff.prefetch!(c);
    expect(await domainBackoff.run(c, early)).toEqual({ type: 'defer', delayMs: MIN, reason: 'domain_backoff', scope: 'group' });
    const later = domainBackoff.prefetch!(c);
    t.clock.advance(MIN); // ends between the read and the phase
    expect(await domainBackoff.run(c, later)).toEqual({ type: 'continue' });
  });

  it('ends the backoff when the domain answers again', async () => {
    const d = `down-${++n}.example`;
    for (let i = 0; i < 3; i++) await backoff().recordFailure(d);
    expect((await run(d)).type).toBe('defer');
    await backoff().recordSuccess(d);
    expect(await run(d)).toEqual({ type: 'continue' });
    await backoff().recordFailure(d); // the streak starts from zero
    expect(await run(d)).toEqual({ type: 'continue' });
  });
});
