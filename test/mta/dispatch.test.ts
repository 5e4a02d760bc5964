/**
 * The delivery job handler against the real queue: pipeline outcomes, delivery results and
 * their effects (log, events, suppression, breaker, throttle, limits), retries and expiry.
 * The delivery engine is the outside world: a scripted Deliverer.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { Job } from '../../src/shared/queue/types.js';
import type { MtaJobPayload } from '../../src/mta/job.js';
import { createDispatcher } from '../../src/mta/dispatch.js';
import { resultEventId } from '../../src/mta/outbox/store.js';
import { startHttpReceiver, type HttpReceiver } from '../harness/http-receiver.js';
import { emailJob, eventually, postedEvents, startMta, type TestMta } from './helpers.js';

let t: TestMta;
let backend: HttpReceiver;
let n = 0;

beforeAll(async () => {
  backend = await startHttpReceiver();
  t = await startMta({ env: { MTA_WEBHOOK_URL: `${backend.url}/webhooks/mta`, MTA_WEBHOOK_SECRET: 'dispatch-secret' } });
});
afterAll(async () => {
  await t?.close();
  await backend?.close();
});
beforeEach(() => backend.reset());

const events = (name: string, messageId: string) =>
  postedEvents(backend.requests).filter((b) => b.event === name && b.data.messageId === messageId);

/** POST /send, claim that job, run the handler, write the outcome back. */
async function sendAndRun(over: Record<string, unknown> = {}, handler = t.mta.handler!) {
  const body = emailJob({ to: `rcpt${++n}@dest${n}.example`, ...over });
  const r = await t.call('POST', '/send', body);
  expect(r.status).toBe(202);
  return runJob(r.body.data.jobId, handler, body);
}

async function runJob(jobId: string, handler = t.mta.handler!, body?: Record<string, unknown>) {
  const claimed = await t.mta.context.queue.claim('test-worker', 100);
  const job = claimed.find((j) => j.id === jobId) as Job<MtaJobPayload>;
  expect(job, 'job is due and claimable').toBeDefined();
  for (const other of claimed) if (other !== job) await t.mta.context.queue.defer(other, 0, 'not this test');
  const outcome = await handler(job, { signal: new AbortController().signal });
  await t.mta.context.queue.apply(job, outcome);
  return { jobId, body: body ?? job.payload, outcome, job: (await t.mta.context.queue.get(jobId))! };
}

const logsFor = (messageId: string) => t.mta.context.stores.logs.forMessage(messageId);

