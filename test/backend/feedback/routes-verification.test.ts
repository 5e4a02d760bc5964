/**
 * The verification table, through real HTTP, for every shared-secret route: a signed hard
 * bounce is applied; tampered body, wrong secret, stale and future timestamps are refused
 * with 401 and change nothing; an unset secret answers 503 and changes nothing.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { Webhook } from 'svix';
import { createTestDatabase, type TestDatabase } from '../../harness/db.js';
import { feedbackState, NOW, NOW_S, SECRETS, startFeedbackApp, type FeedbackApp } from './app.js';
import { hexHmac, mandrillBody, mandrillSignature } from './helpers.js';
import { mtaEvent } from '../../harness/mta-events.js';

let db: TestDatabase;
let app: FeedbackApp;
let unset: FeedbackApp;
const MANDRILL_URL = 'https://mail.lettermill.test/hooks/mandrill';

beforeAll(async () => {
  db = await createTestDatabase();
  app = await startFeedbackApp(db, { env: { ...SECRETS, MANDRILL_WEBHOOK_URL: MANDRILL_URL } });
  unset = await startFeedbackApp(db, {});
});
afterAll(async () => {
  await app?.close();
  await unset?.close();
  await db?.drop();
});
beforeEach(() => {
  app.emitted.length = 0;
});

interface Signed {
  body: string;
  headers: Record<string, string>;
}
interface Route {
  name: string;
  path: string;
  /** A fresh signed hard bounce for `address`, timestamped at `tsS`, signed with `secret`. */
  sign(address: string, tsS: number, secret?: string): Signed;
  wrongSecret: string;
}

let n = 0;
const ROUTES: Route[] = [
  {
    name: 'MTA',
    path: '/webhooks/mta',
    wrongSecret: 'not-the-mta-secret',
    sign(address, tsS, secret = SECRETS.MTA_WEBHOOK_SECRET) {
      const body = JSON.stringify(
        mtaEvent('bounced', { messageId: `m${++n}`, recipient: address, type: 'hard', reason: 'userunknown', smtpResponse: '550 5.1.1 user unknown' }, { id: `evt_${n}`, at: tsS * 1000 }),
      );
      return { body, headers: { 'content-type': 'application/json', 'x-mta-timestamp': String(tsS), 'x-mta-signature': hexHmac(secret, tsS, body) } };
    },
  },
  {
    name: 'relay',
    path: '/webhooks/relay',
    wrongSecret: 'not-the-relay-secret',
    sign(address, tsS, secret = SECRETS.RELAY_WEBHOOK_SECRET) {
      const body = JSON.stringify({ id: `rel_${++n}`, event: 'bounced', timestamp: tsS, messageId: `r${n}`, recipient: address, bounce: { type: 'hard', reason: 'userunknown' } });
      return { body, headers: { 'content-type': 'application/json', 'x-relay-timestamp': String(tsS), 'x-relay-signature': hexHmac(secret, tsS, body) } };
    },
  },
  {
    name: 'Resend (svix)',
    path: '/webhooks/resend',
    wrongSecret: 'whsec_' + Buffer.from('a-different-resend-key-012345678').toString('base64'),
    sign(address, tsS, secret = SECRETS.RESEND_WEBHOOK_SECRET) {
      const id = `msg_${++n}`;
      const body = JSON.stringify({
        type: 'email.bounced',
        created_at: new Date(tsS * 1000).toISOString(),
        data: { email_id: `re_${n}`, to: [address], bounce: { type: 'Permanent', subType: 'General', message: '550 5.1.1 user unknown' } },
      });
      const signature = new Webhook(secret).sign(id, new Date(tsS * 1000), body);
      return { body, headers: { 'content-type': 'application/json', 'svix-id': id, 'svix-timestamp': String(tsS), 'svix-signature': signature } };
    },
  },
  {
    name: 'Mandrill',
    path: '/webhooks/mandrill',
    wrongSecret: 'not-the-mandrill-key',
    sign(address, tsS, secret = SECRETS.MANDRILL_WEBHOOK_KEY) {
      const id = `md${++n}`;
      const { body, fields } = mandrillBody([
        { event: 'hard_bounce', _id: id, ts: tsS, msg: { _id: id, email: address, bounce_description: 'bad_mailbox', diag: 'smtp;550 5.1.1 user unknown' } },
      ]);
      return {
        body,
        headers: { 'content-type': 'application/x-www-form-urlencoded', 'x-mandrill-signature': mandrillSignature(secret, MANDRILL_URL, fields) },
      };
    },
  },
];

