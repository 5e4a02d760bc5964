/**
 * Provider routes and the round trip through every provider, on one database:
 * - one backend with every provider's settings and no EMAIL_PROVIDER; a route picks each
 *   provider in turn; the message reaches that provider's loopback server (SES, Resend,
 *   Mandrill, MTA: one HTTP receiver answering each API; the SMTP relay: an SMTP sink), the
 *   provider's message id is stored at hand-off, and the provider's own signed feedback
 *   webhook (posted to the real feedback plugin) bounces the send and reaches the customer's
 *   webhook endpoint as email.bounced;
 * - transactional and campaign mail going to different providers, a per-domain route, a
 *   refusal with 503 no_provider that queues nothing, a route refused when saved because its
 *   provider lacks credentials, and a change made on one instance seen by another.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../../src/shared/clock.js';
import { createTestDatabase, type TestDatabase } from '../../harness/db.js';
import { startHttpReceiver, type HttpReceiver, type RecordedRequest } from '../../harness/http-receiver.js';
import { startSmtpSink, type SmtpSink } from '../../harness/smtp-sink.js';
import { startApi, type Api } from '../api/helpers.js';
import { NOW, SECRETS, startFeedbackApp, type FeedbackApp } from '../feedback/app.js';
import { pinnedCertificates, recordingFetcher, TEST_TOPIC } from '../feedback/helpers.js';
import { MANDRILL_URL, SOURCES } from '../feedback/sources.js';
import { seedContact } from '../public/helpers.js';

const MTA_KEY = 'lm_mta_test_master_key_for_routes_0123456789';
const CREDENTIALS = {
  AWS_ACCESS_KEY_ID: 'AKIDROUTESTEST000001',
  AWS_SECRET_ACCESS_KEY: 'routes-test-aws-secret-0123456789',
  AWS_REGION: 'us-east-1',
  RESEND_API_KEY: 're_routes_test_key_0123456789',
  MANDRILL_API_KEY: 'md-routes-test-key-0123456789',
  MTA_API_KEY: MTA_KEY,
};

let db: TestDatabase;
let providers: HttpReceiver;
let sink: SmtpSink;
let customer: HttpReceiver;
let feedback: FeedbackApp;
let api: Api;
let key: string;
const clock = new ManualClock(NOW);
let counter = 0;

/** Which provider API a request to the shared loopback server was for. */
const apiOf = (r: RecordedRequest) =>
  r.url === '/v2/email/outbound-emails' ? 'ses' : r.url === '/emails' ? 'resend' : r.url === '/messages/send.json' ? 'mandrill' : r.url === '/send' ? 'mta' : 'unknown';
const body = (r: RecordedRequest) => JSON.parse(r.rawBody.toString('utf8'));

beforeAll(async () => {
  db = await createTestDatabase();
  providers = await startHttpReceiver({
    respond: (r) => {
      const n = ++counter;
      switch (apiOf(r)) {
        case 'ses':
          return { status: 200, body: { MessageId: `0100018c-ses-${n}` } };
        case 'resend':
          return { status: 200, body: { id: `resend-${n}` } };
        case 'mandrill':
          return { status: 200, body: [{ email: body(r).message.to[0].email, status: 'sent', _id: `mandrill${n}` }] };
        case 'mta':
          return { status: 202, body: { data: { jobId: `job_${n}`, messageId: body(r).messageId, status: 'queued' } } };
        default:
          return 404;
      }
    },
  });
  sink = await startSmtpSink();
  customer = await startHttpReceiver();
  feedback = await startFeedbackApp(db, {
    clock,
    env: { ...SECRETS, MANDRILL_WEBHOOK_URL: MANDRILL_URL, SES_SNS_TOPIC_ARNS: TEST_TOPIC, WEBHOOK_ALLOW_HOSTS: '127.0.0.1' },
    webhook: { snsCertificateFetch: recordingFetcher(pinnedCertificates()).fetch },
    customerWebhooks: true,
  });
  await feedback.webhooks!.createWebhook({ url: `${customer.url}/hooks`, events: ['email.bounced'] });
  // Both instances' webhook workers may deliver the customer's webhooks: both allow loopback.
  api = await startApi({ clock, tickMs: 100, db, env: { ...CREDENTIALS, ...endpoints(), WEBHOOK_ALLOW_HOSTS: '127.0.0.1' } });
  key = await api.key(['transactional:send', 'contacts:write']);
}, 60_000);
afterAll(async () => {
  await api?.close();
  await feedback?.close();
  await providers?.close();
  await customer?.close();
  await sink?.close();
  await db?.drop();
});

