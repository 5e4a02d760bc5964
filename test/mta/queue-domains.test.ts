/**
 * GET /queue/domains: queued work by destination domain on real PostgreSQL — counts, the oldest
 * job, the last remote reply from the delivery log, a group pause with the reason its deferring
 * job recorded, cursor pagination, master key only.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { emailJob, startMta, type TestMta } from './helpers.js';

let t: TestMta;
beforeAll(async () => {
  t = await startMta();
});
afterAll(async () => t?.close());

describe('/queue/domains', () => {
  it('per domain: pending, delayed, active, oldest, last reply, pause and reason; paged by cursor', async () => {
    const send = async (to: string) => (await t.call('POST', '/send', emailJob({ to, organizationId: 'org-qd' }))).body.data.jobId as string;
    const a = await send('a@qd-one.example');
    await send('b@qd-one.example');
    t.clock.advance(1000);
    const c = await send('c@qd-two.example');
    await send('d@qd-two.example');
    await send('e@qd-three.example');
    const enqueuedOne = (await t.call('GET', `/queue/jobs/${a}`)).body.data.createdAt;
    const enqueuedTwo = (await t.call('GET', `/queue/jobs/${c}`)).body.data.createdAt;

    // One claim per group: qd-one's job is deferred alone after a 4xx reply (logged as the
    // pipeline logs it); qd-two's group is paused; qd-three's job stays active.
    const claimed = await t.mta.context.queue.claim('w', 500);
    expect(claimed.map((j) => j.payload.domain).sort()).toEqual(['qd-one.example', 'qd-three.example', 'qd-two.example']);
    const now = t.clock.now();
    await t.mta.context.stores.logs.append({
      messageId: 'qd-m1', jobId: a, organizationId: 'org-qd', recipient: 'a@qd-one.example', domain: 'qd-one.example', pool: 'transactional', ip: '127.0.0.2',
      status: 'deferred', code: 451, enhancedCode: '4.7.1', reason: 'blocked', response: '451 4.7.1 Greylisted, try again later', mxHost: 'mx.qd-one.example', attempt: 1, at: now,
    });
    for (const j of claimed) {
      if (j.payload.domain === 'qd-one.example') await t.mta.context.queue.defer(j, 60_000, 'greylisted');
      if (j.payload.domain === 'qd-two.example') await t.mta.context.queue.defer(j, 300_000, 'domain_backoff', { scope: 'group' });
    }

    const res = await t.call('GET', '/queue/domains');
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      data: [
        { domain: 'qd-one.example', pending: 1, delayed: 1, active: 0, oldestAt: enqueuedOne, lastReply: { code: 451, text: '451 4.7.1 Greylisted, try again later', at: new Date(now).toISOString() }, paused: null },
        { domain: 'qd-three.example', pending: 0, delayed: 0, active: 1, oldestAt: null, lastReply: null, paused: null },
        { domain: 'qd-two.example', pending: 0, delayed: 2, active: 0, oldestAt: enqueuedTwo, lastReply: null, paused: { reason: 'domain_backoff', until: new Date(now + 300_000).toISOString() } },
      ],
      pagination: { limit: 50, cursor: null, isDone: true },
    });

    // Cursor pagination: two pages of one and two, nothing repeated or lost.
    const p1 = await t.call('GET', '/queue/domains?limit=1');
    expect(p1.body.data.map((d: any) => d.domain)).toEqual(['qd-one.example']);
    expect(p1.body.pagination).toEqual({ limit: 1, cursor: 'qd-one.example', isDone: false });
    const p2 = await t.call('GET', `/queue/domains?limit=2&cursor=${p1.body.pagination.cursor}`);
    expect(p2.body.data.map((d: any) => d.domain)).toEqual(['qd-three.example', 'qd-two.example']);
    expect(p2.body.pagination.isDone).toBe(true);

    // Once the pause has passed the group's jobs count as due again.
    t.clock.advance(301_000);
    const later = (await t.call('GET', '/queue/domains')).body.data;
    expect(later.find((d: any) => d.domain === 'qd-two.example')).toMatchObject({ pending: 2, delayed: 0, paused: null });
    expect(later.find((d: any) => d.domain === 'qd-one.example')).toMatchObject({ pending: 2, delayed: 0 });
  });

  it('bounded and master-only: limit over 200 and unknown parameters are refused in the envelope', async () => {
    const big = await t.call('GET', '/queue/domains?limit=201');
    expect(big.status).toBe(400);
    expect(big.body.error).toMatchObject({ category: 'invalid_input', message: expect.any(String) });
    expect((await t.call('GET', '/queue/domains?offset=1')).status).toBe(400);
    const anon = await t.call('GET', '/queue/domains', undefined, null);
    expect(anon.status).toBe(401);
  });
});
