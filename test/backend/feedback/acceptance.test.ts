/**
 * Acceptance: a hard bounce from each of the five sources, signed as that source signs it
 * and posted over real HTTP, ends in the suppression list, on the send's status, in the
 * contact's activity, and as exactly one `email.bounced` customer webhook (the real outbound
 * webhook service delivering to a recording receiver); replaying the identical request
 * changes nothing.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../../harness/db.js';
import { startHttpReceiver, type HttpReceiver } from '../../harness/http-receiver.js';
import { feedbackState, NOW, NOW_S, SECRETS, startFeedbackApp, type FeedbackApp } from './app.js';
import { hexHmac, pinnedCertificates, recordingFetcher, TEST_TOPIC } from './helpers.js';
import { mtaEvent } from '../../harness/mta-events.js';
import { MANDRILL_URL, SOURCES, type Req } from './sources.js';
import { createContact, createSend, sendStatus } from './sends-fixture.js';

let db: TestDatabase;
let app: FeedbackApp;
let receiver: HttpReceiver;

beforeAll(async () => {
  db = await createTestDatabase();
  receiver = await startHttpReceiver();
  app = await startFeedbackApp(db, {
    env: { ...SECRETS, MANDRILL_WEBHOOK_URL: MANDRILL_URL, SES_SNS_TOPIC_ARNS: TEST_TOPIC, WEBHOOK_ALLOW_HOSTS: '127.0.0.1' },
    webhook: { snsCertificateFetch: recordingFetcher(pinnedCertificates()).fetch },
    customerWebhooks: true,
  });
  await app.webhooks!.createWebhook({ url: `${receiver.url}/hooks`, events: ['email.bounced', 'email.complained', 'email.delivered'] });
});
afterAll(async () => {
  await app?.close();
  await receiver?.close();
  await db?.drop();
});

const post = (r: Req) => fetch(app.url + r.path, { method: 'POST', headers: r.headers, body: r.body });
const bouncedPosts = (emailId: string) =>
  receiver.requests.map((r) => JSON.parse(r.rawBody.toString())).filter((b) => b.event === 'email.bounced' && b.data.emailId === emailId);

async function waitForPosts(emailId: string, n: number): Promise<void> {
  const deadline = Date.now() + 15_000;
  while (bouncedPosts(emailId).length < n) {
    if (Date.now() > deadline) throw new Error(`no email.bounced webhook for ${emailId}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

async function settled(): Promise<void> {
  const deadline = Date.now() + 15_000;
  for (;;) {
    const r = await db.pool.query(`SELECT count(*)::int AS n FROM webhook_deliveries WHERE status = 'pending'`);
    if (r.rows[0].n === 0) return;
    if (Date.now() > deadline) throw new Error('webhook deliveries never settled');
    await new Promise((res) => setTimeout(res, 25));
  }
}

describe.each(SOURCES)('a hard bounce from $name', (source) => {
  it('is suppressed, on the send, in the activity, one email.bounced webhook; a replay changes nothing', async () => {
    const to = `hard-${source.name}@example.test`;
    const pmid = `pm-${source.name}-0001`;
    const contactId = await createContact(db, to);
    const sendId = await createSend(db, { to, providerMessageId: pmid, contactId, provider: source.name === 'relay' ? 'smtp' : source.name });
    const req = source.request(to, pmid);

    const res = await post(req);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ success: true, applied: 1, duplicates: 0 });

    expect((await db.pool.query('SELECT email, reason, source FROM suppressions WHERE email = $1', [to])).rows).toEqual([{ email: to, reason: 'hard_bounce', source: source.name }]);
    expect(await sendStatus(db, sendId)).toBe('bounced');
    const activity = await db.pool.query('SELECT type, contact_id, send_id, source, detail FROM contact_activity WHERE email = $1', [to]);
    expect(activity.rows).toMatchObject([{ type: 'email.bounced', contact_id: contactId, send_id: sendId, source: source.name, detail: { bounce: { type: 'hard' }, blocklisted: true } }]);

    await waitForPosts(sendId, 1);
    const [hook] = bouncedPosts(sendId);
    expect(hook).toMatchObject({ event: 'email.bounced', data: { emailId: sendId, to, contactId, bounce: { type: 'hard', reason: 'userunknown' } } });

    // Replay: the identical request, still inside the tolerance window.
    const before = { ...(await feedbackState(db)), status: await sendStatus(db, sendId) };
    const events = (await db.pool.query(`SELECT count(*)::int AS n FROM webhook_events WHERE type = 'email.bounced'`)).rows[0].n;
    const again = await post(req);
    expect(again.status).toBe(200);
    expect(await again.json()).toEqual({ success: true, applied: 0, duplicates: 1 });
    expect({ ...(await feedbackState(db)), status: await sendStatus(db, sendId) }).toEqual(before);
    expect((await db.pool.query(`SELECT count(*)::int AS n FROM webhook_events WHERE type = 'email.bounced'`)).rows[0].n).toBe(events);
    expect(app.emitted.filter((e) => e.name === 'email.bounced' && (e.data as { emailId: string }).emailId === sendId)).toHaveLength(1);
    // Once every delivery has settled, the receiver still has exactly one for this email.
    await settled();
    expect(bouncedPosts(sendId)).toHaveLength(1);
  });
});

describe('delivery reported by the bundled MTA', () => {
  it('its sent event is one email.delivered webhook with the MX reply, and no email.sent; a replay changes nothing', async () => {
    const to = 'delivered-mta@example.test';
    const contactId = await createContact(db, to);
    // The MTA's job messageId is our send id, echoed as data.messageId.
    const sendId = await createSend(db, { to, providerMessageId: null, contactId, type: 'transactional' });
    const body = JSON.stringify(
      mtaEvent('sent', { messageId: sendId, recipient: to, domain: 'example.test', mxHost: 'mx.example.test', smtpCode: 250, smtpResponse: '250 2.0.0 OK 1767268799 x1', tls: true, attempt: 1 }, { id: `mevt_${sendId}`, at: NOW - 500 }),
    );
    const req = { path: '/webhooks/mta', body, headers: { 'content-type': 'application/json', 'x-mta-timestamp': String(NOW_S), 'x-mta-signature': hexHmac(SECRETS.MTA_WEBHOOK_SECRET, NOW_S, body) } };
    expect(await (await post(req)).json()).toEqual({ success: true, applied: 1, duplicates: 0 });
    expect(await sendStatus(db, sendId)).toBe('delivered');
    const posts = () => receiver.requests.map((r) => JSON.parse(r.rawBody.toString())).filter((b) => b.data.emailId === sendId);
    const deadline = Date.now() + 15_000;
    while (posts().length < 1 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 25));
    expect(posts().map((p) => p.event)).toEqual(['email.delivered']);
    expect(posts()[0].data).toMatchObject({ emailId: sendId, to, contactId, type: 'transactional', smtpResponse: '250 2.0.0 OK 1767268799 x1', deliveredAt: new Date(NOW - 500).toISOString() });

    expect(await (await post(req)).json()).toEqual({ success: true, applied: 0, duplicates: 1 });
    await settled();
    expect(posts()).toHaveLength(1);
    expect(app.emitted.filter((e) => (e.data as { emailId?: string }).emailId === sendId).map((e) => e.name)).toEqual(['email.delivered']);
  });
});

describe('the same event concurrently', () => {
  it('two simultaneous deliveries of one event apply it once', async () => {
    const to = 'race@example.test';
    const sendId = await createSend(db, { to, providerMessageId: 'pm-race' });
    const req = SOURCES[4]!.request(to, 'pm-race');
    const results = await Promise.all([post(req), post(req), post(req)]);
    const bodies = await Promise.all(results.map((r) => r.json() as Promise<{ applied: number; duplicates: number }>));
    expect(bodies.map((b) => b.applied).sort()).toEqual([0, 0, 1]);
    expect((await db.pool.query('SELECT count(*)::int AS n FROM contact_activity WHERE email = $1', [to])).rows[0].n).toBe(1);
    expect(app.emitted.filter((e) => e.name === 'email.bounced' && (e.data as { emailId: string }).emailId === sendId)).toHaveLength(1);
  });
});