function endpoints(): Record<string, string> {
  return { SES_ENDPOINT: providers.url, RESEND_API_URL: providers.url, MANDRILL_API_URL: providers.url, MTA_URL: providers.url, SMTP_RELAY_URL: `smtp://127.0.0.1:${sink.port}` };
}

const mail = (to: string, from = 'Acme <hello@acme.test>') => ({ to, from, subject: 'Your receipt', html: '<p>Thanks <a href="https://acme.test/order">order</a></p>', text: 'Thanks' });
const send = (a: Api, to: string, from?: string) => a.call('POST', '/api/v1/transactional', { key, body: mail(to, from) });
const putRoute = (a: Api, route: { stream: string; domain?: string; provider: string }) => a.admin('PUT', '/admin/provider-routes', route);
const deleteRoute = (a: Api, stream: string, domain?: string) => a.admin('DELETE', `/admin/provider-routes?stream=${stream}${domain ? `&domain=${domain}` : ''}`);
const sendRow = async (id: string) => (await db.pool.query('SELECT provider, status, provider_message_id FROM email_sends WHERE id = $1', [id])).rows[0];
const count = async (table: string) => Number((await db.pool.query(`SELECT count(*) AS n FROM ${table}`)).rows[0].n);

async function waitUntil<T>(fn: () => Promise<T | undefined | null | false> | T | undefined | null | false, what: string, ms = 15_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** The feedback source that speaks for each provider: the generic relay for the SMTP relay. */
const SOURCE_OF: Record<string, string> = { ses: 'ses', resend: 'resend', mandrill: 'mandrill', mta: 'mta', smtp: 'relay' };

describe.each(['ses', 'resend', 'mandrill', 'mta', 'smtp'])('round trip through %s', (provider) => {
  it("send → the provider → its signed feedback webhook → the send bounced and the customer's webhook", async () => {
    expect((await putRoute(api, { stream: 'transactional', provider })).status).toBe(200);
    const to = `rt-${provider}@example.test`;
    providers.reset();
    sink.reset();
    const r = await send(api, to);
    expect(r.status, JSON.stringify(r.body)).toBe(202);
    const sendId = r.body.data.id as string;

    // The provider got the message, and its id for it is on the send.
    let pmid: string;
    if (provider === 'smtp') {
      const [m] = await sink.waitForMessages(1);
      expect(m!.rcptTo).toEqual([to]);
      pmid = (await sendRow(sendId)).provider_message_id;
      expect(m!.data.toString()).toContain(`Message-ID: ${pmid}`);
    } else {
      expect(providers.requests.map(apiOf)).toEqual([provider]);
      pmid = provider === 'mta' ? sendId : { ses: `0100018c-ses-${counter}`, resend: `resend-${counter}`, mandrill: `mandrill${counter}` }[provider]!;
    }
    expect(await sendRow(sendId)).toEqual({ provider, status: 'accepted', provider_message_id: pmid });

    // The provider reports a hard bounce about its message id.
    const req = SOURCES.find((s) => s.name === SOURCE_OF[provider])!.request(to, pmid);
    const res = await fetch(feedback.url + req.path, { method: 'POST', headers: req.headers, body: req.body });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ success: true, applied: 1, duplicates: 0 });
    expect((await sendRow(sendId)).status).toBe('bounced');
    const hook = await waitUntil(
      () => customer.requests.map((q) => body(q)).find((b) => b.event === 'email.bounced' && b.data.emailId === sendId),
      `email.bounced for ${sendId}`,
    );
    expect(hook.data).toMatchObject({ emailId: sendId, to, bounce: { type: 'hard' } });
  });
});

