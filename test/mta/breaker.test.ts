/** Phase 3 (circuit_breaker): thresholds of both windows, minimum sample, cooldowns, half-open. */
import { createHmac } from 'node:crypto';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { circuitBreaker } from '../../src/mta/pipeline/03-circuit-breaker.js';
import { runPipeline, PHASES } from '../../src/mta/pipeline/index.js';
import type { BreakerMarker } from '../../src/mta/state/breaker.js';
import { startHttpReceiver, type HttpReceiver } from '../harness/http-receiver.js';
import { ctxFor, eventually, postedEvents, startMta, type TestMta } from './helpers.js';

const SECRET = 'breaker-test-webhook-secret';
let t: TestMta;
let backend: HttpReceiver;
let n = 0;
let org: string;

beforeAll(async () => {
  backend = await startHttpReceiver();
  t = await startMta({ env: { MTA_WEBHOOK_URL: `${backend.url}/webhooks/mta`, MTA_WEBHOOK_SECRET: SECRET } });
});
afterAll(async () => {
  await t?.close();
  await backend?.close();
});
beforeEach(() => {
  backend.reset();
  org = `org-breaker-${++n}`;
});

const breaker = () => t.mta.context.state.breaker;
async function push(markers: string): Promise<void> {
  for (const m of markers) await breaker().record(org, m as BreakerMarker);
}
const times = (m: string, k: number) => m.repeat(k);
const state = async () => (await breaker().state(org)).state;
const admit = () => circuitBreaker.run(ctxFor(t, { organizationId: org }));

describe('fast window (last 50 sends)', () => {
  it('bounce rate: 7 of 50 (14 %) stays closed, 8 of 50 (16 %) trips', async () => {
    await push(times('d', 43) + times('b', 7));
    expect(await state()).toBe('closed');
    await push('b'); // the oldest d leaves the window: 8 of 50
    expect(await state()).toBe('open');
    expect((await breaker().state(org)).trip).toMatchObject({ window: 'fast', signal: 'bounce', rate: 0.16, sample: 50 });
  });

  it('complaint rate: 2 of 50 (exactly 4 %) stays closed, 3 of 50 trips', async () => {
    await push(times('d', 48) + times('c', 2));
    expect(await state()).toBe('closed');
    await push('c');
    expect(await state()).toBe('open');
    expect((await breaker().state(org)).trip).toMatchObject({ window: 'fast', signal: 'complaint', rate: 0.06 });
  });

  it('cannot trip before the minimum sample of 50 markers', async () => {
    await push(times('b', 49));
    expect(await state()).toBe('closed');
    await push('b');
    expect(await state()).toBe('open');
  });
});

describe('slow window (last 100 sends)', () => {
  // 8 bounces spread so that no 50-send window holds more than 5 (fast window never trips).
  const spread = Array.from({ length: 100 }, (_, i) => (i % 12 === 5 ? 'b' : 'd')).join('');

  it('bounce rate: 8 of 100 (exactly 8 %) stays closed, 9 of 100 trips', async () => {
    expect([...spread].filter((c) => c === 'b')).toHaveLength(8);
    await push(spread);
    expect(await state()).toBe('closed');
    await push('b'); // the oldest (a d) leaves: 9 of 100
    expect(await state()).toBe('open');
    expect((await breaker().state(org)).trip).toMatchObject({ window: 'slow', signal: 'bounce', rate: 0.09, sample: 100 });
  });

  it('complaint rate: 0 of 100 stays closed, 1 of 100 (1 % > 0.2 %) trips, but only once 100 markers exist', async () => {
    await push(times('d', 98) + 'c');
    expect(await state()).toBe('closed'); // 99 markers: the slow window has no sample yet; fast: 1 of 50
    await push('d');
    expect(await state()).toBe('open');
    expect((await breaker().state(org)).trip).toMatchObject({ window: 'slow', signal: 'complaint', rate: 0.01 });
  });

  it('100 clean sends never trip', async () => {
    await push(times('d', 150));
    expect(await state()).toBe('closed');
  });
});

