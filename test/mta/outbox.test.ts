/**
 * Events to the backend through the outbox: signed posts of `{ id, event, timestamp, data }`,
 * rows deleted once taken, retries and the dead-letter queue as states of rows, the lease that
 * lets another instance post what a dead one wrote, and the log row + event written together.
 */
import { createHmac } from 'node:crypto';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { MTA_EVENT, type MtaEventData } from '../../src/shared/contracts/mta.js';
import { DEFAULT_POLICY } from '../../src/mta/policy.js';
import { OutboxRelay } from '../../src/mta/outbox/relay.js';
import { outboxEvent, resultEventId } from '../../src/mta/outbox/store.js';
import { silentLogger } from '../../src/shared/log.js';
import { startHttpReceiver, type HttpReceiver } from '../harness/http-receiver.js';
import { eventually, startMta, type TestMta } from './helpers.js';

const SECRET = 'outbox-secret';
const POSTS = DEFAULT_POLICY.events.posts;
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

const relay = () => t.mta.context.relay;
const breaker = (organizationId: string): MtaEventData['org.circuit_breaker'] => ({
  organizationId,
  severity: 'critical',
  state: 'open',
  window: 'short',
  signal: 'bounce',
  rate: 0.2,
  threshold: 0.1,
  sample: 50,
  cooldownMs: 60_000,
  openedAt: new Date(t.clock.now()).toISOString(),
});
const emit = async (org: string) => {
  await relay().emit(MTA_EVENT.orgCircuitBreaker, breaker(org));
};
const orgOf = (body: string) => (JSON.parse(body) as { data: { organizationId: string } }).data.organizationId;
const rows = async () =>
  (await t.db.pool.query<{ id: string; state: string; attempts: number; next_at: Date }>('SELECT id, state, attempts, next_at FROM mta_outbox ORDER BY seq')).rows;
const pending = async () => (await rows()).filter((r) => r.state === 'pending');

async function settled(): Promise<void> {
  await relay().settle();
}