const post = (base: string, path: string, s: Signed) => fetch(base + path, { method: 'POST', headers: s.headers, body: s.body });

describe.each(ROUTES)('$name route', (route) => {
  it('applies a correctly signed hard bounce', async () => {
    const address = `ok-${route.name.split(' ')[0]!.toLowerCase()}@example.test`;
    const res = await post(app.url, route.path, route.sign(address, NOW_S - 10));
    expect(res.status).toBe(200);
    expect((await res.json() as any)).toEqual({ success: true, applied: 1, duplicates: 0 });
    const row = await db.pool.query('SELECT reason FROM suppressions WHERE email = $1', [address]);
    expect(row.rows).toEqual([{ reason: 'hard_bounce' }]);
  });

  const tamper = (s: Signed): Signed => ({ ...s, body: s.body.replace('example.test', 'examp1e.test') });
  it.each([
    ['tampered body', (r: Route, a: string) => tamper(r.sign(a, NOW_S)), 'invalid_signature'],
    ['wrong secret', (r: Route, a: string) => r.sign(a, NOW_S, r.wrongSecret), 'invalid_signature'],
    ['stale timestamp (5 min + 1 s)', (r: Route, a: string) => r.sign(a, NOW_S - 301), 'timestamp_out_of_tolerance'],
    ['future timestamp (5 min + 1 s)', (r: Route, a: string) => r.sign(a, NOW_S + 301), 'timestamp_out_of_tolerance'],
    ['missing signature', (r: Route, a: string) => {
      const s = r.sign(a, NOW_S);
      for (const h of ['x-mta-signature', 'x-relay-signature', 'svix-signature', 'x-mandrill-signature']) delete s.headers[h];
      return s;
    }, 'missing_signature'],
  ])('refuses a %s with 401 and changes nothing', async (_name, make, reason) => {
    const before = await feedbackState(db);
    const res = await post(app.url, route.path, make(route, `refused-${++n}@example.test`));
    expect(res.status).toBe(401);
    expect((await res.json() as any)).toEqual({ error: { message: expect.any(String), category: 'unauthenticated', data: { reason } } });
    expect(await feedbackState(db)).toEqual(before);
    expect(app.emitted).toEqual([]);
  });

  it('answers 503 and changes nothing while its secret is unset', async () => {
    const before = await feedbackState(db);
    const res = await post(unset.url, route.path, route.sign(`unset-${++n}@example.test`, NOW_S));
    expect(res.status).toBe(503);
    expect((await res.json() as any)).toEqual({ error: { message: expect.stringMatching(/not configured/), category: 'unavailable', data: { reason: 'webhook_not_configured' } } });
    expect(await feedbackState(db)).toEqual(before);
    expect(unset.emitted).toEqual([]);
  });
});

