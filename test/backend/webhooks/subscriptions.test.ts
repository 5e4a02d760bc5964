/**
 * The fan-out drops events no enabled endpoint subscribes to before writing anything, from an
 * in-process list kept right by NOTIFY (every instance of a fleet), a periodic re-read and
 * LISTEN reconnection — and never drops an event an existing endpoint subscribes to.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../../src/shared/clock.js';
import { startHttpReceiver, type HttpReceiver } from '../../harness/http-receiver.js';
import { createTestDatabase, type TestDatabase } from '../../harness/db.js';
import { pollUntil, SAMPLES, startRig, type Rig } from './helpers.js';

let db: TestDatabase;
let a: Rig;
let b: Rig;
let receiver: HttpReceiver;
const clock = new ManualClock();

const rows = async () =>
  (await db.pool.query<{ events: number; deliveries: number }>(
    `SELECT (SELECT count(*)::int FROM webhook_events) AS events, (SELECT count(*)::int FROM webhook_deliveries) AS deliveries`,
  )).rows[0];
const received = (emailId: string) => receiver.requests.filter((r) => JSON.parse(r.rawBody.toString()).data.emailId === emailId);
const known = (rig: Rig) => {
  const set = rig.service.subscriptions.current();
  return set === null ? null : [...set].sort();
};

beforeAll(async () => {
  db = await createTestDatabase();
  receiver = await startHttpReceiver();
  // Two instances on one database; no periodic re-read, so what they learn comes from NOTIFY.
  a = await startRig({ db, clock, service: { subscriptionRefreshMs: 0 } });
  b = await startRig({ db, clock, service: { subscriptionRefreshMs: 0 } });
});
afterAll(async () => {
  await a?.close();
  await b?.close();
  await receiver?.close();
  await db?.drop();
});

describe('events nobody subscribes to', () => {
  it('with no endpoint, every event is dropped before any write', async () => {
    expect(known(a)).toEqual([]);
    const before = a.service.skipped;
    await Promise.all(Array.from({ length: 50 }, (_, i) => a.bus.emit('email.clicked', { ...SAMPLES['email.clicked'], emailId: `es_click${i}` })));
    await a.bus.emit('email.opened', SAMPLES['email.opened']);
    expect(a.service.skipped - before).toBe(51);
    expect(await rows()).toEqual({ events: 0, deliveries: 0 });
  });

  it('an endpoint created here gets an event emitted right after creation; other event names are still dropped', async () => {
    const w = await a.service.createWebhook({ url: `${receiver.url}/opens`, events: ['email.opened'] });
    await a.bus.emit('email.opened', { ...SAMPLES['email.opened'], emailId: 'es_right_after' });
    const skipped = a.service.skipped;
    await a.bus.emit('email.clicked', { ...SAMPLES['email.clicked'], emailId: 'es_not_wanted' });
    expect(a.service.skipped).toBe(skipped + 1);
    await pollUntil(() => received('es_right_after').length === 1, 10_000, () => 'email.opened never delivered');
    expect(await rows()).toEqual({ events: 1, deliveries: 1 });
    await a.service.deleteWebhook(w.id);
  });

  it('a deleted endpoint: emits write nothing; a disabled one neither, until it is enabled again', async () => {
    const w = await a.service.createWebhook({ url: `${receiver.url}/sent`, events: ['email.sent'] });
    await a.service.deleteWebhook(w.id);
    expect(known(a)).toEqual([]);
    const before = await rows();
    await a.bus.emit('email.sent', { ...SAMPLES['email.sent'], emailId: 'es_after_delete' });
    expect(await rows()).toEqual(before);

    const d = await a.service.createWebhook({ url: `${receiver.url}/sent`, events: ['email.sent', 'email.delivered'] });
    await a.service.updateWebhook(d.id, { enabled: false });
    expect(known(a)).toEqual([]);
    await a.bus.emit('email.sent', { ...SAMPLES['email.sent'], emailId: 'es_while_disabled' });
    expect(await rows()).toEqual(before);
    await a.service.updateWebhook(d.id, { enabled: true });
    await a.bus.emit('email.sent', { ...SAMPLES['email.sent'], emailId: 'es_enabled_again' });
    await pollUntil(() => received('es_enabled_again').length === 1, 10_000, () => 'not delivered after re-enabling');
    // Narrowing the subscription drops the names it no longer has.
    await a.service.updateWebhook(d.id, { events: ['email.delivered'] });
    expect(known(a)).toEqual(['email.delivered']);
    await a.service.deleteWebhook(d.id);
    expect(received('es_after_delete')).toEqual([]);
    expect(received('es_while_disabled')).toEqual([]);
  });
});

describe('a fleet', () => {
  it('another instance learns of a new endpoint through NOTIFY and delivers its events; and of its deletion', async () => {
    // b re-reads after a's earlier changes (a NOTIFY each); wait for it to settle.
    await pollUntil(() => known(b)?.length === 0, 10_000, () => `b: ${JSON.stringify(known(b))}`);
    const w = await a.service.createWebhook({ url: `${receiver.url}/fleet`, events: ['email.bounced'] });
    await pollUntil(() => known(b)?.includes('email.bounced'), 10_000, () => `instance b never learned: ${JSON.stringify(known(b))}`);
    await b.bus.emit('email.bounced', { ...SAMPLES['email.bounced'], emailId: 'es_from_b' });
    await pollUntil(() => received('es_from_b').length === 1, 10_000, () => 'event emitted on b not delivered');

    await a.service.deleteWebhook(w.id);
    await pollUntil(() => known(b)?.length === 0, 10_000, () => `instance b never forgot: ${JSON.stringify(known(b))}`);
    const before = await rows();
    const skipped = b.service.skipped;
    await b.bus.emit('email.bounced', { ...SAMPLES['email.bounced'], emailId: 'es_from_b_after' });
    expect(b.service.skipped).toBe(skipped + 1);
    expect(await rows()).toEqual(before);
  });

  it('a lost LISTEN connection lets every event through until it is back and the list is read again', async () => {
    const w = await a.service.createWebhook({ url: `${receiver.url}/listen`, events: ['contact.created'] });
    await pollUntil(() => known(b)?.includes('contact.created'), 10_000, () => 'b never learned');
    const pids = (await db.pool.query<{ pid: number }>(`SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND query = 'LISTEN lm_webhooks_changed'`)).rows;
    expect(pids).toHaveLength(2); // one per instance
    await db.pool.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = ANY ($1::int[])', [pids.map((p) => p.pid)]);
    await pollUntil(() => known(b) === null, 10_000, () => 'b kept trusting its list without a listener');
    // Changed while b was not listening: b must not miss it.
    await a.service.updateWebhook(w.id, { events: ['contact.created', 'email.complained'] });
    await pollUntil(() => known(b)?.includes('email.complained'), 15_000, () => `b did not re-read after reconnecting: ${JSON.stringify(known(b))}`);
    await b.bus.emit('email.complained', { ...SAMPLES['email.complained'], emailId: 'es_after_reconnect' });
    await pollUntil(() => received('es_after_reconnect').length === 1, 10_000, () => 'not delivered after reconnect');
    await a.service.deleteWebhook(w.id);
  });

  it('a change nobody announced (written by hand) is picked up by the periodic re-read', async () => {
    const c = await startRig({ db, clock, service: { subscriptionRefreshMs: 100 } });
    try {
      await pollUntil(() => known(c)?.length === 0, 10_000, () => 'c never loaded');
      await db.pool.query(
        `INSERT INTO webhooks (id, url, events, secret, enabled, created_at, updated_at) VALUES ('wh_by_hand', $1, '{email.opened}', 'whsec_x', true, now(), now())`,
        [`${receiver.url}/by-hand`],
      );
      await pollUntil(() => known(c)?.includes('email.opened'), 10_000, () => 'periodic re-read never saw the row');
      await c.bus.emit('email.opened', { ...SAMPLES['email.opened'], emailId: 'es_by_hand' });
      await pollUntil(() => received('es_by_hand').length === 1, 10_000, () => 'not delivered');
    } finally {
      await c.close();
      await db.pool.query(`DELETE FROM webhooks WHERE id = 'wh_by_hand'`);
    }
  });
});