describe('delivery results', () => {
  it('sent: hands the message and the route to the engine, completes, logs, posts `sent`, counts', async () => {
    const calls = t.deliverer.calls.length;
    const { body, outcome, job } = await sendAndRun({ headers: { 'X-Campaign': 'spring' }, text: 'plain', replyTo: 'reply@sender.example' });
    expect(outcome).toEqual({ type: 'complete' });
    expect(job.state).toBe('completed');
    const call = t.deliverer.calls[calls]!;
    expect(call.route).toEqual({ pool: 'transactional', bindIp: '127.0.0.2', ehloName: 'mta1.example.test' });
    expect(call.message).toMatchObject({
      messageId: body.messageId,
      organizationId: 'org-1',
      from: 'News <news@sender.example>',
      to: body.to,
      subject: 'Hello',
      html: '<p>Hello</p>',
      text: 'plain',
      replyTo: 'reply@sender.example',
      headers: { 'X-Campaign': 'spring' },
      dkimDomain: 'sender.example',
    });
    const [log] = await logsFor(body.messageId as string);
    expect(log).toMatchObject({ status: 'sent', code: 250, mxHost: 'mx.example.test', ip: '127.0.0.2', pool: 'transactional', attempt: 1, jobId: job.id });
    const [ev] = await eventually(() => (events('sent', body.messageId as string).length ? events('sent', body.messageId as string) : null));
    expect(ev.id).toBe(resultEventId('org-1', body.messageId as string, job.id));
    expect(ev.data).toMatchObject({ organizationId: 'org-1', recipient: (body.to as string).toLowerCase(), ip: '127.0.0.2', pool: 'transactional', smtpCode: 250, tls: true, mxHost: 'mx.example.test' });
    expect(await t.mta.context.state.breaker.state('org-1')).toMatchObject({ state: 'closed' });
    expect((await t.coord.ringRead('mta:breaker:ring:org-1')).at(-1)).toBe('d');
    expect((await t.mta.context.state.warming.view('127.0.0.2')).sentToday).toBeGreaterThan(0);
  });

  it('hard bounce: completes, suppresses the recipient, posts `bounced` hard; the next job to it is dropped unsent', async () => {
    t.deliverer.answer({ status: 'bounced', hard: true, code: 550, enhancedCode: '5.1.1', reason: 'userunknown', response: '550 5.1.1 no such user', mxHost: 'mx.d.example' });
    const first = await sendAndRun({ to: 'Gone@Hard.example' });
    expect(first.outcome).toEqual({ type: 'complete' });
    expect(t.mta.context.stores.suppression.has('gone@hard.example')).toBe(true);
    expect(await t.mta.context.stores.suppression.get('gone@hard.example')).toMatchObject({ reason: 'hard_bounce', source: `bounce:${first.body.messageId}` });
    const [ev] = await eventually(() => {
      const e = events('bounced', first.body.messageId as string);
      return e.length ? e : null;
    });
    expect(ev.data).toMatchObject({ type: 'hard', reason: 'userunknown', smtpCode: 550, enhancedCode: '5.1.1', recipient: 'gone@hard.example' });
    expect((await t.coord.ringRead('mta:breaker:ring:org-1')).at(-1)).toBe('b');

    const calls = t.deliverer.calls.length;
    const second = await sendAndRun({ to: 'gone@hard.example' });
    expect(second.outcome).toEqual({ type: 'complete' });
    expect(t.deliverer.calls.length).toBe(calls);
    expect(await logsFor(second.body.messageId as string)).toMatchObject([{ status: 'suppressed', reason: 'suppressed: hard_bounce' }]);
  });

  it('soft (5xx, not hard) bounce: completes without suppression', async () => {
    t.deliverer.answer({ status: 'bounced', hard: false, code: 552, reason: 'mesgtoobig', response: '552 too big' });
    const { body, outcome } = await sendAndRun({ to: 'big@soft.example' });
    expect(outcome).toEqual({ type: 'complete' });
    expect(t.mta.context.stores.suppression.has('big@soft.example')).toBe(false);
    await eventually(() => events('bounced', body.messageId as string).some((e) => e.data.type === 'soft'));
  });

  it('deferred (4xx): retries by backoff, gives the org-limit slot back, slows the throttle, logs', async () => {
    const org = `org-defer-${++n}`;
    t.deliverer.answer({ status: 'deferred', code: 451, enhancedCode: '4.7.1', response: '451 try later', connectionFailure: false, reason: 'speeding' });
    const { outcome, job, body } = await sendAndRun({ organizationId: org, to: 'x@slow.example' });
    expect(outcome).toEqual({ type: 'retry', error: '451 4.7.1: 451 try later' });
    expect(job.state).toBe('pending');
    expect(job.attempts).toBe(1);
    expect(job.runAt).toBe(t.clock.now() + 30_000);
    expect((await t.mta.context.state.orgUsage.usage(org)).daily).toBe(0);
    const p = t.mta.context.stores.profiles.resolve('slow.example');
    expect((await t.mta.context.state.throttle.state('127.0.0.2', p, 'slow.example')).rate).toBeCloseTo(22.5);
    expect(await logsFor(body.messageId as string)).toMatchObject([{ status: 'deferred', code: 451, reason: 'speeding' }]);
  });

  it('connection failures feed domain backoff, not the throttle', async () => {
    for (let i = 0; i < 3; i++) {
      t.deliverer.answer({ status: 'deferred', response: 'all MX unreachable', connectionFailure: true });
      await sendAndRun({ to: `u${i}@unreachable.example` });
    }
    expect(await t.mta.context.state.backoff.current('unreachable.example')).toMatchObject({ failures: 3 });
    const p = t.mta.context.stores.profiles.resolve('unreachable.example');
    expect((await t.mta.context.state.throttle.state('127.0.0.2', p, 'unreachable.example')).rate).toBe(30);
  });

  it('a local deferral (our side failed, e.g. no DKIM key) retries and is logged, but feeds no throttle, intel, backoff or breaker', async () => {
    const domain = `local-${++n}.example`;
    const org = `org-local-${n}`;
    const st = t.mta.context.state;
    // Two connection failures of a streak of three, and 19 of the 20 results intel needs.
    await st.backoff.recordFailure(domain);
    await st.backoff.recordFailure(domain);
    for (let i = 0; i < 19; i++) await st.intel.record(domain, 'temp');
    t.deliverer.answer({ status: 'deferred', response: 'no DKIM key for sender.example: every message must be signed', connectionFailure: false, local: true, reason: 'mailererror' });
    const warmedBefore = (await st.warming.view('127.0.0.2')).sentToday;
    const { outcome, job, body } = await sendAndRun({ organizationId: org, to: `x@${domain}` });
    // Nothing was sent: the IP's warming slot is given back.
    expect((await st.warming.view('127.0.0.2')).sentToday).toBe(warmedBefore);

    expect(outcome).toEqual({ type: 'retry', error: 'temporary: no DKIM key for sender.example: every message must be signed' });
    expect(job).toMatchObject({ state: 'pending', attempts: 1 });
    expect(await logsFor(body.messageId as string)).toMatchObject([{ status: 'deferred', reason: 'mailererror' }]);
    expect((await st.orgUsage.usage(org)).daily).toBe(0);
    // Not a 4xx: the throttle keeps its rate and intel stays one result short of a verdict.
    const p = t.mta.context.stores.profiles.resolve(domain);
    expect((await st.throttle.state('127.0.0.2', p, domain)).rate).toBe(p.defaultRate);
    expect(await st.intel.verdict(domain)).toBeNull();
    // Not a connection failure either, and not an answer that ends the streak: one more failure completes it.
    expect(await st.backoff.current(domain)).toBeNull();
    expect(await st.backoff.recordFailure(domain)).toMatchObject({ failures: 3 });
    expect(await t.coord.ringRead(`mta:breaker:ring:${org}`)).toEqual([]);
  });

  it('deferred every time: 5 retries after 30 s, 2 m, 8 m, 30 m and 2 h, then failed as expired, soft `bounced` expired event', async () => {
    t.deliverer.fallback = { status: 'deferred', code: 421, response: '421 busy', connectionFailure: false };
    try {
      let r = await sendAndRun({ to: 'x@busy.example' });
      const claimable = async () => {
        const claimed = await t.mta.context.queue.claim('test-worker', 100);
        for (const j of claimed) await t.mta.context.queue.defer(j, 0, 'only looking');
        return claimed.some((j) => j.id === r.jobId);
      };
      for (const delay of [30_000, 120_000, 480_000, 1_800_000, 7_200_000]) {
        expect(r.outcome.type).toBe('retry');
        expect(r.job.runAt).toBe(t.clock.now() + delay);
        // Not due a millisecond early (the claim finds nothing to give back), due at the step.
        t.clock.advance(delay - 1);
        expect(await claimable()).toBe(false);
        t.clock.advance(1);
        r = await runJob(r.jobId);
      }
      expect(r.outcome).toMatchObject({ type: 'fail' });
      expect(r.job.state).toBe('failed');
      expect(r.job.attempts).toBe(6);
      expect(r.job.history.map((h) => h.outcome)).toEqual(['retry', 'retry', 'retry', 'retry', 'retry', 'failed']);
      const logs = await logsFor(r.body.messageId as string);
      expect(logs.map((l) => l.status)).toEqual([...Array<string>(6).fill('deferred'), 'failed']);
      expect(logs.at(-1)).toMatchObject({ reason: 'expired', hard: false });
      const [ev] = await eventually(() => {
        const e = events('bounced', r.body.messageId as string);
        return e.length ? e : null;
      });
      expect(ev.data).toMatchObject({ type: 'soft', reason: 'expired', smtpCode: 421, attempt: 6 });
    } finally {
      t.deliverer.fallback = { status: 'sent', code: 250, response: '250 ok', mxHost: 'mx.example.test', tls: true };
    }
  });

  it('an engine error retries (attempt consumed) and releases the holds', async () => {
    const org = `org-err-${++n}`;
    t.deliverer.answer(new Error('socket exploded'));
    const { outcome } = await sendAndRun({ organizationId: org, to: 'e@err.example' });
    expect(outcome).toEqual({ type: 'retry', error: 'delivery engine error: socket exploded' });
    expect((await t.mta.context.state.orgUsage.usage(org)).daily).toBe(0);
  });
});

