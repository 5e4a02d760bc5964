import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { verifyWebhook } from '../../../docs/examples/webhook-receiver.mjs';
import { toIso, unixSeconds } from '../../../src/shared/clock.js';
import { newId } from '../../../src/shared/crypto.js';
import { WEBHOOK_EVENTS } from '../../../src/backend/webhooks/catalog.js';
import { WEBHOOK_POLICY } from '../../../src/backend/webhooks/policy.js';
import { startDnsServer, type DnsServer } from '../../harness/dns.js';
import { startHttpReceiver, type HttpReceiver, type RecordedRequest } from '../../harness/http-receiver.js';
import { installLoopbackGuard, startConnectionCounter, type ConnectionCounter } from '../../shared/net/helpers.js';
import { jobOf, onlyDeliveryId, pollUntil, SAMPLES, startRig, waitForJobState, type Rig } from './helpers.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let guard: ReturnType<typeof installLoopbackGuard>;
let dns: DnsServer;
let counter: ConnectionCounter;
let counter2: ConnectionCounter;
let rig: Rig;
const receivers: HttpReceiver[] = [];

async function receiver(respond?: NonNullable<Parameters<typeof startHttpReceiver>[0]>['respond']): Promise<HttpReceiver> {
  const r = await startHttpReceiver({ respond });
  receivers.push(r);
  return r;
}

function verify(req: RecordedRequest, secret: string) {
  return verifyWebhook({
    rawBody: req.rawBody,
    signature: req.headers['x-signature'],
    timestamp: req.headers['x-timestamp'],
    secret,
    now: rig.clock.now(),
  });
}

beforeAll(async () => {
  guard = installLoopbackGuard();
  counter = await startConnectionCounter('127.0.0.1');
  counter2 = await startConnectionCounter('127.0.0.2');
  dns = await startDnsServer({ zones: { 'hooks.test': [{ name: 'flip', type: 'A', value: '93.184.215.14' }] } });
  rig = await startRig({ env: { DNS_SERVERS: dns.servers } });
}, 60_000);

afterAll(async () => {
  await rig?.close();
  for (const r of receivers) await r.close();
  await Promise.all([counter.close(), counter2.close(), dns?.stop()]);
  guard.uninstall();
});

afterEach(() => {
  expect(guard.violations, 'no connection may leave loopback').toEqual([]);
});