describe('provider routes', () => {
  it('lists, saves (domains normalised) and deletes routes; bad input is refused in the envelope', async () => {
    expect((await putRoute(api, { stream: 'transactional', provider: 'resend' })).status).toBe(200);
    const saved = await putRoute(api, { stream: 'transactional', domain: 'Mail.ACME.test', provider: 'mandrill' });
    expect(saved.status).toBe(200);
    expect(saved.body.data).toMatchObject({ stream: 'transactional', domain: 'mail.acme.test', provider: 'mandrill' });
    const list = await api.admin('GET', '/admin/provider-routes');
    expect(list.body.data.map((x: any) => [x.stream, x.domain, x.provider])).toEqual([
      ['transactional', null, 'resend'],
      ['transactional', 'mail.acme.test', 'mandrill'],
    ]);
    for (const bad of [{ stream: 'bulk', provider: 'ses' }, { stream: 'campaign', provider: 'sendgrid' }, { stream: 'campaign', provider: 'ses', domain: 'not a domain' }]) {
      const r = await putRoute(api, bad);
      expect(r.status).toBe(400);
      expect(r.body.error.category).toBe('invalid_input');
    }
    expect((await api.call('GET', '/admin/provider-routes')).status).toBe(401);
    expect((await deleteRoute(api, 'transactional', 'mail.acme.test')).status).toBe(200);
    const gone = await deleteRoute(api, 'transactional', 'mail.acme.test');
    expect(gone.status).toBe(404);
    expect(gone.body.error.data.reason).toBe('route_not_found');
    expect((await deleteRoute(api, 'transactional')).status).toBe(200);
    expect((await api.admin('GET', '/admin/provider-routes')).body.data).toEqual([]);
  });

  it('no route and no EMAIL_PROVIDER: 503 no_provider, nothing recorded, nothing sent', async () => {
    providers.reset();
    const before = await count('email_sends');
    const r = await send(api, 'nobody@example.test');
    expect(r.status).toBe(503);
    expect(r.body.error).toMatchObject({ category: 'unavailable', data: { reason: 'no_provider' } });
    expect(r.body.error.message).toContain('EMAIL_PROVIDER');
    expect(await count('email_sends')).toBe(before);
    expect(providers.requests).toHaveLength(0);
  });

  it('a per-domain route wins over the stream route; other domains take the stream route', async () => {
    await putRoute(api, { stream: 'transactional', provider: 'resend' });
    await putRoute(api, { stream: 'transactional', domain: 'billing.acme.test', provider: 'ses' });
    providers.reset();
    expect((await send(api, 'a@example.test', 'Billing <invoices@billing.acme.test>')).status).toBe(202);
    expect((await send(api, 'b@example.test', 'Acme <hello@acme.test>')).status).toBe(202);
    expect(providers.requests.map(apiOf)).toEqual(['ses', 'resend']);
    await deleteRoute(api, 'transactional', 'billing.acme.test');
  });

  it('transactional mail goes to one provider and campaigns to another', async () => {
    await putRoute(api, { stream: 'transactional', provider: 'resend' });
    await putRoute(api, { stream: 'campaign', provider: 'mandrill' });
    const topic = (await api.admin('POST', '/admin/topics', { name: 'Routes weekly' })).body.data;
    await seedContact(db.pool, clock.now(), { id: 'ct_routes1', email: 'member1@example.test', topics: [{ id: topic.id }] });
    await seedContact(db.pool, clock.now(), { id: 'ct_routes2', email: 'member2@example.test', topics: [{ id: topic.id }] });
    providers.reset();
    expect((await send(api, 'buyer@example.test')).status).toBe(202);
    const c = await api.admin('POST', '/admin/campaigns', { subject: 'News', html: '<p>Hello <a href="https://acme.test/x">x</a></p>', from: 'Acme News <news@acme.test>', topicId: topic.id });
    expect(c.status, JSON.stringify(c.body)).toBe(201);
    expect((await api.admin('POST', `/admin/campaigns/${c.body.data.id}/send`)).status).toBe(202);
    await providers.waitFor(3, 30_000);
    const byApi = providers.requests.map((r) => [apiOf(r), apiOf(r) === 'resend' ? body(r).to[0] : body(r).message.to[0].email]);
    expect(byApi[0]).toEqual(['resend', 'buyer@example.test']);
    expect(byApi.slice(1).sort()).toEqual([['mandrill', 'member1@example.test'], ['mandrill', 'member2@example.test']]);
    // The campaign's messages carry List-Unsubscribe(-Post), tracked links and our send id.
    const m = body(providers.requests[1]!).message;
    expect(m.headers['List-Unsubscribe']).toMatch(/^<http/);
    expect(m.headers['List-Unsubscribe-Post']).toBe('List-Unsubscribe=One-Click');
    expect(m.metadata.lettermill_send_id).toBe(m.headers['X-Lettermill-Send-Id']);
    expect(m.html).not.toContain('href="https://acme.test/x"');
    await waitUntil(async () => (await api.admin('GET', `/admin/campaigns/${c.body.data.id}`)).body.data.status === 'sent', 'the campaign to finish');
    const rows = (await db.pool.query(`SELECT provider, status FROM email_sends WHERE campaign_id = $1`, [c.body.data.id])).rows;
    expect(rows).toEqual([{ provider: 'mandrill', status: 'accepted' }, { provider: 'mandrill', status: 'accepted' }]);
    await deleteRoute(api, 'campaign');
  });

  it('a route naming a provider without credentials is refused when saved; changes reach another instance without a restart', async () => {
    // Another instance on the same database: SES credentials only, no EMAIL_PROVIDER.
    const other = await startApi({ clock, tickMs: 100, db, env: { AWS_ACCESS_KEY_ID: CREDENTIALS.AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY: CREDENTIALS.AWS_SECRET_ACCESS_KEY, AWS_REGION: 'us-east-1', ...endpoints(), WEBHOOK_ALLOW_HOSTS: '127.0.0.1' } });
    try {
      const refused = await putRoute(other, { stream: 'campaign', provider: 'resend' });
      expect(refused.status).toBe(400);
      expect(refused.body.error.data.reason).toBe('provider_not_configured');
      expect(refused.body.error.message).toContain('RESEND_API_KEY');
      expect(JSON.stringify(refused.body)).not.toContain(CREDENTIALS.RESEND_API_KEY);
      expect((await api.admin('GET', '/admin/provider-routes')).body.data.filter((r: any) => r.stream === 'campaign')).toEqual([]);

      // Saved on the first instance: the second sends through it at once.
      await putRoute(api, { stream: 'transactional', provider: 'ses' });
      providers.reset();
      await waitUntil(async () => (await send(other, 'x1@example.test')).status === 202, 'the other instance to see the route');
      expect(providers.requests.map(apiOf)).toEqual(['ses']);
      // Deleted on the first: the second refuses, as it has no EMAIL_PROVIDER.
      await deleteRoute(api, 'transactional');
      const r = await waitUntil(async () => {
        const x = await send(other, 'x2@example.test');
        return x.status === 503 ? x : undefined;
      }, 'the other instance to see the deletion');
      expect(r.body.error.data.reason).toBe('no_provider');
    } finally {
      await other.close();
    }
  });
});
