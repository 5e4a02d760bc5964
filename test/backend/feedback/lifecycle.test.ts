/**
 * The normalized lifecycle end to end through the relay route (which carries all nine
 * statuses): status ordering on the send, which outcomes blocklist, relay suppression
 * reasons, activity, customer events, and feedback about a message this backend never sent.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { Webhook } from 'svix';
import { createTestDatabase, type TestDatabase } from '../../harness/db.js';
import { NOW, NOW_S, SECRETS, startFeedbackApp, type FeedbackApp } from './app.js';
import { hexHmac, mandrillBody, mandrillSignature } from './helpers.js';
import { createContact, createSend, sendStatus } from './sends-fixture.js';

let db: TestDatabase;
let app: FeedbackApp;
let n = 0;

beforeAll(async () => {
  db = await createTestDatabase();
  app = await startFeedbackApp(db, { env: { ...SECRETS, MANDRILL_WEBHOOK_URL: 'https://m.test/hook' } });
});
afterAll(async () => {
  await app?.close();
  await db?.drop();
});
beforeEach(() => {
  app.emitted.length = 0;
});

async function relay(events: Record<string, unknown>[]) {
  const body = JSON.stringify(events.map((e) => ({ id: `r${++n}`, timestamp: NOW_S - 1, ...e })));
  const res = await fetch(`${app.url}/webhooks/relay`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-relay-timestamp': String(NOW_S), 'x-relay-signature': hexHmac(SECRETS.RELAY_WEBHOOK_SECRET, NOW_S, body) },
    body,
  });
  expect(res.status).toBe(200);
  return res.json();
}
const suppressed = async (email: string) => (await db.pool.query('SELECT reason FROM suppressions WHERE email = $1', [email])).rows[0]?.reason ?? null;
const emittedNames = () => app.emitted.map((e) => e.name);

describe('status ordering', () => {
  it('moves forward through accepted, attempted, delivered, complained and never back', async () => {
    const to = 'order@example.test';
    const send = await createSend(db, { to, providerMessageId: 'o1', status: 'sending', provider: 'smtp' });
    for (const [event, want] of [
      ['accepted', 'accepted'],
      ['attempted', 'attempted'],
      ['delivered', 'delivered'],
      ['attempted', 'delivered'],
      ['complained', 'complained'],
      ['delivered', 'complained'],
    ] as const) {
      await relay([{ event, messageId: 'o1', recipient: to }]);
      expect(await sendStatus(db, send), `after ${event}`).toBe(want);
    }
    // One customer event per transition: the late "delivered" emits nothing.
    expect(emittedNames()).toEqual(['email.delivered', 'email.complained']);
    expect(await suppressed(to)).toBe('complaint');
    const act = await db.pool.query('SELECT type FROM contact_activity WHERE email = $1 ORDER BY occurred_at, created_at, id', [to]);
    // accepted/attempted are provider plumbing, not contact activity.
    expect(act.rows.map((r) => r.type).sort()).toEqual(['email.complained', 'email.delivered', 'email.delivered']);
  });

  it('a provider\'s "sent" report (relay sent, SES Send) moves the status but emits no email.sent: the hand-over already did', async () => {
    const to = 'handed@example.test';
    const send = await createSend(db, { to, providerMessageId: 'hs1', status: 'accepted', provider: 'smtp' });
    await relay([{ event: 'sent', messageId: 'hs1', recipient: to }]);
    expect(await sendStatus(db, send)).toBe('sent');
    expect(emittedNames()).toEqual([]);
    await relay([{ event: 'delivered', messageId: 'hs1', recipient: to }]);
    expect(await sendStatus(db, send)).toBe('delivered');
    expect(app.emitted.map((e) => [e.name, (e.data as any).emailId, (e.data as any).smtpResponse])).toEqual([['email.delivered', send, null]]);
    const act = await db.pool.query('SELECT type FROM contact_activity WHERE email = $1', [to]);
    expect(act.rows.map((r) => r.type).sort()).toEqual(['email.delivered', 'email.sent']);
  });

  it('failed and rejected end the send without blocklisting', async () => {
    const a = await createSend(db, { to: 'failed@example.test', providerMessageId: 'f1', provider: 'smtp' });
    const b = await createSend(db, { to: 'rejected@example.test', providerMessageId: 'f2', provider: 'smtp' });
    await relay([
      { event: 'failed', messageId: 'f1', recipient: 'failed@example.test' },
      { event: 'rejected', messageId: 'f2', recipient: 'rejected@example.test' },
    ]);
    expect([await sendStatus(db, a), await sendStatus(db, b)]).toEqual(['failed', 'rejected']);
    expect([await suppressed('failed@example.test'), await suppressed('rejected@example.test')]).toEqual([null, null]);
    expect(emittedNames()).toEqual([]);
  });
});

describe('blocklist rules', () => {
  it('a soft bounce bounces the send and emits email.bounced (soft) but does not blocklist', async () => {
    const send = await createSend(db, { to: 'soft@example.test', providerMessageId: 's1', provider: 'smtp' });
    await relay([{ event: 'bounced', messageId: 's1', recipient: 'soft@example.test', bounce: { type: 'soft', reason: 'mailboxfull' } }]);
    expect(await sendStatus(db, send)).toBe('bounced');
    expect(await suppressed('soft@example.test')).toBeNull();
    expect(app.emitted.map((e) => [e.name, (e.data as any).bounce.type])).toEqual([['email.bounced', 'soft']]);
  });

  it.each([
    ['hard_bounce', 'hard_bounce', 'hard_bounce'],
    ['spam complaint', 'complaint', 'complaint'],
    ['invalid-recipient', 'invalid_address', 'invalid_address'],
    ['unsubscribed', 'unsubscribed', null],
    ['manual', 'manual', null],
    ['Provider internal flag #42 for acct 991', 'unknown', null],
  ])('relay suppressed (%s) → reason %s, blocklisted as %s', async (raw, reason, blocked) => {
    const to = `sup-${++n}@example.test`;
    const send = await createSend(db, { to, providerMessageId: `sp${n}`, provider: 'smtp' });
    await relay([{ event: 'suppressed', messageId: `sp${n}`, recipient: to, suppression: { reason: raw } }]);
    expect(await sendStatus(db, send)).toBe('suppressed');
    expect(await suppressed(to)).toBe(blocked);
    const act = await db.pool.query('SELECT detail FROM contact_activity WHERE email = $1', [to]);
    expect(act.rows[0].detail).toMatchObject({ suppressionReason: reason, blocklisted: blocked !== null });
  });

  it('the first blocklist reason is kept', async () => {
    const to = 'twice@example.test';
    await relay([{ event: 'bounced', messageId: 'x', recipient: to, bounce: { type: 'hard' } }]);
    await relay([{ event: 'complained', messageId: 'x', recipient: to }]);
    expect(await suppressed(to)).toBe('hard_bounce');
  });
});

describe('several events in one request (one set-based transaction)', () => {
  it('moves a send in event order: one customer event per transition, a late report moves nothing', async () => {
    const to = 'batch-order@example.test';
    const contactId = await createContact(db, to);
    const send = await createSend(db, { to, providerMessageId: 'bo1', status: 'sending', provider: 'smtp', contactId });
    const r = await relay([
      { event: 'delivered', messageId: 'bo1', recipient: to },
      { event: 'complained', messageId: 'bo1', recipient: to },
      { event: 'delivered', messageId: 'bo1', recipient: to },
    ]);
    expect(r).toEqual({ success: true, applied: 3, duplicates: 0 });
    expect(await sendStatus(db, send)).toBe('complained');
    expect(app.emitted.map((e) => [e.name, (e.data as any).emailId, (e.data as any).contactId])).toEqual([
      ['email.delivered', send, contactId],
      ['email.complained', send, contactId],
    ]);
    expect(await suppressed(to)).toBe('complaint');
    const act = await db.pool.query('SELECT type, send_id, contact_id FROM contact_activity WHERE email = $1 ORDER BY type', [to]);
    expect(act.rows).toEqual([
      { type: 'email.complained', send_id: send, contact_id: contactId },
      { type: 'email.delivered', send_id: send, contact_id: contactId },
      { type: 'email.delivered', send_id: send, contact_id: contactId },
    ]);
    const fb = await db.pool.query(`SELECT type, send_id FROM feedback_events WHERE provider_message_id = 'bo1' ORDER BY type`);
    expect(fb.rows).toEqual([
      { type: 'complained', send_id: send },
      { type: 'delivered', send_id: send },
      { type: 'delivered', send_id: send },
    ]);
  });

  it('a repeated event id counts once, and the first blocklist reason in the request is kept', async () => {
    const to = 'batch-first@example.test';
    const body = [
      { id: 'dup-in-batch', timestamp: NOW_S - 1, event: 'bounced', messageId: 'bf', recipient: to, bounce: { type: 'hard', reason: 'userunknown' } },
      { id: 'dup-in-batch', timestamp: NOW_S - 1, event: 'bounced', messageId: 'bf', recipient: to, bounce: { type: 'hard', reason: 'userunknown' } },
      { id: 'after-dup', timestamp: NOW_S - 1, event: 'complained', messageId: 'bf', recipient: to },
    ];
    const text = JSON.stringify(body);
    const res = await fetch(`${app.url}/webhooks/relay`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-relay-timestamp': String(NOW_S), 'x-relay-signature': hexHmac(SECRETS.RELAY_WEBHOOK_SECRET, NOW_S, text) },
      body: text,
    });
    expect(await res.json()).toEqual({ success: true, applied: 2, duplicates: 1 });
    expect(await suppressed(to)).toBe('hard_bounce');
    const act = await db.pool.query('SELECT type FROM contact_activity WHERE email = $1 ORDER BY type', [to]);
    expect(act.rows.map((r) => r.type)).toEqual(['email.bounced', 'email.complained']);
  });

  it('one provider message to several recipients: each event finds its own send; without a recipient match it finds none', async () => {
    const a = await createSend(db, { to: 'Multi-A@example.test', providerMessageId: 'pm-multi', provider: 'smtp' });
    const b = await createSend(db, { to: 'multi-b@example.test', providerMessageId: 'pm-multi', provider: 'smtp' });
    await relay([
      { event: 'delivered', messageId: 'pm-multi', recipient: 'multi-b@example.test' },
      { event: 'bounced', messageId: 'pm-multi', recipient: 'multi-a@example.test', bounce: { type: 'hard' } },
      { event: 'delivered', messageId: 'pm-multi', recipient: 'multi-c@example.test' },
    ]);
    expect([await sendStatus(db, a), await sendStatus(db, b)]).toEqual(['bounced', 'delivered']);
    expect(app.emitted.map((e) => [e.name, (e.data as any).emailId])).toEqual([
      ['email.delivered', b],
      ['email.bounced', a],
    ]);
    expect(await suppressed('multi-a@example.test')).toBe('hard_bounce');
    expect((await db.pool.query(`SELECT send_id FROM contact_activity WHERE email = 'multi-c@example.test'`)).rows).toEqual([{ send_id: null }]);
  });
});

describe('feedback without a known send', () => {
  it('still blocklists and records activity (with the contact when one exists) but emits no customer event', async () => {
    const contactId = await createContact(db, 'Stranger@Example.test');
    await relay([{ event: 'bounced', messageId: 'never-sent', recipient: 'STRANGER@example.test', bounce: { type: 'hard', reason: 'userunknown' } }]);
    expect(await suppressed('stranger@example.test')).toBe('hard_bounce');
    expect((await db.pool.query('SELECT contact_id, send_id FROM contact_activity WHERE email = $1', ['stranger@example.test'])).rows).toEqual([{ contact_id: contactId, send_id: null }]);
    expect(app.emitted).toEqual([]);
  });

  it('finds the send by the id the provider echoes back, over a provider message id it does not know', async () => {
    const send = await createSend(db, { to: 'echo@example.test', providerMessageId: null, provider: 'smtp' });
    await relay([{ event: 'delivered', messageId: 'unknown-to-us', recipient: 'echo@example.test', metadata: { sendId: send } }]);
    expect(await sendStatus(db, send)).toBe('delivered');
    expect(app.emitted.map((e) => [e.name, (e.data as any).emailId])).toEqual([['email.delivered', send]]);
  });

  it('records the send id a provider echoes even when no such send exists here, and the found send otherwise', async () => {
    const send = await createSend(db, { to: 'echo2@example.test', providerMessageId: 'pm-echo2', provider: 'smtp' });
    await relay([
      { event: 'delivered', messageId: 'pm-unknown-echo', recipient: 'echo3@example.test', metadata: { sendId: 'es_not_here' } },
      { event: 'delivered', messageId: 'pm-echo2', recipient: 'echo2@example.test' },
    ]);
    const rows = await db.pool.query(`SELECT provider_message_id, send_id FROM feedback_events WHERE provider_message_id IN ('pm-unknown-echo', 'pm-echo2') ORDER BY provider_message_id`);
    expect(rows.rows).toEqual([
      { provider_message_id: 'pm-echo2', send_id: send },
      { provider_message_id: 'pm-unknown-echo', send_id: 'es_not_here' },
    ]);
  });
});

describe('other providers through the same pipeline', () => {
  it('Resend complaint and Mandrill soft bounce, spam, reject and delivered', async () => {
    const r = await createSend(db, { to: 'rc@example.test', providerMessageId: 're-c1', provider: 'resend', status: 'delivered' });
    const body = JSON.stringify({ type: 'email.complained', created_at: new Date(NOW).toISOString(), data: { email_id: 're-c1', to: ['rc@example.test'] } });
    const res = await fetch(`${app.url}/webhooks/resend`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'svix-id': 'msg_rc1', 'svix-timestamp': String(NOW_S), 'svix-signature': new Webhook(SECRETS.RESEND_WEBHOOK_SECRET).sign('msg_rc1', new Date(NOW), body) },
      body,
    });
    expect(res.status).toBe(200);
    expect(await sendStatus(db, r)).toBe('complained');
    expect(await suppressed('rc@example.test')).toBe('complaint');

    const sends = {
      soft: await createSend(db, { to: 'md-soft@example.test', providerMessageId: 'md-s', provider: 'mandrill' }),
      spam: await createSend(db, { to: 'md-spam@example.test', providerMessageId: 'md-p', provider: 'mandrill', status: 'delivered' }),
      reject: await createSend(db, { to: 'md-rej@example.test', providerMessageId: 'md-r', provider: 'mandrill' }),
      ok: await createSend(db, { to: 'md-ok@example.test', providerMessageId: 'md-d', provider: 'mandrill' }),
    };
    const { body: form, fields } = mandrillBody([
      { event: 'soft_bounce', _id: 'md-s', ts: NOW_S - 5, msg: { _id: 'md-s', email: 'md-soft@example.test', bounce_description: 'mailbox_full', diag: 'smtp;452 4.2.2 full' } },
      { event: 'spam', _id: 'md-p', ts: NOW_S - 4, msg: { _id: 'md-p', email: 'md-spam@example.test' } },
      { event: 'reject', _id: 'md-r', ts: NOW_S - 3, msg: { _id: 'md-r', email: 'md-rej@example.test' } },
      { event: 'delivered', _id: 'md-d', ts: NOW_S - 2, msg: { _id: 'md-d', email: 'md-ok@example.test' } },
      { event: 'open', _id: 'md-d', ts: NOW_S - 1, msg: { _id: 'md-d', email: 'md-ok@example.test' } },
    ]);
    const m = await fetch(`${app.url}/webhooks/mandrill`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded', 'x-mandrill-signature': mandrillSignature(SECRETS.MANDRILL_WEBHOOK_KEY, 'https://m.test/hook', fields) },
      body: form,
    });
    expect(await m.json()).toEqual({ success: true, applied: 4, duplicates: 0 });
    expect([await sendStatus(db, sends.soft), await sendStatus(db, sends.spam), await sendStatus(db, sends.reject), await sendStatus(db, sends.ok)]).toEqual([
      'bounced',
      'complained',
      'rejected',
      'delivered',
    ]);
    expect([await suppressed('md-soft@example.test'), await suppressed('md-spam@example.test')]).toEqual([null, 'complaint']);
  });
});