describe('delivery', () => {
  it('signs every event type as docs/examples/webhook-receiver.mjs verifies it, with every header', async () => {
    const r = await receiver();
    const all = await rig.service.createWebhook({ url: `${r.url}/all`, events: [...WEBHOOK_EVENTS] });
    expect(all.secret).toMatch(/^whsec_[A-Za-z0-9_-]{43}$/);
    const onlyContacts = await rig.service.createWebhook({ url: `${r.url}/contacts`, events: ['contact.created'] });

    const emittedAt = rig.clock.now();
    await Promise.all(WEBHOOK_EVENTS.map((name) => rig.bus.emit(name, SAMPLES[name] as never)));
    const requests = await r.waitFor(9);
    await sleep(100);
    expect(requests).toHaveLength(9); // 8 to /all, 1 to /contacts

    const toAll = requests.filter((q) => q.url === '/all');
    expect(toAll.map((q) => JSON.parse(q.rawBody.toString()).event).sort()).toEqual([...WEBHOOK_EVENTS].sort());
    for (const q of toAll) {
      const v = verify(q, all.secret);
      expect(v.ok, `signature of ${q.rawBody}`).toBe(true);
      if (!v.ok) continue;
      const body = v.event;
      expect(Object.keys(body)).toEqual(['id', 'event', 'timestamp', 'data']);
      expect(body.data).toEqual(SAMPLES[body.event as keyof typeof SAMPLES]);
      expect(body.timestamp).toBe(toIso(emittedAt));
      expect(body.id).toMatch(/^evt_[0-9a-z]{26}$/);
      expect(q.method).toBe('POST');
      expect(q.headers['content-type']).toBe('application/json');
      expect(q.headers['user-agent']).toBe('Lettermill-Webhooks/1.0');
      expect(q.headers['x-signature']).toMatch(/^[0-9a-f]{64}$/);
      expect(q.headers['x-timestamp']).toBe(String(unixSeconds(emittedAt)));
      expect(q.headers['x-webhook-id']).toBe(all.id);
      expect(q.headers['x-event-id']).toBe(body.id);
      // The same recipe rejects a wrong secret and a tampered body.
      expect(verify(q, onlyContacts.secret).ok).toBe(false);
      expect(verify({ ...q, rawBody: Buffer.from(q.rawBody.toString().replace('"data":{', '"data":{"x":1,')) }, all.secret).ok).toBe(false);
    }
    const [toContacts] = requests.filter((q) => q.url === '/contacts');
    const v = verify(toContacts, onlyContacts.secret);
    expect(v.ok && v.event.event).toBe('contact.created');
    expect(toContacts.headers['x-webhook-id']).toBe(onlyContacts.id);

    // The same event has the same id at every endpoint (receivers de-duplicate on it).
    const contactAtAll = toAll.find((q) => JSON.parse(q.rawBody.toString()).event === 'contact.created')!;
    expect(contactAtAll.headers['x-event-id']).toBe(toContacts.headers['x-event-id']);

    // The log says so too.
    const listed = await rig.service.listDeliveries(all.id, { limit: 100 });
    await pollUntil(async () => (await rig.service.listDeliveries(all.id, { limit: 100 })).data.every((d) => d.status === 'succeeded'), 10_000, () => 'log');
    expect(listed.data).toHaveLength(8);
    const d = (await rig.service.listDeliveries(all.id, { limit: 100 })).data[0];
    expect(d.attempts).toHaveLength(1);
    expect(d.attempts[0]).toMatchObject({ attempt: 1, statusCode: 200, success: true, manual: false, error: null });
    await rig.service.deleteWebhook(all.id);
    await rig.service.deleteWebhook(onlyContacts.id);
  });

  it('a receiver answering 500 gets attempts at 0, +1 min, +5 min and then none', async () => {
    const r = await receiver(() => ({ status: 500, body: 'upstream exploded' }));
    const w = await rig.service.createWebhook({ url: `${r.url}/hook`, events: ['email.sent'] });
    const t0 = rig.clock.now();
    await rig.bus.emit('email.sent', SAMPLES['email.sent']);
    const id = await onlyDeliveryId(rig, w.id);

    await r.waitFor(1);
    await waitForJobState(rig, id, 'pending');
    expect((await jobOf(rig, id)).run_at.getTime()).toBe(t0 + 60_000);
    expect((await rig.service.getDelivery(id)).nextAttemptAt).toBe(toIso(t0 + 60_000));

    rig.advance(59_999);
    await sleep(200); // several worker polls
    expect(r.requests).toHaveLength(1);

    rig.advance(1);
    await r.waitFor(2);
    await waitForJobState(rig, id, 'pending', 2);
    expect((await jobOf(rig, id)).run_at.getTime()).toBe(t0 + 60_000 + 300_000);

    rig.advance(299_999);
    await sleep(200);
    expect(r.requests).toHaveLength(2);

    rig.advance(1);
    await r.waitFor(3);
    await waitForJobState(rig, id, 'failed', 3);

    rig.advance(24 * 3_600_000);
    await sleep(300);
    expect(r.requests).toHaveLength(3);
    expect(r.requests.map((q) => Number(q.headers['x-timestamp']))).toEqual([t0, t0 + 60_000, t0 + 360_000].map(unixSeconds));
    for (const q of r.requests) expect(verifyWebhook({ rawBody: q.rawBody, signature: q.headers['x-signature'], secret: w.secret, now: Number(q.headers['x-timestamp']) * 1000 }).ok).toBe(true);
    // Same event id on every attempt.
    expect(new Set(r.requests.map((q) => q.headers['x-event-id'])).size).toBe(1);

    const d = await rig.service.getDelivery(id);
    expect(d.status).toBe('failed');
    expect(d.nextAttemptAt).toBeNull();
    expect(d.attemptCount).toBe(3);
    expect(d.attempts.map((a) => a.startedAt)).toEqual([t0, t0 + 60_000, t0 + 360_000].map(toIso));
    for (const a of d.attempts) expect(a).toMatchObject({ statusCode: 500, error: 'HTTP 500', responseBody: 'upstream exploded', success: false });
  });

  it('a hanging receiver is cut at 30 s (the default), the delivery fails, and a manual retry delivers it', async () => {
    expect(WEBHOOK_POLICY.requestTimeoutMs).toBe(30_000);
    const r = await receiver(() => ({ hang: true }));
    const w = await rig.service.createWebhook({ url: `${r.url}/slow`, events: ['email.opened'] });
    await rig.bus.emit('email.opened', SAMPLES['email.opened']);
    const id = await onlyDeliveryId(rig, w.id);

    for (const [n, wait] of [[1, 0], [2, 60_000], [3, 300_000]] as const) {
      rig.advance(wait);
      await r.waitFor(n);
      rig.advance(29_999);
      await sleep(100);
      expect((await rig.service.getDelivery(id)).attemptCount, `attempt ${n} still running at 29.999 s`).toBe(n - 1);
      rig.advance(1);
      await waitForJobState(rig, id, n < 3 ? 'pending' : 'failed', n);
    }
    const failed = await rig.service.getDelivery(id);
    expect(failed.status).toBe('failed');
    expect(failed.attempts).toHaveLength(3);
    for (const a of failed.attempts) {
      expect(a.durationMs).toBe(30_000);
      expect(a.statusCode).toBeNull();
      expect(a.error).toBe('No complete response within 30000 ms');
    }

    // The retry's answer is held a second: a fast worker could otherwise finish it before the
    // second request below, which would then be a legitimate retry of a succeeded delivery.
    r.setResponder(() => ({ status: 204, delayMs: 1_000 }));
    expect(await rig.service.retryDelivery(id)).toEqual({ id, status: 'pending' });
    await expect(rig.service.retryDelivery(id)).rejects.toMatchObject({ status: 409, reason: 'delivery_pending' });
    const [, , , fourth] = await r.waitFor(4);
    expect(verify(fourth, w.secret).ok).toBe(true);
    await pollUntil(async () => (await rig.service.getDelivery(id)).status === 'succeeded', 10_000, () => 'retry never succeeded');
    const done = await rig.service.getDelivery(id);
    expect(done.attempts).toHaveLength(4);
    expect(done.attempts[3]).toMatchObject({ attempt: 4, statusCode: 204, success: true, manual: true });
    expect(done.deliveredAt).not.toBeNull();
    await sleep(200);
    expect(r.requests).toHaveLength(4);
  });

  it('one slow endpoint does not hold up another, and once failing it holds one lane', async () => {
    const slow = await receiver(() => ({ hang: true }));
    const fast = await receiver();
    const a = await rig.service.createWebhook({ url: `${slow.url}/`, events: ['email.clicked'] });
    const b = await rig.service.createWebhook({ url: `${fast.url}/`, events: ['email.clicked'] });
    for (let i = 0; i < 30; i++) void rig.bus.emit('email.clicked', { ...SAMPLES['email.clicked'], url: `https://acme.test/${i}` });
    await fast.waitFor(30);
    // While the slow endpoint hangs, it holds at most its lanes, not the worker.
    expect(slow.requests.length).toBeGreaterThan(0);
    expect(slow.requests.length).toBeLessThanOrEqual(WEBHOOK_POLICY.lanesPerEndpoint);

    // Its requests time out: from now on its new deliveries share one lane.
    rig.advance(30_000);
    await pollUntil(
      async () => (await rig.db.pool.query(`SELECT 1 FROM webhook_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id WHERE d.webhook_id = $1`, [a.id])).rowCount! > 0,
      10_000,
      () => 'no timed-out attempt',
    );
    const groupsBefore = await rig.db.pool.query<{ g: string }>(`SELECT DISTINCT group_key AS g FROM queue_jobs WHERE queue = 'webhooks' AND group_key LIKE $1`, [`${a.id}:%`]);
    for (let i = 0; i < 10; i++) await rig.bus.emit('email.clicked', { ...SAMPLES['email.clicked'], url: `https://acme.test/late/${i}` });
    const late = await rig.db.pool.query<{ g: string }>(
      `SELECT DISTINCT j.group_key AS g FROM queue_jobs j JOIN webhook_deliveries d ON d.id = convert_from(j.payload, 'UTF8')::jsonb->>'deliveryId' JOIN webhook_events e ON e.id = d.event_id
        WHERE j.queue = 'webhooks' AND d.webhook_id = $1 AND (e.data->>'url') LIKE '%/late/%'`,
      [a.id],
    );
    expect(groupsBefore.rows.length).toBeGreaterThan(1);
    expect(late.rows.map((r) => r.g)).toEqual([`${a.id}:0`]);
    await fast.waitFor(40);

    rig.advance(30_000); // let whatever still hangs time out before the next test
    await rig.service.deleteWebhook(a.id);
    await rig.service.deleteWebhook(b.id);
  });
});

