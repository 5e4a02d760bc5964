/** Events to the backend: signed posts, retries through the mta-events queue, the dead-letter queue and /dlq. */
import { createHmac } from 'node:crypto';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { Job } from '../../src/shared/queue/types.js';
import { EVENT_POSTS, type EventJob } from '../../src/mta/notifier.js';
import { startHttpReceiver, type HttpReceiver } from '../harness/http-receiver.js';
import { startMta, type TestMta } from './helpers.js';

const SECRET = 'notifier-secret';
let t: TestMta;
let backend: HttpReceiver;

beforeAll(async () => {
  backend = await startHttpReceiver();
  t = await startMta({ env: { MTA_WEBHOOK_URL: `${backend.url}/webhooks/mta`, MTA_WEBHOOK_SECRET: SECRET } });
});
afterAll(async () => {
  await t?.close();
  await backend?.close();
});
beforeEach(() => backend.reset());

const notifier = () => t.mta.context.notifier;
const eventsQueue = () => notifier().queue;

/** Claims the due event jobs and runs the notifier's handler on each (what its worker does). */
async function runRetries(): Promise<Job<EventJob>[]> {
  const jobs = await eventsQueue().claim('test', 100);
  for (const j of jobs) await eventsQueue().apply(j, await notifier().handle(j));
  return jobs;
}

describe('posting events', () => {
  it('posts { event, timestamp, data } with a valid X-MTA-Signature over <timestamp>.<body>', async () => {
    await notifier().emit('sent', { messageId: 'n-1' });
    const [req] = await backend.waitFor(1);
    expect(req!.method).toBe('POST');
    expect(req!.url).toBe('/webhooks/mta');
    expect(req!.headers['content-type']).toBe('application/json');
    const raw = req!.rawBody.toString();
    expect(JSON.parse(raw)).toEqual({ event: 'sent', timestamp: new Date(t.clock.now()).toISOString(), data: { messageId: 'n-1' } });
    const ts = req!.headers['x-mta-timestamp'] as string;
    expect(ts).toBe(String(Math.floor(t.clock.now() / 1000)));
    expect(req!.headers['x-mta-signature']).toBe(createHmac('sha256', SECRET).update(`${ts}.${raw}`).digest('hex'));
    expect(await eventsQueue().depth()).toBe(0);
  });

  it('queues a failed post for retry and delivers it on a later attempt', async () => {
    backend.respondWith([503]);
    await notifier().emit('bounced', { messageId: 'n-2' });
    expect(backend.requests).toHaveLength(1);
    expect(await runRetries()).toHaveLength(0); // not due before the first backoff (30 s)
    t.clock.advance(30_000);
    const jobs = await runRetries();
    expect(jobs).toHaveLength(1);
    expect(backend.requests).toHaveLength(2);
    expect((await eventsQueue().get(jobs[0]!.id))!.state).toBe('completed');
    // The retry is signed afresh with the time of the new post.
    expect(backend.requests[1]!.headers['x-mta-timestamp']).toBe(String(Math.floor(t.clock.now() / 1000)));
  });

  it('events of one event-loop turn leave in one signed POST, a JSON array in emit order', async () => {
    const before = await eventsQueue().depth();
    await Promise.all(['b-1', 'b-2', 'b-3', 'b-4', 'b-5'].map((messageId) => notifier().emit('sent', { messageId })));
    expect(backend.requests).toHaveLength(1);
    const [req] = backend.requests;
    const raw = req!.rawBody.toString();
    expect((JSON.parse(raw) as { data: { messageId: string } }[]).map((e) => e.data.messageId)).toEqual(['b-1', 'b-2', 'b-3', 'b-4', 'b-5']);
    const ts = req!.headers['x-mta-timestamp'] as string;
    expect(req!.headers['x-mta-signature']).toBe(createHmac('sha256', SECRET).update(`${ts}.${raw}`).digest('hex'));
    expect(await eventsQueue().depth()).toBe(before);
  });

  it('a batch refused with a 4xx is posted event by event; only the event refused alone is queued', async () => {
    const before = await eventsQueue().depth();
    // The array is refused; then c-2 alone is refused as well, c-1 and c-3 are taken.
    backend.setResponder((req) => {
      const body = JSON.parse(req.rawBody.toString());
      return Array.isArray(body) || body.data.messageId === 'c-2' ? 400 : 200;
    });
    await Promise.all(['c-1', 'c-2', 'c-3'].map((messageId) => notifier().emit('sent', { messageId })));
    expect(backend.requests).toHaveLength(4);
    expect(backend.requests.slice(1).map((r) => JSON.parse(r.rawBody.toString()).data.messageId).sort()).toEqual(['c-1', 'c-2', 'c-3']);
    expect(await eventsQueue().depth()).toBe(before + 1);
    backend.setResponder(undefined);
    t.clock.advance(30_000);
    const jobs = await runRetries();
    expect(jobs.map((j) => (j.payload.body.data as { messageId: string }).messageId)).toEqual(['c-2']);
  });

  it('a batch that fails otherwise (here a 503; a network error takes the same path) queues every event for retry', async () => {
    const before = await eventsQueue().depth();
    backend.respondWith([503]);
    await Promise.all(['d-1', 'd-2', 'd-3'].map((messageId) => notifier().emit('bounced', { messageId })));
    expect(backend.requests).toHaveLength(1);
    expect(await eventsQueue().depth()).toBe(before + 3);
    t.clock.advance(30_000);
    const jobs = await runRetries();
    expect(jobs.map((j) => (j.payload.body.data as { messageId: string }).messageId).sort()).toEqual(['d-1', 'd-2', 'd-3']);
    expect(backend.requests).toHaveLength(4);
    expect(await eventsQueue().depth()).toBe(before);
  });

  it('caps the posts in flight: events emitted meanwhile wait and leave together in the next free slot', async () => {
    const before = await eventsQueue().depth();
    backend.setResponder(() => ({ delayMs: 300 }));
    const turns = EVENT_POSTS.maxInFlight + 6;
    const emitted: Promise<void>[] = [];
    const ids: string[] = [];
    for (let turn = 0; turn < turns; turn++) {
      for (let i = 0; i < 10; i++) {
        ids.push(`bp-${turn}-${i}`);
        emitted.push(notifier().emit('sent', { messageId: ids.at(-1) }));
      }
      await new Promise((r) => setImmediate(r)); // the next event-loop turn
    }
    // Without the cap every turn would have its own post, all of them in flight at once.
    await new Promise((r) => setTimeout(r, 100));
    expect(backend.requests).toHaveLength(EVENT_POSTS.maxInFlight);
    await Promise.all(emitted);
    const sizes = backend.requests.map((r) => (JSON.parse(r.rawBody.toString()) as unknown[]).length);
    expect(sizes).toEqual([...Array(EVENT_POSTS.maxInFlight).fill(10), 60]);
    const posted = backend.requests.flatMap((r) => (JSON.parse(r.rawBody.toString()) as { data: { messageId: string } }[]).map((e) => e.data.messageId));
    expect(posted).toEqual(ids);
    expect(await eventsQueue().depth()).toBe(before);
  });

  it('sends nothing and queues nothing when MTA_WEBHOOK_URL is unset', async () => {
    const quiet = await startMta({ db: t.db });
    try {
      const before = await eventsQueue().depth();
      await quiet.mta.context.notifier.emit('sent', { messageId: 'n-3' });
      expect(backend.requests).toHaveLength(0);
      expect(await eventsQueue().depth()).toBe(before);
    } finally {
      await quiet.close();
    }
  });
});