describe('pipeline outcomes', () => {
  it('a phase deferral re-queues after the jittered delay without consuming an attempt', async () => {
    const org = `org-pdefer-${++n}`;
    await t.mta.context.stores.orgLimits.set(org, { hourly: 0 });
    t.clock.set(Date.UTC(2026, 6, 1, 10, 0, 0));
    const low = createDispatcher({
      pipeline: { ...t.mta.pipeline, random: () => 0 }, // jitter at its lower bound: −15 %
      effects: t.mta.effects,
      deliverer: t.deliverer,
      clock: t.clock,
      log: t.services.log,
    });
    const { outcome, job } = await sendAndRun({ organizationId: org, to: 'x@limited.example' }, low);
    expect(outcome).toEqual({ type: 'defer', delayMs: Math.round(3_600_000 * 0.85), reason: 'org_limit: org_limit_hourly' });
    expect(job.state).toBe('pending');
    expect(job.attempts).toBe(0);
    expect(job.runAt).toBe(t.clock.now() + 3_060_000);
    expect(job.history.at(-1)).toMatchObject({ outcome: 'deferred', reason: 'org_limit: org_limit_hourly' });
  });

  it('a group-wide phase deferral (degraded domain) pauses the queue group; a per-organization one does not', async () => {
    const d = `degraded-${++n}.example`;
    for (let i = 0; i < 20; i++) await t.mta.context.state.intel.record(d, 'temp');
    const calls = t.deliverer.calls.length;
    const { outcome, job } = await sendAndRun({ to: `x@${d}` });
    expect(outcome).toEqual({ type: 'defer', delayMs: 120_000, reason: 'smtp_intel: smtp_intel_degraded', scope: 'group' });
    expect(job).toMatchObject({ state: 'pending', attempts: 0, runAt: t.clock.now() + 120_000 });
    expect(job.history.at(-1)).toMatchObject({ outcome: 'deferred', scope: 'group' });
    expect(await t.mta.context.queue.pausedUntil(job.groupKey)).toBe(t.clock.now() + 120_000);
    // A second job of the group is not claimable until the pause passes.
    const second = await t.call('POST', '/send', emailJob({ to: `y@${d}` }));
    const claimed = await t.mta.context.queue.claim('test-worker', 100);
    expect(claimed.map((j) => j.id)).not.toContain(second.body.data.jobId);
    for (const j of claimed) await t.mta.context.queue.defer(j, 0, 'not this test');
    expect(t.deliverer.calls.length).toBe(calls);

    const org = `org-capped-${++n}`;
    await t.mta.context.stores.orgLimits.set(org, { hourly: 0 });
    const capped = await sendAndRun({ organizationId: org, to: 'x@capped.example' });
    expect(capped.outcome).not.toHaveProperty('scope');
    expect(await t.mta.context.queue.pausedUntil(capped.job.groupKey)).toBeNull();
  });

  it('a screening drop ends the job as screened without delivery', async () => {
    const calls = t.deliverer.calls.length;
    const { outcome, body, job } = await sendAndRun({ dkimDomain: 'elsewhere.example' });
    expect(outcome).toEqual({ type: 'complete' });
    expect(job.state).toBe('completed');
    expect(t.deliverer.calls.length).toBe(calls);
    expect(await logsFor(body.messageId as string)).toMatchObject([{ status: 'screened', reason: 'dkim_domain_mismatch' }]);
  });
});

