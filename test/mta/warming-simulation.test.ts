/**
 * Issue 21's warming simulation: the real Warming state on a manual clock, 30 UTC days of
 * sends for a new IP against scripted provider answers (test/harness/warming-sim.ts), plus the
 * deferral-aware retry through the real dispatcher and the state surviving a restart.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomBytes } from 'node:crypto';
import { CoordPersistence } from '../../src/shared/coord/persist.js';
import { RedisCoordination } from '../../src/shared/coord/redis.js';
import { deleteRedisKeys, testRedis } from '../harness/redis.js';
import { MemoryCoordination } from '../../src/shared/coord/memory.js';
import { ManualClock } from '../../src/shared/clock.js';
import type { Job } from '../../src/shared/queue/types.js';
import type { MtaJobPayload } from '../../src/mta/job.js';
import { DEFAULT_POLICY, warmingCap } from '../../src/mta/policy.js';
import { VolumePressureRules } from '../../src/mta/state/volume-pressure.js';
import { Warming } from '../../src/mta/state/warming.js';
import { createTestDatabase, type TestDatabase } from '../harness/db.js';
import { DAY, GMAIL_421, HOUR, SENT, simulation, type Answer } from '../harness/warming-sim.js';
import { emailJob, startMta, type TestMta } from './helpers.js';

const BOUNCED: Answer = { kind: 'bounced' };

describe('warming simulation (30 days, manual clock)', () => {
  it('a clean provider accelerates: two schedule days per clean day, graduating on schedule day 30 with one event', async () => {
    const sim = simulation({ providers: [{ provider: 'outlook.com', pool: 'transactional', demand: () => 40_000, answer: () => SENT }] });
    const days = await sim.run(18);
    expect(days.slice(0, 6).map((d) => d.scheduleDay)).toEqual([1, 3, 5, 7, 9, 11]);
    // Calendar day 5 sends at schedule day 9's cap (1,500) where the table alone gives 700.
    expect(days[4]).toMatchObject({ cap: 1_500, sent: 1_500 });
    expect(warmingCap(DEFAULT_POLICY, 5)).toBe(700);
    const grad = days.findIndex((d) => d.cap === null);
    expect(days[grad - 1]!.scheduleDay).toBe(29);
    expect(days[grad]!.scheduleDay).toBe(30);
    expect(sim.graduations).toHaveLength(1);
    expect(sim.graduations[0]).toMatchObject({ ip: '127.0.0.3', day: 30 });
    // Unlimited from then on, and no second event.
    expect(days.at(-1)).toMatchObject({ cap: null, sent: 0 });
    expect(days.at(-1)!.providers['outlook.com']!.accepted).toBe(40_000);
  });

  it('a provider answering 421 rate limit halves its multiplier, then recovers by 0.1 after three clean days', async () => {
    const sim = simulation({
      providers: [
        { provider: 'gmail.com', pool: 'transactional', demand: (d) => (d <= 2 ? 60 : 150), answer: (d) => (d === 2 ? GMAIL_421 : SENT) },
        { provider: 'outlook.com', pool: 'transactional', demand: () => 60, answer: () => SENT },
      ],
    });
    const days = await sim.run(10);
    const g = days.map((d) => d.providers['gmail.com']!);
    const o = days.map((d) => d.providers['outlook.com']!);
    expect(g.map((p) => p.multiplier)).toEqual([1, 1, 0.5, 0.5, 0.5, 0.6, 0.6, 0.6, 0.7, 0.7]);
    // Day 1 shares the IP's 50 with outlook.com: under 50 sends, nothing banked.
    expect(g[1]!.verdict).toBe('insufficient_data');
    expect(g.map((p) => p.streak)).toEqual([0, 0, 0, 1, 2, 0, 1, 2, 0, 1]);
    expect(g[2]!.verdict).toBe('decelerate');
    expect(o.every((p) => p.multiplier === 1)).toBe(true);
    // Day 3: IP schedule day held at 3 (cap 200) by the deferrals; gmail gets 0.5 × 200 = 100.
    expect(days[2]).toMatchObject({ scheduleDay: 3, cap: 200 });
    expect(g[2]).toMatchObject({ accepted: 100 });
    expect(g[2]!.deferredByUs).toBeGreaterThan(0);
    expect(o[2]!.accepted).toBe(60);
    // The pressure is on /ip-reputation's data: six hours, then gone.
    const ip = await sim.warming.view('127.0.0.3');
    expect(ip.providers.find((p) => p.provider === 'gmail.com')!.pressure).toEqual([]);
  });

  it('fewer than 50 sends a day moves nothing: insufficient_data, the calendar pace, graduation on day 30 once', async () => {
    const sim = simulation({ providers: [{ provider: 'yahoo.com', pool: 'transactional', demand: () => 40, answer: () => BOUNCED }] });
    const days = await sim.run(31);
    expect(days.map((d) => d.scheduleDay)).toEqual(days.map((d) => Math.min(30, d.day)));
    expect(days.every((d) => d.providers['yahoo.com']!.multiplier === 1)).toBe(true);
    expect(days[5]!.providers['yahoo.com']!.verdict).toBe('insufficient_data');
    expect(days[28]).toMatchObject({ cap: 30_000 });
    expect(days[29]).toMatchObject({ cap: null });
    expect(sim.graduations.map((g) => g.day)).toEqual([30]);
  });

  it('paces bulk sends along the curve, keeps 20 % for transactional ones, and guarantees 100 bulk sends', async () => {
    const sim = simulation({ providers: [] });
    const { warming, clock } = sim;
    const ip = '127.0.0.9';
    const day1 = clock.now();
    await warming.reserve(ip, { pool: 'transactional' }); // day 1 starts
    const fill = async (pool: string) => {
      let n = 0;
      for (;;) {
        const r = await warming.reserve(ip, { pool, provider: 'gmail.com' });
        if (!r.ok) return { n, r };
        n++;
      }
    };
    // Day 3 (cap 200, bulk ceiling 160) at 00:30: the curve gives 16, the guard 100.
    clock.set(day1 + 2 * DAY + HOUR / 2);
    expect((await fill('campaign')).n).toBe(100);
    // Day 10 (cap 3,000, bulk ceiling 2,400).
    clock.set(day1 + 9 * DAY + 6 * HOUR);
    const six = await fill('campaign');
    expect(six.n).toBe(Math.floor(2_400 * (0.1 + 0.9 * 0.25))); // 780
    expect(six.r).toMatchObject({ ok: false, reason: 'pacing' });
    // Deferred until the curve releases the next one (40 s later), not to the next day.
    expect(six.r.ok === false && six.r.delayMs).toBe(40_000);
    clock.set(day1 + 9 * DAY + 12 * HOUR);
    expect((await fill('campaign')).n).toBe(1_320 - 780);
    clock.set(day1 + 10 * DAY - 1_000);
    expect((await fill('campaign')).n).toBe(2_399 - 1_320);
    // The headroom is the transactional pool's alone; then the day's cap holds for everyone.
    const tx = await fill('transactional');
    expect(tx.n).toBe(3_000 - 2_399);
    expect(tx.r).toMatchObject({ ok: false, reason: 'warming_cap' });
    const v = await warming.view(ip);
    expect(v).toMatchObject({ day: 10, cap: 3_000, sentToday: 3_000, pacing: { bulkCeiling: 2_400, bulkSentToday: 2_399 } });
    // An attempt that kept its slot (a remote deferral) passes all three gates on its retry.
    await warming.record(ip, 'gmail.com', 'deferred', null, 'job-held');
    expect(await warming.reserve(ip, { pool: 'campaign', provider: 'gmail.com', jobId: 'job-held' })).toMatchObject({ ok: true });
    expect((await warming.reserve(ip, { pool: 'campaign', provider: 'gmail.com', jobId: 'job-held' })).ok).toBe(false);
  });

  it('doubles the retry delay per recent pressure event, up to ×8 and four hours, for six hours', async () => {
    const sim = simulation({ providers: [] });
    const { warming, clock } = sim;
    const ip = '127.0.0.9';
    const rules = new VolumePressureRules();
    expect(await warming.retryDelay(ip, 'gmail.com', 30_000)).toBe(30_000);
    const delays: number[] = [];
    for (let i = 0; i < 5; i++) {
      await warming.record(ip, 'gmail.com', 'deferred', rules.classify(GMAIL_421));
      delays.push(await warming.retryDelay(ip, 'gmail.com', 30_000));
    }
    expect(delays).toEqual([60_000, 120_000, 240_000, 240_000, 240_000]);
    expect(await warming.retryDelay(ip, 'gmail.com', 2 * HOUR)).toBe(4 * HOUR);
    // Another provider at the same IP is not slowed.
    expect(await warming.retryDelay(ip, 'outlook.com', 30_000)).toBe(30_000);
    // A greylisting reply is not volume pressure.
    await warming.record(ip, 'outlook.com', 'deferred', rules.classify({ code: 451, response: '451 4.7.1 Greylisted, please try again in 300 seconds' }));
    expect(await warming.retryDelay(ip, 'outlook.com', 30_000)).toBe(30_000);
    clock.advance(6 * HOUR + 1);
    expect(await warming.retryDelay(ip, 'gmail.com', 30_000)).toBe(30_000);
  });
});

describe('volume-pressure verdicts (data beside the policy)', () => {
  const rules = new VolumePressureRules();
  it.each([
    [421, GMAIL_421.response, 'gmail_rate_limited'],
    [421, '421 4.7.0 [TSS04] Messages from 127.0.0.3 temporarily deferred due to unexpected volume or user complaints - 4.16.55.1; see https://postmaster.yahooinc.com/error-codes', 'yahoo_tss04'],
    [421, '421 4.7.0 [TS03] All messages from 127.0.0.3 will be permanently deferred; Retrying will NOT succeed. See https://postmaster.yahooinc.com/error-codes', 'yahoo_ts03'],
    [451, '451 4.7.500 Server busy. Please try again later from [127.0.0.3]. (S77714) [BN8NAM11FT066.eop-nam11.prod.protection.outlook.com]', 'microsoft_resource_throttle'],
    [451, '451 4.7.650 The mail server [127.0.0.3] has been temporarily rate limited due to IP reputation. For e-mail delivery information, see https://aka.ms/postmaster (S775)', 'microsoft_resource_throttle'],
    [421, '421 4.7.0 Too many messages from your IP, rate limited, try again later', 'rate_limited'],
    [450, '450 4.7.1 Client host rejected: sending rate exceeded', 'rate_limited'],
  ])('%i %s → %s', (code, response, verdict) => {
    expect(rules.classify({ code, response })).toBe(verdict);
  });
  it.each([
    [451, '451 4.7.1 Greylisted, please try again in 300 seconds'],
    [450, '450 4.2.1 Recipient address rejected: Greylisted for 5 minutes'],
    [452, '452 4.2.2 The email account that you tried to reach is over quota. gsmtp'],
    [452, '452 4.2.2 Mailbox full'],
    [550, '550 5.7.28 [127.0.0.3] Our system has detected an unusual rate of unsolicited mail. gsmtp'],
    [421, '421 4.4.2 Connection dropped due to timeout'],
  ])('%i %s is not volume pressure', (code, response) => {
    expect(rules.classify({ code, response })).toBeNull();
  });
});

describe('warming through the MTA', () => {
  let t: TestMta;
  let n = 0;
  beforeAll(async () => {
    t = await startMta();
  });
  afterAll(async () => {
    await t?.close();
  });

  async function run(over: Record<string, unknown> = {}) {
    const body = emailJob({ to: `rcpt${++n}@gmail.com`, ...over });
    const r = await t.call('POST', '/send', body);
    expect(r.status).toBe(202);
    const claimed = await t.mta.context.queue.claim('test-worker', 100);
    const job = claimed.find((j) => j.id === r.body.data.jobId) as Job<MtaJobPayload>;
    for (const other of claimed) if (other !== job) await t.mta.context.queue.defer(other, 0, 'not this test');
    const outcome = await t.mta.handler!(job, { signal: new AbortController().signal });
    await t.mta.context.queue.apply(job, outcome);
    return outcome;
  }

  it('a 421 rate limit from Gmail doubles the queue backoff per recent event (×8 at most); /ip-reputation shows it', async () => {
    const reply = { status: 'deferred' as const, code: 421, enhancedCode: '4.7.28', response: GMAIL_421.response, mxHost: 'gmail-smtp-in.l.google.com', connectionFailure: false };
    const delays: (number | undefined)[] = [];
    for (let i = 0; i < 4; i++) {
      t.deliverer.answer(reply);
      const o = await run();
      expect(o.type).toBe('retry');
      delays.push(o.type === 'retry' ? o.delayMs : undefined);
    }
    // The queue's first backoff is 30 s: ×2, ×4, ×8, ×8.
    expect(delays).toEqual([60_000, 120_000, 240_000, 240_000]);
    const r = await t.call('GET', '/ip-reputation/127.0.0.2');
    expect(r.status).toBe(200);
    const gmail = r.body.data.warming.providers.find((p: { provider: string }) => p.provider === 'gmail.com');
    expect(gmail).toMatchObject({ multiplier: 1, streak: 0, verdict: null });
    expect(gmail.pressure).toHaveLength(4);
    expect(gmail.pressure[0].verdict).toBe('gmail_rate_limited');
    expect(r.body.data.warming.pacing).toMatchObject({ bulkCeiling: 40, position: 0.5 });
    const metrics = await (await fetch(`${t.url}/metrics`)).text();
    expect(metrics).toMatch(/mta_warming_provider_pressure_events\{ip="127.0.0.2",provider="gmail.com"\} 4/);
    expect(metrics).toMatch(/mta_warming_provider_multiplier\{ip="127.0.0.2",provider="gmail.com"\} 1/);
    expect(metrics).toMatch(/mta_warming_pressure_total\{verdict="gmail_rate_limited"\} 4/);
    expect(metrics).toMatch(/mta_warming_day\{ip="127.0.0.2"\} 1/);
  });

  it('a domain hosted at a known provider (by its MX) counts as that provider', async () => {
    t.deliverer.answer({ status: 'sent', code: 250, response: '250 ok', mxHost: 'aspmx.l.google.com', tls: true });
    await run({ to: `someone${++n}@hosted-at-google.example` });
    expect(await t.mta.context.state.warming.providerOf('hosted-at-google.example')).toBe('gmail.com');
    expect(await t.mta.context.state.warming.providerOf('elsewhere.example')).toBe('default');
  });
});

describe('warming state survives a restart (memory coordination persisted to PostgreSQL)', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(async () => {
    await db?.drop();
  });

  it('reloads the schedule day, multipliers, streaks and pressure events', async () => {
    const clock = new ManualClock(Date.UTC(2026, 10, 1, 12));
    const make = (coord: MemoryCoordination) => new Warming(coord, clock, DEFAULT_POLICY, new Set(), 'i', () => {}, (d) => d);
    const before = new MemoryCoordination({ clock });
    const w1 = make(before);
    const ip = '127.0.0.5';
    for (let i = 0; i < 50; i++) {
      expect((await w1.reserve(ip, { provider: 'gmail.com' })).ok).toBe(true);
      await w1.record(ip, 'gmail.com', 'deferred', 'gmail_rate_limited');
    }
    clock.advance(DAY);
    const v1 = await w1.view(ip);
    expect(v1.providers[0]).toMatchObject({ multiplier: 0.5, verdict: 'decelerate' });
    await new CoordPersistence({ db: db.pool, coord: before, clock }).flush();

    const after = new MemoryCoordination({ clock });
    await new CoordPersistence({ db: db.pool, coord: after, clock }).load();
    expect(await make(after).view(ip)).toEqual(v1);
    expect(await make(after).retryDelay(ip, 'gmail.com', 30_000)).toBe(30_000); // a day later: the six hours are over
  });
});

const redis = await testRedis();

describe.skipIf(!redis.available)('warming state shared by a fleet (Redis)', () => {
  const keyPrefix = `lmtest:warm:${randomBytes(4).toString('hex')}:`;
  afterAll(async () => {
    await deleteRedisKeys(redis.url, keyPrefix);
  });

  it('one instance\'s results move the multiplier every instance applies, and a restarted one reads the same state', async () => {
    const clock = new ManualClock(Date.UTC(2026, 10, 1, 12));
    const conns: RedisCoordination[] = [];
    const make = () => {
      const c = new RedisCoordination({ url: redis.url, keyPrefix, clock });
      conns.push(c);
      return new Warming(c, clock, DEFAULT_POLICY, new Set(), `i${conns.length}`, () => {}, (d) => d);
    };
    try {
      const a = make();
      const b = make();
      const ip = '127.0.0.6';
      for (let i = 0; i < 50; i++) {
        expect((await (i % 2 ? a : b).reserve(ip, { provider: 'yahoo.com' })).ok).toBe(true);
        await a.record(ip, 'yahoo.com', 'deferred', 'yahoo_tss04');
      }
      expect(await b.retryDelay(ip, 'yahoo.com', 30_000)).toBe(240_000);
      clock.advance(DAY);
      // Day 2: 50 results, all deferred: the IP's schedule holds at day 1 (cap 50), yahoo's multiplier halves.
      const granted = async (w: Warming) => {
        let n = 0;
        while ((await w.reserve(ip, { provider: 'yahoo.com' })).ok) n++;
        return n;
      };
      expect((await a.view(ip)).day).toBe(1);
      expect(await granted(b)).toBe(25); // ⌊50 × 0.5⌋, counted once for the fleet
      expect(await granted(a)).toBe(0);
      const restarted = make();
      expect((await restarted.view(ip)).providers).toEqual([expect.objectContaining({ provider: 'yahoo.com', multiplier: 0.5, verdict: 'decelerate', streak: 0 })]);
    } finally {
      for (const c of conns) await c.close();
    }
  });
});