describe('posting', () => {
  it('posts { id, event, timestamp, data } signed over <timestamp>.<body>, and deletes the row once taken', async () => {
    await emit('o-1');
    const [req] = await backend.waitFor(1);
    await settled();
    const raw = req!.rawBody.toString();
    const body = JSON.parse(raw);
    expect(body).toEqual({ id: expect.stringMatching(/^mevt_/), event: 'org.circuit_breaker', timestamp: new Date(t.clock.now()).toISOString(), data: breaker('o-1') });
    const ts = req!.headers['x-mta-timestamp'] as string;
    expect(ts).toBe(String(Math.floor(t.clock.now() / 1000)));
    expect(req!.headers['x-mta-signature']).toBe(createHmac('sha256', SECRET).update(`${ts}.${raw}`).digest('hex'));
    expect(await rows()).toEqual([]);
  });

  it('keeps a failed event as a pending row and posts it again, with the same id, when its backoff has passed', async () => {
    backend.respondWith([503]);
    await emit('o-2');
    await backend.waitFor(1);
    await settled();
    const [row] = await rows();
    expect(row).toMatchObject({ state: 'pending', attempts: 1 });
    expect(row!.next_at.getTime()).toBe(t.clock.now() + 30_000);
    await relay().poll();
    expect(backend.requests).toHaveLength(1); // not due yet
    t.clock.advance(30_000);
    await relay().poll();
    await settled();
    expect(backend.requests).toHaveLength(2);
    const [first, second] = backend.requests.map((r) => JSON.parse(r.rawBody.toString()));
    expect(second.id).toBe(first.id);
    expect(backend.requests[1]!.headers['x-mta-timestamp']).toBe(String(Math.floor(t.clock.now() / 1000)));
    expect(await rows()).toEqual([]);
  });

  it('while the backend does not answer, fresh events are held and one probe goes per poll interval; the first answered post sends the held ones', async () => {
    const poll = DEFAULT_POLICY.events.pollMs;
    backend.setResponder(() => 503);
    await emit('h-1');
    await backend.waitFor(1);
    await settled();
    await emit('h-2');
    await emit('h-3');
    await settled();
    expect(backend.requests).toHaveLength(1); // held: no post per batch while the backend is down
    expect(await pending()).toHaveLength(3); // in the table all the same
    t.clock.advance(poll);
    await emit('h-4'); // a poll interval on: this batch goes, as a probe
    await backend.waitFor(2);
    await settled();
    expect(orgOf(backend.requests[1]!.rawBody.toString())).toBe('h-4');
    backend.setResponder(undefined);
    await emit('h-5'); // up again, but nothing has answered yet: held
    await settled();
    expect(backend.requests).toHaveLength(2);
    t.clock.advance(poll);
    await emit('h-6'); // the probe is answered: the hold ends and the held events go at once
    await settled();
    await settled();
    const orgs = (r: { rawBody: Buffer }) => {
      const body = JSON.parse(r.rawBody.toString()) as { data: { organizationId: string } } | { data: { organizationId: string } }[];
      return (Array.isArray(body) ? body : [body]).map((e) => e.data.organizationId);
    };
    expect(backend.requests.slice(2).flatMap(orgs).sort()).toEqual(['h-2', 'h-3', 'h-5', 'h-6']);
    // The two that failed wait for their backoff, then the poll posts them; fresh events post at once again.
    expect((await pending()).length).toBe(2);
    await emit('h-7');
    await settled();
    expect(orgs(backend.requests.at(-1)!)).toEqual(['h-7']);
    t.clock.advance(30_000);
    await relay().poll();
    await settled();
    expect(backend.requests.slice(2).flatMap(orgs).sort()).toEqual(['h-1', 'h-2', 'h-3', 'h-4', 'h-5', 'h-6', 'h-7']);
    expect(await rows()).toEqual([]);
  });

  it('holds at most policy.events.held in memory; the rest wait in the table for the poll', async () => {
    const policy = { ...DEFAULT_POLICY.events, held: { maxItems: 2, maxBytes: 1024 * 1024 } };
    const own = new OutboxRelay(t.mta.context.stores.outbox, { secret: SECRET, policy }, t.clock, silentLogger, null);
    own.start(`${backend.url}/webhooks/mta`);
    const ownEmit = (org: string) => own.emit(MTA_EVENT.orgCircuitBreaker, breaker(org));
    try {
      backend.setResponder(() => 503);
      t.clock.advance(policy.pollMs);
      await ownEmit('m-1');
      await backend.waitFor(1);
      await own.settle();
      for (const org of ['m-2', 'm-3', 'm-4']) await ownEmit(org);
      await own.settle();
      expect(backend.requests).toHaveLength(1);
      backend.setResponder(undefined);
      t.clock.advance(policy.pollMs);
      await ownEmit('m-5'); // answered: the two held in memory go at once, m-4 waits for its lease
      await own.settle();
      const posted = () => backend.requests.slice(1).flatMap((r) => {
        const body = JSON.parse(r.rawBody.toString()) as { data: { organizationId: string } } | { data: { organizationId: string } }[];
        return (Array.isArray(body) ? body : [body]).map((e) => e.data.organizationId);
      });
      expect(posted().sort()).toEqual(['m-2', 'm-3', 'm-5']);
      t.clock.advance(policy.leaseMs);
      await own.poll();
      // The suite's own relay polls the same table every second and may be the one to post them.
      await eventually(() => posted().length >= 5);
      await own.settle();
      await settled();
      expect(posted().sort()).toEqual(['m-1', 'm-2', 'm-3', 'm-4', 'm-5']);
      expect(await rows()).toEqual([]);

      // A longer outage: rows past their lease leave the memory, so the latest are held.
      backend.setResponder(() => 503);
      t.clock.advance(policy.pollMs);
      await ownEmit('n-1'); // the probe, unanswered: a hold starts
      await own.settle();
      await ownEmit('n-2');
      await ownEmit('n-3'); // held: the bound is full
      t.clock.advance(policy.leaseMs);
      await ownEmit('n-4'); // a probe, unanswered
      await own.settle();
      await ownEmit('n-5'); // n-2 and n-3 are past their lease: dropped, n-5 is held
      await own.settle();
      const before = backend.requests.length;
      backend.setResponder(undefined);
      t.clock.advance(policy.pollMs);
      await ownEmit('n-6'); // answered: n-5 goes at once
      await own.settle();
      expect(backend.requests.slice(before).flatMap((r) => {
        const body = JSON.parse(r.rawBody.toString()) as { data: { organizationId: string } } | { data: { organizationId: string } }[];
        return (Array.isArray(body) ? body : [body]).map((e) => e.data.organizationId);
      }).filter((o) => o === 'n-5' || o === 'n-6').sort()).toEqual(['n-5', 'n-6']);
      t.clock.advance(policy.leaseMs);
      await own.poll();
      await eventually(async () => (await rows()).length === 0);
    } finally {
      await own.stop();
    }
  });

  it('a 4xx is an answer: it starts no hold, and it ends one', async () => {
    backend.setResponder(() => 400);
    await emit('r-1');
    await backend.waitFor(1);
    await settled();
    await emit('r-2'); // the backend answered: posted at once
    await backend.waitFor(2);
    await settled();
    backend.setResponder(() => 503);
    t.clock.advance(DEFAULT_POLICY.events.pollMs);
    await emit('r-3');
    await backend.waitFor(3);
    await settled();
    await emit('r-4'); // no answer: held
    await settled();
    expect(backend.requests).toHaveLength(3);
    backend.setResponder(() => 400);
    t.clock.advance(DEFAULT_POLICY.events.pollMs);
    await emit('r-5'); // the probe is refused, so answered: the hold ends, r-4 goes
    await backend.waitFor(5);
    await settled();
    expect(backend.requests.slice(3).map((r) => orgOf(r.rawBody.toString())).sort()).toEqual(['r-4', 'r-5']);
    backend.setResponder(undefined);
    t.clock.advance(30_000);
    await relay().poll();
    await settled();
    expect(await rows()).toEqual([]);
  });

  it('events of one event-loop turn leave in one POST, a JSON array in emit order', async () => {
    await Promise.all(['b-1', 'b-2', 'b-3', 'b-4', 'b-5'].map(emit));
    await backend.waitFor(1);
    await settled();
    expect(backend.requests).toHaveLength(1);
    const list = JSON.parse(backend.requests[0]!.rawBody.toString()) as { data: { organizationId: string } }[];
    expect(list.map((e) => e.data.organizationId)).toEqual(['b-1', 'b-2', 'b-3', 'b-4', 'b-5']);
    expect(await rows()).toEqual([]);
  });

  it('an array refused with a 4xx is posted event by event; only the event refused alone stays pending', async () => {
    backend.setResponder((req) => {
      const body = JSON.parse(req.rawBody.toString());
      return Array.isArray(body) || body.data.organizationId === 'c-2' ? 400 : 200;
    });
    await Promise.all(['c-1', 'c-2', 'c-3'].map(emit));
    await backend.waitFor(4);
    await settled();
    expect(backend.requests.slice(1).map((r) => orgOf(r.rawBody.toString())).sort()).toEqual(['c-1', 'c-2', 'c-3']);
    expect(await pending()).toHaveLength(1);
    backend.setResponder(undefined);
    t.clock.advance(30_000);
    backend.reset();
    await relay().poll();
    await settled();
    expect(backend.requests.map((r) => orgOf(r.rawBody.toString()))).toEqual(['c-2']);
    expect(await rows()).toEqual([]);
  });

  it('caps the posts in flight: events emitted meanwhile wait and leave together in the next free slot', async () => {
    backend.setResponder(() => ({ delayMs: 300 }));
    const turns = POSTS.maxInFlight + 6;
    const ids: string[] = [];
    for (let turn = 0; turn < turns; turn++) {
      for (let i = 0; i < 10; i++) {
        ids.push(`bp-${turn}-${i}`);
        void emit(ids.at(-1)!);
      }
      await new Promise((r) => setImmediate(r));
    }
    await new Promise((r) => setTimeout(r, 150));
    expect(backend.requests.length).toBeLessThanOrEqual(POSTS.maxInFlight);
    await settled();
    await new Promise((r) => setTimeout(r, 50));
    await settled();
    const posted = backend.requests.flatMap((r) => (JSON.parse(r.rawBody.toString()) as { data: { organizationId: string } }[]).map((e) => e.data.organizationId));
    expect(posted.sort()).toEqual([...ids].sort());
    // Far fewer posts than turns: while every slot was busy, events gathered.
    expect(backend.requests.length).toBeLessThan(turns);
    expect(await rows()).toEqual([]);
  });

  it('writes and sends nothing when MTA_WEBHOOK_URL is unset', async () => {
    const quiet = await startMta({ db: t.db });
    try {
      quiet.mta.context.relay.start(undefined); // as the MTA's start does with no peer URL
      await quiet.mta.context.relay.emit(MTA_EVENT.orgCircuitBreaker, breaker('n-3'));
      await quiet.mta.context.relay.settle();
      expect(backend.requests).toHaveLength(0);
      expect(await rows()).toEqual([]);
    } finally {
      await quiet.close();
    }
  });
});