describe('metrics', () => {
  it('counts phase outcomes, sends and job outcomes', async () => {
    const r = await t.call('GET', '/metrics', undefined, null);
    expect(r.body).toMatch(/^mta_pipeline_phase_outcomes_total\{phase="content_screening",outcome="continue"\} [1-9]\d*$/m);
    expect(r.body).toMatch(/^mta_pipeline_phase_outcomes_total\{phase="content_screening",outcome="drop"\} [1-9]\d*$/m);
    expect(r.body).toMatch(/^mta_pipeline_phase_outcomes_total\{phase="org_limit",outcome="defer"\} [1-9]\d*$/m);
    expect(r.body).toMatch(/^mta_sends_total\{status="sent",domain="default",pool="transactional"\} [1-9]\d*$/m);
    expect(r.body).toMatch(/^mta_sends_total\{status="bounced",domain="default",pool="transactional"\} [1-9]\d*$/m);
    expect(r.body).toMatch(/^mta_jobs_total\{outcome="suppressed"\} 1$/m);
    expect(r.body).toMatch(/^mta_webhook_events_total\{event="sent",outcome="delivered"\} [1-9]\d*$/m);
    // Scraping twice does not count twice.
    const again = await t.call('GET', '/metrics', undefined, null);
    const pick = (s: string) => /^mta_pipeline_phase_outcomes_total\{phase="content_screening",outcome="continue"\} (\d+)$/m.exec(s)![1];
    expect(pick(again.body)).toBe(pick(r.body));
  });
});

describe('the worker', () => {
  it('runs queued jobs through pipeline and delivery once started', async () => {
    await t.start();
    const body = emailJob({ to: 'worker@run.example' });
    const r = await t.call('POST', '/send', body);
    await eventually(async () => (await t.mta.context.queue.get(r.body.data.jobId))?.state === 'completed');
    expect(t.deliverer.calls.some((c) => c.message.messageId === body.messageId)).toBe(true);
  });
});