describe('states and transitions', () => {
  it('Closed → Open posts org.circuit_breaker (severity critical) once, signed', async () => {
    await push(times('b', 60));
    // Events of earlier tests may still arrive (also in the same POST): look at this organization's only.
    const mine = () => backend.requests.filter((r) => postedEvents([r]).some((e) => e.data.organizationId === org));
    const [req] = await eventually(() => (mine().length > 0 ? mine() : null));
    const body = postedEvents([req!]).find((e) => e.data.organizationId === org)!;
    expect(body).toMatchObject({ event: 'org.circuit_breaker', data: { organizationId: org, severity: 'critical', state: 'open', window: 'fast', signal: 'bounce' } });
    expect(typeof body.timestamp).toBe('string');
    const ts = req!.headers['x-mta-timestamp'] as string;
    expect(Number(ts)).toBe(Math.floor(t.clock.now() / 1000));
    expect(req!.headers['x-mta-signature']).toBe(createHmac('sha256', SECRET).update(`${ts}.${req!.rawBody.toString()}`).digest('hex'));
    await new Promise((r) => setTimeout(r, 200));
    expect(mine()).toHaveLength(1); // the further 10 bounces while open emit nothing
  });

  it('Open defers every send for the 30-minute cooldown, then Half-Open lets exactly 5 test sends through', async () => {
    await push(times('b', 50));
    expect(await admit()).toEqual({ type: 'defer', delayMs: 30 * 60_000, reason: 'circuit_open' });
    t.clock.advance(10 * 60_000);
    expect(await admit()).toEqual({ type: 'defer', delayMs: 20 * 60_000, reason: 'circuit_open' });
    t.clock.advance(20 * 60_000 - 1);
    expect((await admit()).type).toBe('defer');
    t.clock.advance(1);
    for (let i = 0; i < 5; i++) expect(await admit()).toEqual({ type: 'continue' });
    expect(await state()).toBe('half_open');
    expect(await admit()).toEqual({ type: 'defer', delayMs: 60_000, reason: 'circuit_half_open' });
  });

  it('a bounce among the test sends reopens with a 60-minute cooldown', async () => {
    await push(times('b', 50));
    t.clock.advance(30 * 60_000);
    const probe = ctxFor(t, { organizationId: org });
    expect(await circuitBreaker.run(probe)).toEqual({ type: 'continue' });
    expect(probe.breakerProbe).toBeDefined();
    await breaker().record(org, 'd', probe.breakerProbe!.epoch);
    await breaker().record(org, 'b', probe.breakerProbe!.epoch);
    expect(await state()).toBe('open');
    expect(await admit()).toEqual({ type: 'defer', delayMs: 60 * 60_000, reason: 'circuit_open' });
    t.clock.advance(60 * 60_000);
    expect(await admit()).toEqual({ type: 'continue' });
    expect(await state()).toBe('half_open');
  });

  it('a complaint among the test sends reopens too', async () => {
    await push(times('b', 50));
    t.clock.advance(30 * 60_000);
    const probe = ctxFor(t, { organizationId: org });
    await circuitBreaker.run(probe);
    await breaker().record(org, 'c', probe.breakerProbe!.epoch);
    expect(await state()).toBe('open');
  });

  it('five clean test sends close the breaker with a fresh window', async () => {
    await push(times('b', 50));
    t.clock.advance(30 * 60_000);
    const probes = [];
    for (let i = 0; i < 5; i++) {
      const c = ctxFor(t, { organizationId: org });
      expect(await circuitBreaker.run(c)).toEqual({ type: 'continue' });
      probes.push(c);
    }
    for (const [i, c] of probes.entries()) {
      await breaker().record(org, 'd', c.breakerProbe!.epoch);
      expect(await state()).toBe(i < 4 ? 'half_open' : 'closed');
    }
    expect(await admit()).toEqual({ type: 'continue' });
    // The 50 old bounces are gone: one more bounce does not trip.
    await push('b');
    expect(await state()).toBe('closed');
  });

  it('a test send that never reaches delivery gives its slot back', async () => {
    await push(times('b', 50));
    t.clock.advance(30 * 60_000);
    for (let i = 0; i < 4; i++) expect((await admit()).type).toBe('continue');
    // The fifth probe is taken by a job that a later phase defers (org limit 0).
    await t.mta.context.stores.orgLimits.set(org, { daily: 0 });
    const outcome = await runPipeline(ctxFor(t, { organizationId: org }), PHASES);
    expect(outcome).toMatchObject({ type: 'defer', phase: 'org_limit' });
    await t.mta.context.stores.orgLimits.set(org, { daily: 50_000 });
    expect(await admit()).toEqual({ type: 'continue' });
    expect((await admit()).type).toBe('defer');
  });
});