describe('nothing is lost with the process', () => {
  it('rows a stopped (or killed) relay wrote but never posted are posted by another instance once their lease ends', async () => {
    // Written as the delivery path writes them, leased to an instance that then went away.
    const store = t.mta.context.stores.outbox;
    const ev = outboxEvent(MTA_EVENT.orgCircuitBreaker, breaker('lost-1'), t.clock.now());
    expect([...(await store.insert([ev]))]).toEqual([ev.id]);
    const other = await startMta({ db: t.db, clock: t.clock, env: { MTA_WEBHOOK_URL: `${backend.url}/webhooks/mta`, MTA_WEBHOOK_SECRET: SECRET } });
    try {
      await other.mta.context.relay.poll();
      expect(backend.requests).toHaveLength(0); // still leased to the writer
      t.clock.advance(DEFAULT_POLICY.events.leaseMs);
      await other.mta.context.relay.poll();
      await other.mta.context.relay.settle();
      expect(backend.requests.map((r) => JSON.parse(r.rawBody.toString()).id)).toEqual([ev.id]);
      expect(await rows()).toEqual([]);
    } finally {
      await other.close();
    }
  });

  it('a delivery log row and its event are one write; the same result event written again (a re-run) is kept once while pending, and posted with the same id', async () => {
    const id = resultEventId('org-x', 'msg-x', '42');
    const data: MtaEventData['sent'] = {
      messageId: 'msg-x', jobId: '42', organizationId: 'org-x', campaignId: null, recipient: 'a@example.test', domain: 'example.test',
      pool: 'transactional', ip: '127.0.0.2', mxHost: 'mx.example.test', smtpCode: 250, smtpResponse: '250 ok', tls: true, attempt: 1,
    };
    const entry = { messageId: 'msg-x', jobId: '42', organizationId: 'org-x', recipient: 'a@example.test', domain: 'example.test', pool: 'transactional', ip: '127.0.0.2', status: 'sent' as const, at: t.clock.now() };
    // The backend is slow: the first post is still in flight when the re-run writes its event.
    backend.setResponder(() => ({ delayMs: 300 }));
    await t.mta.context.stores.logs.append(entry, outboxEvent(MTA_EVENT.sent, data, t.clock.now(), id));
    await t.mta.context.stores.logs.append({ ...entry, attempt: 2 }, outboxEvent(MTA_EVENT.sent, { ...data, attempt: 2 }, t.clock.now(), id));
    expect((await rows()).map((r) => r.id)).toEqual([id]);
    await backend.waitFor(1);
    await settled();
    const logs = await t.db.pool.query('SELECT attempt FROM mta_delivery_log WHERE message_id = $1', ['msg-x']);
    expect(logs.rows).toHaveLength(2);
    expect(backend.requests).toHaveLength(1);
    expect(JSON.parse(backend.requests[0]!.rawBody.toString())).toMatchObject({ id, event: 'sent', data: { attempt: 1 } });
    expect(await rows()).toEqual([]);
    // Once it was taken, a later re-run posts it again — under the same id, which the backend applies once.
    backend.setResponder(undefined);
    await t.mta.context.stores.logs.append({ ...entry, attempt: 3 }, outboxEvent(MTA_EVENT.sent, { ...data, attempt: 3 }, t.clock.now(), id));
    await backend.waitFor(2);
    await settled();
    expect(JSON.parse(backend.requests[1]!.rawBody.toString()).id).toBe(id);
  });

  it('a log write that fails (PostgreSQL refuses a NUL) writes no event either', async () => {
    const bad = { messageId: 'msg-y', jobId: '43', organizationId: 'org-y', recipient: 'b\u0000@example.test', domain: 'example.test', pool: null, ip: null, status: 'sent' as const, at: t.clock.now() };
    const ev = outboxEvent(MTA_EVENT.orgCircuitBreaker, breaker('org-y'), t.clock.now());
    await expect(t.mta.context.stores.logs.append(bad, ev)).rejects.toThrow();
    expect((await t.db.pool.query('SELECT 1 FROM mta_outbox WHERE id = $1', [ev.id])).rows).toHaveLength(0);
  });
});

