/**
 * Group-wide deferrals: a reason that holds for every job of a queue group (`<ipPool>:<domain>`)
 * — the recipient domain degraded or backing off, no address of the pool eligible or with a
 * throttle slot — pauses the group, so its backlog is claimed once per pause window instead of
 * job by job. Reasons of one organization (breaker, limits, a pool rule) stay per job.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Job } from '../../src/shared/queue/types.js';
import type { MtaJobPayload } from '../../src/mta/job.js';
import { resolvePool } from '../../src/mta/pipeline/07-resolve-pool.js';
import { selectIp } from '../../src/mta/pipeline/08-select-ip.js';
import { acquireSlot } from '../../src/mta/pipeline/09-acquire-slot.js';
import { CONTINUE } from '../../src/mta/pipeline/index.js';
import { ctxFor, emailJob, eventually, startMta, type TestMta } from './helpers.js';

let t: TestMta;
let n = 0;
const SEC = 1000;
const MIN = 60 * SEC;

beforeAll(async () => {
  t = await startMta();
});
afterAll(async () => {
  await t?.close();
});

const q = () => t.mta.context.queue;

async function withRule<T>(orgId: string, rule: { pool: string; dedicatedIp?: string }, fn: () => Promise<T>): Promise<T> {
  expect((await t.call('POST', '/pool-rules', { organizationId: orgId, ...rule })).status).toBe(201);
  try {
    return await fn();
  } finally {
    expect((await t.call('DELETE', `/pool-rules/${orgId}`)).status).toBe(200);
  }
}

/** resolve_pool → select_ip → acquire_slot for a fresh job, as the pipeline runs them. */
async function route(domain: string, over: Record<string, unknown> = {}) {
  const c = ctxFor(t, { to: `x@${domain}`, ipPool: 'campaign', ...over });
  expect(await resolvePool.run(c)).toEqual(CONTINUE);
  const selected = await selectIp.run(c);
  if (selected.type !== 'continue') return { r: selected, chosen: undefined, ip: undefined };
  const chosen = c.ip!.address;
  const r = await acquireSlot.run(c);
  return { r, chosen, ip: c.ip!.address };
}

describe('acquire_slot and select_ip: pool-level reasons', () => {
  const throttle = () => t.mta.context.state.throttle;
  const fill = async (ip: string, domain: string, count: number) => {
    const p = t.mta.context.stores.profiles.resolve(domain);
    for (let i = 0; i < count; i++) expect(await throttle().acquire(ip, p, domain)).toMatchObject({ ok: true });
  };

  it("sends through another address of the pool when the chosen one has no slot; all full → the whole group waits", async () => {
    const d = `full-${++n}.example`; // "Other domains": 30 per minute per address
    await fill('127.0.0.3', d, 30);
    const a = await route(d);
    const b = await route(d);
    expect([a.chosen, b.chosen].sort()).toEqual(['127.0.0.3', '127.0.0.4']); // round-robin chose each once
    for (const x of [a, b]) expect(x).toMatchObject({ r: { type: 'continue' }, ip: '127.0.0.4' });
    await fill('127.0.0.4', d, 28);
    expect((await route(d)).r).toEqual({ type: 'defer', delayMs: 5 * SEC, reason: 'throttle', scope: 'group' });

    // Both pairs blocked after 4xx streaks, at different times: the group waits for the earlier end.
    const p = t.mta.context.stores.profiles.resolve(d);
    for (let i = 0; i < 10; i++) await throttle().onResult('127.0.0.3', p, d, 'temp');
    t.clock.advance(MIN);
    for (let i = 0; i < 10; i++) await throttle().onResult('127.0.0.4', p, d, 'temp');
    expect((await route(d)).r).toEqual({ type: 'defer', delayMs: 14 * MIN, reason: 'throttle_blocked', scope: 'group' });
    t.clock.advance(14 * MIN);
    expect(await route(d)).toMatchObject({ r: { type: 'continue' }, ip: '127.0.0.3' });
  });

  it('stays per job when a pool rule routes some organization elsewhere, or the job uses a dedicated IP', async () => {
    const d = `ruled-${++n}.example`;
    await fill('127.0.0.3', d, 30);
    await fill('127.0.0.4', d, 30);
    const full = { type: 'defer', delayMs: 5 * SEC, reason: 'throttle' };
    expect((await route(d)).r).toEqual({ ...full, scope: 'group' });
    // Another organization's jobs of this group would leave through the transactional pool.
    await withRule(`org-tx-${n}`, { pool: 'transactional' }, async () => {
      expect((await route(d)).r).toEqual(full);
    });
    // A rule to the same pool without a dedicated address routes the same way.
    await withRule(`org-same-${n}`, { pool: 'campaign' }, async () => {
      expect((await route(d)).r).toEqual({ ...full, scope: 'group' });
    });
    // A dedicated address: the rule's organization is routed apart, and its own job too.
    await withRule(`org-ded-${n}`, { pool: 'campaign', dedicatedIp: '127.0.0.4' }, async () => {
      expect((await route(d)).r).toEqual(full);
      expect((await route(d, { organizationId: `org-ded-${n}` })).r).toEqual(full);
    });
    expect((await route(d)).r).toEqual({ ...full, scope: 'group' });
  });

  it('select_ip: no eligible address in the pool defers the whole group, unless rules route apart', async () => {
    const ipStatus = t.mta.context.state.ipStatus;
    await ipStatus.markBlocked('127.0.0.3', 'listed', 'zen.example');
    await ipStatus.markBlocked('127.0.0.4', 'manual');
    try {
      const d = `blocked-${++n}.example`;
      expect((await route(d)).r).toEqual({ type: 'defer', delayMs: 5 * MIN, reason: 'no_eligible_ip', scope: 'group' });
      await withRule(`org-ip-${n}`, { pool: 'transactional' }, async () => {
        expect((await route(d)).r).toEqual({ type: 'defer', delayMs: 5 * MIN, reason: 'no_eligible_ip' });
      });
    } finally {
      await ipStatus.unblock('127.0.0.3');
      await ipStatus.unblock('127.0.0.4');
    }
  });
});