describe('SSRF at delivery time', () => {
  it('a host whose DNS answer flips from public to 127.0.0.1 after creation is refused and never connected', async () => {
    const w = await rig.service.createWebhook({ url: `http://flip.hooks.test:${counter.port}/hook`, events: ['contact.created'] });
    await dns.setRecords('hooks.test', [{ name: 'flip', type: 'A', value: '127.0.0.1' }]);
    await rig.bus.emit('contact.created', SAMPLES['contact.created']);
    const id = await onlyDeliveryId(rig, w.id);
    await waitForJobState(rig, id, 'pending');
    const d = await rig.service.getDelivery(id);
    expect(d.attempts).toHaveLength(1);
    expect(d.attempts[0].statusCode).toBeNull();
    expect(d.attempts[0].error).toMatch(/^Refused: Host flip\.hooks\.test resolves to 127\.0\.0\.1, a loopback address/);
    expect(counter.count).toBe(0);
    await rig.service.deleteWebhook(w.id);
  });

  it('a 302 to a private address is a failed attempt, not followed', async () => {
    const r = await receiver(() => ({ status: 302, headers: { Location: `http://127.0.0.2:${counter2.port}/internal` } }));
    const w = await rig.service.createWebhook({ url: `${r.url}/`, events: ['email.sent'] });
    await rig.bus.emit('email.sent', SAMPLES['email.sent']);
    const id = await onlyDeliveryId(rig, w.id);
    await waitForJobState(rig, id, 'pending');
    const d = await rig.service.getDelivery(id);
    expect(d.attempts[0]).toMatchObject({ statusCode: 302, error: 'HTTP 302', success: false });
    expect(r.requests).toHaveLength(1);
    expect(counter2.count).toBe(0);
    await rig.service.deleteWebhook(w.id);
  });

  it('creation refuses a private address, spelled or resolved', async () => {
    await dns.setRecords('hooks.test', [{ name: 'priv', type: 'A', value: '10.1.2.3' }]);
    for (const url of ['http://10.1.2.3/', 'http://priv.hooks.test/', 'http://0x7f.1/', `http://[::ffff:127.0.0.1]:${counter.port}/`]) {
      await expect(rig.service.createWebhook({ url, events: ['email.sent'] }), url).rejects.toMatchObject({ status: 400, reason: 'url_not_allowed' });
    }
  });
});