describe('dead-letter queue (/dlq): dead rows of the outbox', () => {
  async function deadLetter(org: string): Promise<string> {
    backend.setResponder(() => 500);
    // A poll interval on: an earlier test's failures left the relay holding fresh events, and
    // this one must be posted (as a probe) to start its attempts now.
    t.clock.advance(DEFAULT_POLICY.events.pollMs);
    await emit(org);
    await backend.waitFor(1);
    await settled();
    for (const delay of [30_000, 120_000, 600_000, 1_800_000, 3_600_000, 3_600_000]) {
      t.clock.advance(delay);
      await relay().poll();
      await settled();
    }
    backend.setResponder(undefined);
    const list = await t.call('GET', '/dlq');
    const entry = list.body.data.find((e: any) => e.body.data.organizationId === org);
    expect(entry).toBeDefined();
    return entry.id;
  }

  it('takes an event after its last failed post, with its body, error and attempts', async () => {
    const created = t.clock.now() + DEFAULT_POLICY.events.pollMs; // deadLetter emits a poll interval on
    const id = await deadLetter('dl-a');
    const entry = (await t.call('GET', '/dlq')).body.data.find((e: any) => e.id === id);
    expect(entry).toMatchObject({ event: 'org.circuit_breaker', error: 'HTTP 500', attempts: 7, body: { id, event: 'org.circuit_breaker', data: { organizationId: 'dl-a' } }, createdAt: new Date(created).toISOString() });
    const stats = await t.call('GET', '/dlq/stats');
    expect(stats.body.data).toMatchObject({ total: 1, oldestCreatedAt: new Date(created).toISOString(), oldestAgeMs: t.clock.now() - created });
    // A dead row is not posted again by the relay.
    backend.reset();
    t.clock.advance(10 * 3_600_000);
    await relay().poll();
    expect(backend.requests).toHaveLength(0);
  });

  it('retries one entry: it leaves the DLQ and is delivered, with a full round of attempts', async () => {
    const id = (await t.call('GET', '/dlq')).body.data[0].id;
    backend.respondWith([500]);
    const r = await t.call('POST', `/dlq/${id}/retry`);
    expect(r.status).toBe(202);
    expect(r.body.data).toEqual({ id, status: 'queued' });
    await relay().poll();
    await settled();
    expect((await t.call('GET', '/dlq/stats')).body.data.total).toBe(0); // one failure is not the end of the new round
    t.clock.advance(30_000);
    await relay().poll();
    await settled();
    expect(backend.requests.filter((q) => JSON.parse(q.rawBody.toString()).id === id)).toHaveLength(2);
    expect(await rows()).toEqual([]);
    expect((await t.call('POST', `/dlq/${id}/retry`)).status).toBe(404);
  });

  it('retries all, and discards one', async () => {
    await deadLetter('dl-b');
    const keep = await deadLetter('dl-c');
    expect((await t.call('GET', '/dlq')).body.total).toBe(2);
    const del = await t.call('DELETE', `/dlq/${keep}`);
    expect(del.body.data).toEqual({ id: keep, deleted: true });
    expect((await t.call('DELETE', `/dlq/${keep}`)).status).toBe(404);
    backend.reset();
    const all = await t.call('POST', '/dlq/retry-all');
    expect(all.status).toBe(202);
    expect(all.body.data).toEqual({ queued: 1 });
    await relay().poll();
    await settled();
    expect((await t.call('GET', '/dlq')).body).toEqual({ data: [], total: 0 });
    expect(backend.requests.map((q) => orgOf(q.rawBody.toString()))).toEqual(['dl-b']);
  });

  it('lists with limit and offset', async () => {
    await deadLetter('dl-d');
    await deadLetter('dl-e');
    const first = await t.call('GET', '/dlq?limit=1');
    const second = await t.call('GET', '/dlq?limit=1&offset=1');
    expect(first.body.total).toBe(2);
    expect([first.body.data[0].body.data.organizationId, second.body.data[0].body.data.organizationId]).toEqual(['dl-d', 'dl-e']);
  });
});