describe('the worker against a backlog', () => {
  it("claims a degraded, backing-off or throttled domain's backlog once per pause window, not once per job", async () => {
    const N = 8;
    const state = t.mta.context.state;
    const degraded = `degraded-${++n}.example`;
    for (let i = 0; i < 20; i++) await state.intel.record(degraded, 'temp'); // degraded for 2 minutes
    const down = `down-${n}.example`;
    for (let i = 0; i < 3; i++) await state.backoff.recordFailure(down); // backoff for 1 minute
    const throttled = `throttled-${n}.example`;
    const p = t.mta.context.stores.profiles.resolve(throttled);
    for (let i = 0; i < 30; i++) await state.throttle.acquire('127.0.0.2', p, throttled); // the transactional pool's only address is full
    // Contrast: an organization at its limit defers job by job (another org's jobs of the group could go).
    const capped = `capped-${n}.example`;
    await t.mta.context.stores.orgLimits.set(`org-capped-${n}`, { hourly: 0 });

    const enqueue = async (domain: string, orgId = 'org-1') => {
      const ids: string[] = [];
      for (let i = 0; i < N; i++) {
        const r = await t.call('POST', '/send', emailJob({ to: `r${i}@${domain}`, organizationId: orgId }));
        expect(r.status).toBe(202);
        ids.push(r.body.data.jobId);
      }
      return ids;
    };
    const ids = {
      degraded: await enqueue(degraded),
      down: await enqueue(down),
      throttled: await enqueue(throttled),
      capped: await enqueue(capped, `org-capped-${n}`),
    };
    const jobs = async (list: string[]) => (await Promise.all(list.map((id) => q().get(id)))) as Job<MtaJobPayload>[];
    const deferrals = async (list: string[]) => (await jobs(list)).flatMap((j) => j.history).filter((h) => h.outcome === 'deferred');
    const group = (domain: string) => `transactional:${domain}`;
    const t0 = t.clock.now();
    const calls = t.deliverer.calls.length;

    await t.start();
    // The per-job deferrals cycle through every job of their group...
    await eventually(async () => (await jobs(ids.capped)).every((j) => j.history.length === 1), 20_000);
    await eventually(async () => {
      const paused = await Promise.all([degraded, down, throttled].map((d) => q().pausedUntil(group(d))));
      return paused.every((x) => x !== null);
    }, 20_000);
    // ...while each paused group was claimed once (jitter is 0 with random() = 0.5).
    const one = (reason: string) => [expect.objectContaining({ attempt: 1, outcome: 'deferred', reason, scope: 'group' })];
    expect(await deferrals(ids.degraded)).toEqual(one('smtp_intel: smtp_intel_degraded'));
    expect(await deferrals(ids.down)).toEqual(one('domain_backoff: domain_backoff'));
    expect(await deferrals(ids.throttled)).toEqual(one('acquire_slot: throttle'));
    expect(await q().pausedUntil(group(degraded))).toBe(t0 + 2 * MIN);
    expect(await q().pausedUntil(group(down))).toBe(t0 + MIN);
    expect(await q().pausedUntil(group(throttled))).toBe(t0 + 5 * SEC);
    expect(await q().pausedUntil(group(capped))).toBeNull();
    expect((await deferrals(ids.capped)).map((h) => [h.reason, h.scope])).toEqual(Array(N).fill(['org_limit: org_limit_hourly', undefined]));
    expect(await q().stats()).toMatchObject({ pending: 0, active: 0, delayed: 4 * N });
    expect(t.deliverer.calls.length).toBe(calls);

    // 5 s later the throttled group tries one job again; its window is still full: one more claim.
    t.clock.advance(5 * SEC);
    await eventually(async () => (await q().pausedUntil(group(throttled))) === t0 + 10 * SEC, 20_000);
    expect(await deferrals(ids.throttled)).toHaveLength(2);
    expect(await deferrals(ids.degraded)).toHaveLength(1);
    expect(await deferrals(ids.down)).toHaveLength(1);

    // Two minutes on, the verdict, the backoff, the window and the pauses are over: every backlog flows, each job once.
    t.clock.set(t0 + 2 * MIN);
    const flowing = [...ids.degraded, ...ids.down, ...ids.throttled];
    await eventually(async () => (await jobs(flowing)).every((j) => j.state === 'completed'), 20_000);
    expect(await deferrals(ids.degraded)).toHaveLength(1);
    expect(await deferrals(ids.down)).toHaveLength(1);
    expect(await deferrals(ids.throttled)).toHaveLength(2);
    const sentTo = t.deliverer.calls.slice(calls).map((c) => c.message.to.split('@')[1]);
    for (const d of [degraded, down, throttled]) expect(sentTo.filter((x) => x === d)).toHaveLength(N);
    expect(sentTo).not.toContain(capped);
    expect(await q().stats()).toMatchObject({ pending: 0, active: 0, delayed: N, completed: 3 * N });
  }, 120_000);
});