describe('limits and odd requests', () => {
  it('refuses a body over the route limit before verifying it', async () => {
    const before = await feedbackState(db);
    const big = 'x'.repeat(1024 * 1024 + 1);
    const res = await fetch(`${app.url}/webhooks/relay`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-relay-timestamp': String(NOW_S), 'x-relay-signature': hexHmac(SECRETS.RELAY_WEBHOOK_SECRET, NOW_S, big) }, body: big });
    expect(res.status).toBe(400);
    expect(((await res.json() as any)).error.data.reason).toBe('body_too_large');
    expect(await feedbackState(db)).toEqual(before);
  });

  it('a signed but malformed payload is a 400 and changes nothing', async () => {
    const before = await feedbackState(db);
    const body = '{"event":"bounced","data":{"recipient":"not-an-address","bounceType":"hard"}}';
    const res = await fetch(`${app.url}/webhooks/mta`, { method: 'POST', headers: { 'x-mta-timestamp': String(NOW_S), 'x-mta-signature': hexHmac(SECRETS.MTA_WEBHOOK_SECRET, NOW_S, body) }, body });
    expect(res.status).toBe(400);
    expect(((await res.json() as any)).error).toMatchObject({ category: 'invalid_input', data: { reason: 'invalid_payload' } });
    expect(await feedbackState(db)).toEqual(before);
  });

  it('a body without Content-Type is still verified over its raw bytes', async () => {
    const body = JSON.stringify({ id: `rel_ct_${++n}`, event: 'delivered', messageId: 'x', recipient: 'ct@example.test' });
    const res = await fetch(`${app.url}/webhooks/relay`, { method: 'POST', headers: { 'x-relay-timestamp': String(NOW_S), 'x-relay-signature': hexHmac(SECRETS.RELAY_WEBHOOK_SECRET, NOW_S, body) }, body: Buffer.from(body) });
    expect(res.status).toBe(200);
  });

  it('Mandrill: HEAD and an empty batch are the URL check and succeed even before the key is set', async () => {
    const before = await feedbackState(db);
    for (const target of [app, unset]) {
      expect((await fetch(`${target.url}/webhooks/mandrill`, { method: 'HEAD' })).status).toBe(200);
      const empty = await fetch(`${target.url}/webhooks/mandrill`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: 'mandrill_events=%5B%5D' });
      expect(empty.status).toBe(200);
      expect((await empty.json() as any)).toEqual({ success: true, ignored: true });
      expect((await fetch(`${target.url}/webhooks/mandrill`, { method: 'POST' })).status).toBe(200);
    }
    expect(await feedbackState(db)).toEqual(before);
  });

  it('Mandrill: the signature covers the URL as registered (MANDRILL_WEBHOOK_URL), not the one requested', async () => {
    const { body, fields } = mandrillBody([{ event: 'hard_bounce', _id: 'u1', ts: NOW_S, msg: { _id: 'u1', email: 'url@example.test' } }]);
    const signedForRequestUrl = mandrillSignature(SECRETS.MANDRILL_WEBHOOK_KEY, `${app.url}/webhooks/mandrill`, fields);
    const res = await fetch(`${app.url}/webhooks/mandrill`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded', 'x-mandrill-signature': signedForRequestUrl }, body });
    expect(res.status).toBe(401);
  });

  it('Mandrill: without MANDRILL_WEBHOOK_URL the registered URL is BASE_URL + /webhooks/mandrill', async () => {
    const d = await startFeedbackApp(db, { env: { MANDRILL_WEBHOOK_KEY: SECRETS.MANDRILL_WEBHOOK_KEY } });
    try {
      const { body, fields } = mandrillBody([{ event: 'delivered', _id: 'u2', ts: NOW_S, msg: { _id: 'u2', email: 'base@example.test' } }]);
      const sig = mandrillSignature(SECRETS.MANDRILL_WEBHOOK_KEY, 'http://lettermill.test/webhooks/mandrill', fields);
      const res = await fetch(`${d.url}/webhooks/mandrill`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded', 'x-mandrill-signature': sig }, body });
      expect(res.status).toBe(200);
    } finally {
      await d.close();
    }
  });

  it('Resend: the ignored event types answer { success: true, ignored: true } and record nothing', async () => {
    const before = await feedbackState(db);
    for (const type of ['email.sent', 'email.delivered', 'email.delivery_delayed', 'email.opened', 'email.clicked']) {
      const body = JSON.stringify({ type, created_at: new Date(NOW).toISOString(), data: { email_id: 'e', to: ['x@example.test'] } });
      const id = `msg_ign_${type}`;
      const res = await fetch(`${app.url}/webhooks/resend`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'svix-id': id, 'svix-timestamp': String(NOW_S), 'svix-signature': new Webhook(SECRETS.RESEND_WEBHOOK_SECRET).sign(id, new Date(NOW), body) },
        body,
      });
      expect(res.status).toBe(200);
      expect((await res.json() as any)).toEqual({ success: true, ignored: true });
    }
    expect(await feedbackState(db)).toEqual(before);
  });

  it('Resend: a secret that is not whsec_<base64> counts as unset (503)', async () => {
    const bad = await startFeedbackApp(db, { env: { RESEND_WEBHOOK_SECRET: 'whsec_' } });
    try {
      const res = await fetch(`${bad.url}/webhooks/resend`, { method: 'POST', body: '{}' });
      expect(res.status).toBe(503);
    } finally {
      await bad.close();
    }
  });
});
