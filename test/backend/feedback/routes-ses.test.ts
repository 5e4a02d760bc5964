/**
 * POST /webhooks/ses through real HTTP: SNS verification with pinned certificates (the real
 * Amazon samples and a test signer), the topic allowlist, automatic subscription
 * confirmation through the injected fetcher, and SES notifications applied.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../../harness/db.js';
import { feedbackState, NOW, startFeedbackApp, type FeedbackApp } from './app.js';
import { fixture, pinnedCertificates, REAL_SNS, recordingFetcher, signSns, TEST_TOPIC } from './helpers.js';
import { ManualClock } from '../../../src/shared/clock.js';
import { createSend, sendStatus } from './sends-fixture.js';

let db: TestDatabase;
let app: FeedbackApp;
const certFetch = recordingFetcher(pinnedCertificates());
const confirmed: string[] = [];
let confirmFails = false;

beforeAll(async () => {
  db = await createTestDatabase();
  app = await startFeedbackApp(db, {
    env: { SES_SNS_TOPIC_ARNS: `${TEST_TOPIC},arn:aws:sns:us-east-1:123456789012:other` },
    webhook: {
      snsCertificateFetch: certFetch.fetch,
      snsConfirmFetch: async (url) => {
        confirmed.push(url);
        if (confirmFails) throw new Error('GET answered 500');
        return '<ConfirmSubscriptionResponse/>';
      },
    },
  });
});
afterAll(async () => {
  await app?.close();
  await db?.drop();
});

const postSns = (target: FeedbackApp, msg: unknown, headers: Record<string, string> = {}) =>
  fetch(`${target.url}/webhooks/ses`, { method: 'POST', headers: { 'content-type': 'text/plain; charset=UTF-8', ...headers }, body: typeof msg === 'string' ? msg : JSON.stringify(msg) });

const notification = (id: string, message: unknown) =>
  signSns({ Type: 'Notification', MessageId: id, TopicArn: TEST_TOPIC, Message: JSON.stringify(message), Timestamp: new Date(NOW - 5000).toISOString() });

describe('SES through SNS', () => {
  it('the three real Amazon messages verify through the route with their pinned certificates', async () => {
    for (const name of Object.keys(REAL_SNS) as (keyof typeof REAL_SNS)[]) {
      const body = fixture(`sns/${name}`).toString();
      const m = JSON.parse(body);
      // "Now" is the message's own time, when its certificate was valid: the expiry check stays on.
      const clock = new ManualClock(Date.parse(m.Timestamp) + 1000);
      const at = await startFeedbackApp(db, { clock, env: { SES_SNS_TOPIC_ARNS: m.TopicArn }, webhook: { snsCertificateFetch: certFetch.fetch } });
      try {
        const res = await postSns(at, body, { 'x-amz-sns-message-type': 'Notification' });
        // Verified and from an accepted topic; their Message ("Hello world") is not an SES
        // notification, so it ends as a 400, not a 401.
        expect(res.status).toBe(400);
        expect(((await res.json() as any)).error.message).toMatch(/not an SES notification|SES notification/);
        const tampered = body.replace('"Timestamp"', '"Subject" : "x",\n  "Timestamp"');
        const bad = await postSns(at, tampered);
        expect(bad.status).toBe(401);
        expect(((await bad.json() as any)).error.data.reason).toBe('invalid_signature');
      } finally {
        await at.close();
      }
    }
  });

  it('a hard bounce notification suppresses the address, once', async () => {
    const msg = notification('sns-bounce-1', JSON.parse(fixture('feedback/ses-bounce-permanent.json').toString()));
    const res = await postSns(app, msg);
    expect(res.status).toBe(200);
    expect((await res.json() as any)).toEqual({ success: true, applied: 1, duplicates: 0 });
    expect((await db.pool.query(`SELECT reason, source FROM suppressions WHERE email = 'jane@example.com'`)).rows).toEqual([{ reason: 'hard_bounce', source: 'ses' }]);
    const before = await feedbackState(db);
    const again = await postSns(app, msg);
    expect((await again.json() as any)).toEqual({ success: true, applied: 0, duplicates: 1 });
    expect(await feedbackState(db)).toEqual(before);
  });

  it('a transient bounce is recorded but does not suppress; complaints and deliveries apply', async () => {
    await postSns(app, notification('sns-soft-1', JSON.parse(fixture('feedback/ses-bounce-transient.json').toString())));
    expect((await db.pool.query(`SELECT 1 FROM suppressions WHERE email = 'full@example.com'`)).rowCount).toBe(0);
    expect((await db.pool.query(`SELECT type FROM feedback_events WHERE recipient = 'full@example.com'`)).rows).toEqual([{ type: 'bounced' }]);
    await postSns(app, notification('sns-complaint-1', JSON.parse(fixture('feedback/ses-complaint.json').toString())));
    expect((await db.pool.query(`SELECT reason FROM suppressions WHERE email = 'richard@example.com'`)).rows).toEqual([{ reason: 'complaint' }]);
    const d = await postSns(app, notification('sns-delivery-1', JSON.parse(fixture('feedback/ses-delivery.json').toString())));
    expect((await d.json() as any)).toEqual({ success: true, applied: 2, duplicates: 0 });
  });

  it('Send moves a known send to sent without emitting (the hand-over emitted email.sent); Delivery emits email.delivered with the SMTP reply', async () => {
    const delivery = JSON.parse(fixture('feedback/ses-delivery.json').toString());
    delivery.mail.messageId = 'ses-known-1';
    delivery.mail.destination = ['known@example.com'];
    delivery.delivery.recipients = ['known@example.com'];
    const send = await createSend(db, { to: 'known@example.com', providerMessageId: 'ses-known-1', provider: 'ses', type: 'transactional' });
    app.emitted.length = 0;
    const sendNote = { eventType: 'Send', mail: delivery.mail, send: {} };
    expect(await (await postSns(app, notification('sns-send-known', sendNote))).json()).toEqual({ success: true, applied: 1, duplicates: 0 });
    expect(await sendStatus(db, send)).toBe('sent');
    expect(app.emitted).toEqual([]);
    expect(await (await postSns(app, notification('sns-delivery-known', delivery))).json()).toEqual({ success: true, applied: 1, duplicates: 0 });
    expect(await sendStatus(db, send)).toBe('delivered');
    expect(app.emitted.map((e) => [e.name, (e.data as any).emailId, (e.data as any).smtpResponse, (e.data as any).deliveredAt])).toEqual([
      ['email.delivered', send, '250 2.6.0 Message received', '2026-01-01T11:59:52.000Z'],
    ]);
  });

  it('a certificate URL on another host is refused (401) without being fetched', async () => {
    const before = await feedbackState(db);
    const calls = certFetch.calls.length;
    const msg = signSns(
      { Type: 'Notification', MessageId: 'evil-1', TopicArn: TEST_TOPIC, Message: fixture('feedback/ses-bounce-permanent.json').toString(), Timestamp: new Date(NOW).toISOString() },
      { certUrl: 'https://sns.us-east-1.amazonaws.com.attacker.test/SimpleNotificationService-x.pem' },
    );
    const res = await postSns(app, msg);
    expect(res.status).toBe(401);
    expect(((await res.json() as any)).error.data.reason).toBe('untrusted_certificate_url');
    expect(certFetch.calls.length).toBe(calls);
    expect(await feedbackState(db)).toEqual(before);
  });

  it('an Amazon-signed message from a topic not in SES_SNS_TOPIC_ARNS is refused (403)', async () => {
    const before = await feedbackState(db);
    const msg = signSns({ Type: 'Notification', MessageId: 'foreign-1', TopicArn: 'arn:aws:sns:us-east-1:999999999999:someone-else', Message: fixture('feedback/ses-bounce-permanent.json').toString(), Timestamp: new Date(NOW).toISOString() });
    const res = await postSns(app, msg);
    expect(res.status).toBe(403);
    expect(((await res.json() as any)).error.data.reason).toBe('untrusted_topic');
    expect(await feedbackState(db)).toEqual(before);
  });

  it('a SubscriptionConfirmation is confirmed by fetching its SubscribeURL', async () => {
    const subscribeUrl = 'https://sns.us-east-1.amazonaws.com/?Action=ConfirmSubscription&TopicArn=x&Token=abc';
    const msg = signSns({ Type: 'SubscriptionConfirmation', MessageId: 'sub-1', TopicArn: TEST_TOPIC, Message: 'You have chosen to subscribe', Timestamp: new Date(NOW).toISOString(), Token: 'abc', SubscribeURL: subscribeUrl });
    const res = await postSns(app, msg, { 'x-amz-sns-message-type': 'SubscriptionConfirmation' });
    expect(res.status).toBe(200);
    expect((await res.json() as any)).toEqual({ success: true, confirmed: true });
    expect(confirmed).toEqual([subscribeUrl]);
  });

  it('a SubscribeURL that is not an SNS host of the topic\'s region is not fetched', async () => {
    confirmed.length = 0;
    for (const SubscribeURL of ['https://attacker.test/?Action=ConfirmSubscription', 'https://sns.eu-west-1.amazonaws.com/?Action=ConfirmSubscription', 'http://sns.us-east-1.amazonaws.com/?x']) {
      const msg = signSns({ Type: 'SubscriptionConfirmation', MessageId: 'sub-2', TopicArn: TEST_TOPIC, Message: 'm', Timestamp: new Date(NOW).toISOString(), Token: 't', SubscribeURL });
      const res = await postSns(app, msg);
      expect(res.status).toBe(403);
      expect(((await res.json() as any)).error.data.reason).toBe('untrusted_subscribe_url');
    }
    expect(confirmed).toEqual([]);
  });

  it('a failed confirmation answers 503 so SNS retries', async () => {
    confirmFails = true;
    try {
      const msg = signSns({ Type: 'SubscriptionConfirmation', MessageId: 'sub-3', TopicArn: TEST_TOPIC, Message: 'm', Timestamp: new Date(NOW).toISOString(), Token: 't', SubscribeURL: 'https://sns.us-east-1.amazonaws.com/?Action=ConfirmSubscription&Token=t' });
      const res = await postSns(app, msg);
      expect(res.status).toBe(503);
      expect(((await res.json() as any)).error.data.reason).toBe('subscription_confirmation_failed');
    } finally {
      confirmFails = false;
    }
  });

  it('the route answers 503 while SES_SNS_TOPIC_ARNS is unset, and the message type header must match', async () => {
    const unset = await startFeedbackApp(db, { webhook: { snsCertificateFetch: certFetch.fetch } });
    try {
      const res = await postSns(unset, notification('n-unset', {}));
      expect(res.status).toBe(503);
    } finally {
      await unset.close();
    }
    const res = await postSns(app, notification('n-hdr', {}), { 'x-amz-sns-message-type': 'SubscriptionConfirmation' });
    expect(res.status).toBe(400);
  });

  it('a stale SNS message is refused', async () => {
    const msg = signSns({ Type: 'Notification', MessageId: 'old-1', TopicArn: TEST_TOPIC, Message: '{}', Timestamp: new Date(NOW - 301_000).toISOString() });
    const res = await postSns(app, msg);
    expect(res.status).toBe(401);
    expect(((await res.json() as any)).error.data.reason).toBe('timestamp_out_of_tolerance');
  });
});