describe('durability', () => {
  it('the fan-out is one transaction: if the enqueue fails, no event and no delivery is left behind', async () => {
    const w = await rig.service.createWebhook({ url: 'http://127.0.0.1:9/', events: ['topic.unsubscribed'] });
    const event = { id: newId('evt'), type: 'topic.unsubscribed' as const, data: SAMPLES['topic.unsubscribed'], at: rig.clock.now() };
    await expect(
      rig.service.store.fanOut([event], async () => {
        throw new Error('queue unavailable');
      }),
    ).rejects.toThrow('queue unavailable');
    const count = async () =>
      (
        await rig.db.pool.query<{ e: number; d: number }>(
          'SELECT (SELECT count(*)::int FROM webhook_events WHERE id = $1) AS e, (SELECT count(*)::int FROM webhook_deliveries WHERE event_id = $1) AS d',
          [event.id],
        )
      ).rows[0];
    expect(await count()).toEqual({ e: 0, d: 0 });

    // A batch that did commit and is written again (e.g. the commit's answer was lost) adds nothing.
    const enqueued: string[] = [];
    const first = await rig.service.store.fanOut([event], async (_c, rows) => void enqueued.push(...rows.map((r) => r.deliveryId)));
    const again = await rig.service.store.fanOut([event], async (_c, rows) => void enqueued.push(...rows.map((r) => r.deliveryId)));
    expect(first).toHaveLength(1);
    expect(again).toEqual([]);
    expect(enqueued).toEqual([first[0].deliveryId]);
    expect(await count()).toEqual({ e: 1, d: 1 });
    await rig.service.deleteWebhook(w.id);
  });

  it('a job that runs again after its delivery succeeded sends nothing', async () => {
    const r = await receiver();
    const w = await rig.service.createWebhook({ url: `${r.url}/`, events: ['email.sent'] });
    await rig.bus.emit('email.sent', SAMPLES['email.sent']);
    const id = await onlyDeliveryId(rig, w.id);
    await r.waitFor(1);
    await waitForJobState(rig, id, 'completed');
    // The same job again, as after a lease taken back from a worker that died after the 2xx was recorded.
    const job = (await rig.service.queue.get((await jobOf(rig, id)).id))!;
    expect(await rig.service.deliver(job, new AbortController().signal)).toEqual({ type: 'complete' });
    await sleep(100);
    expect(r.requests).toHaveLength(1);
    expect((await rig.service.getDelivery(id)).attemptCount).toBe(1);
    await rig.service.deleteWebhook(w.id);
  });

  it('disabled endpoints get no new deliveries, and queued ones fail without a request', async () => {
    const r = await receiver();
    // A service whose worker is not running yet, on its own database: the job waits for us.
    const own = await startRig({ start: false });
    try {
      const w = await own.service.createWebhook({ url: `${r.url}/`, events: ['email.delivered'] });
      await own.bus.emit('email.delivered', SAMPLES['email.delivered']);
      const id = await onlyDeliveryId(own, w.id);
      await own.service.updateWebhook(w.id, { enabled: false });
      await own.bus.emit('email.delivered', SAMPLES['email.delivered']); // no delivery: disabled
      await own.service.start();
      await waitForJobState(own, id, 'failed');
      const d = await own.service.getDelivery(id);
      expect(d).toMatchObject({ status: 'failed', attemptCount: 0, lastError: 'Webhook disabled before delivery' });
      expect((await own.service.listDeliveries(w.id, { limit: 10 })).data).toHaveLength(1);
      await expect(own.service.retryDelivery(d.id)).rejects.toMatchObject({ status: 409, reason: 'webhook_disabled' });
      await expect(own.service.retryDelivery('whd_nope')).rejects.toMatchObject({ status: 404 });
      expect(r.requests).toHaveLength(0);
    } finally {
      await own.close();
    }
  });

  it('events emitted just before shutdown are written by stop()', async () => {
    const r = await receiver();
    const own = await startRig({ db: rig.db, clock: rig.clock });
    const w = await own.service.createWebhook({ url: `${r.url}/`, events: ['email.complained'] });
    void own.bus.emit('email.complained', SAMPLES['email.complained']);
    await own.close(); // flushes the buffer
    const n = await rig.db.pool.query('SELECT count(*)::int AS n FROM webhook_deliveries WHERE webhook_id = $1', [w.id]);
    expect(n.rows[0].n).toBe(1);
    await r.waitFor(1); // the other running service picks it up
    await rig.service.deleteWebhook(w.id);
  });
});