describe('dead-letter queue', () => {
  async function deadLetter(messageId: string): Promise<string> {
    backend.setResponder(() => 500);
    await notifier().emit('sent', { messageId });
    for (const delay of [30_000, 120_000, 600_000, 1_800_000, 3_600_000, 3_600_000]) {
      t.clock.advance(delay);
      await runRetries();
    }
    backend.setResponder(undefined);
    const list = await t.call('GET', '/dlq');
    const entry = list.body.data.find((e: any) => e.body.data.messageId === messageId);
    expect(entry).toBeDefined();
    return entry.id;
  }

  it('takes an event after the last failed retry, with its body, error and attempts', async () => {
    const created = t.clock.now();
    const id = await deadLetter('dl-a');
    const entry = (await t.call('GET', '/dlq')).body.data.find((e: any) => e.id === id);
    expect(entry).toMatchObject({ event: 'sent', error: 'HTTP 500', attempts: 7, body: { event: 'sent', data: { messageId: 'dl-a' } }, createdAt: new Date(created).toISOString() });
    const stats = await t.call('GET', '/dlq/stats');
    expect(stats.body.data).toMatchObject({ total: 1, oldestCreatedAt: new Date(created).toISOString(), oldestAgeMs: t.clock.now() - created });
  });

  it('retries one entry: it leaves the DLQ, is queued and delivered', async () => {
    const id = (await t.call('GET', '/dlq')).body.data[0].id;
    const r = await t.call('POST', `/dlq/${id}/retry`);
    expect(r.status).toBe(202);
    expect(r.body.data).toEqual({ id, status: 'queued' });
    expect((await t.call('GET', '/dlq/stats')).body.data.total).toBe(0);
    await runRetries();
    expect(backend.requests.some((q) => JSON.parse(q.rawBody.toString()).data.messageId === 'dl-a')).toBe(true);
    expect((await t.call('POST', `/dlq/${id}/retry`)).status).toBe(404);
  });

  it('retries all, and discards one', async () => {
    await deadLetter('dl-b');
    const keep = await deadLetter('dl-c');
    expect((await t.call('GET', '/dlq')).body.total).toBe(2);
    const del = await t.call('DELETE', `/dlq/${keep}`);
    expect(del.body.data).toEqual({ id: keep, deleted: true });
    expect((await t.call('DELETE', `/dlq/${keep}`)).status).toBe(404);
    const all = await t.call('POST', '/dlq/retry-all');
    expect(all.status).toBe(202);
    expect(all.body.data).toEqual({ queued: 1 });
    expect((await t.call('GET', '/dlq')).body).toEqual({ data: [], total: 0 });
    backend.reset();
    await runRetries();
    expect(backend.requests.map((q) => JSON.parse(q.rawBody.toString()).data.messageId)).toEqual(['dl-b']);
  });

  it('lists with limit and offset', async () => {
    await deadLetter('dl-d');
    await deadLetter('dl-e');
    const first = await t.call('GET', '/dlq?limit=1');
    const second = await t.call('GET', '/dlq?limit=1&offset=1');
    expect(first.body.total).toBe(2);
    expect([first.body.data[0].body.data.messageId, second.body.data[0].body.data.messageId]).toEqual(['dl-d', 'dl-e']);
  });
});
