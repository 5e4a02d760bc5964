/**
 * A reply to a real campaign send reaches the team inbox linked to its contact and campaign
 * (issue 18). The whole product (role all): the backend fans a campaign out to the bundled
 * MTA, which delivers it DKIM-signed to an SMTP sink on loopback; the Message-ID the MTA
 * wrote is read from the captured message, and a reply naming it in In-Reply-To is posted as
 * the MTA posts `inbound.received` (signed with the secret the product generated).
 */
import { createHmac, generateKeyPairSync } from 'node:crypto';
import { simpleParser } from 'mailparser';
import MailComposer from 'nodemailer/lib/mail-composer/index.js';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { bearerApi } from '../../harness/app.js';
import { startDnsServer, type DnsServer } from '../../harness/dns.js';
import { mtaEvent } from '../../harness/mta-events.js';
import { startSmtpSink, type SmtpSink } from '../../harness/smtp-sink.js';
import { call, createTopic, eventually, seedContact, startBackend, type Backend } from '../public/helpers.js';

const KEY = 'lm_mta_reply_0123456789abcdefghijklmnopqrstuvwxyz';
const rsaPem = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
let dns: DnsServer;
let sink: SmtpSink;
let b: Backend;

beforeAll(async () => {
  sink = await startSmtpSink({ host: '127.0.0.17', port: 0 });
  const { dkimTxtRecord } = await import('../../../src/mta/delivery/dkim/keys.js');
  dns = await startDnsServer({
    zones: {
      'readers.test': [
        { name: '@', type: 'MX', value: '10 mx.readers.test' },
        { name: 'mx', type: 'A', value: '127.0.0.17' },
      ],
      'news.test': [{ name: 'r1._domainkey', type: 'TXT', value: dkimTxtRecord(rsaPem) }],
    },
  });
  b = await startBackend({
    role: 'all',
    env: {
      MTA_API_KEY: KEY,
      BOUNCE_VERP_KEY: 'reply-verp-key-0123456789abcdef',
      BOUNCE_HOST: 'bounces.news.test',
      DNS_SERVERS: dns.servers,
      MTA_DELIVERY_PORT: String(sink.port),
      MTA_POOLS: 'transactional:127.0.0.2@mta1.news.test;campaign:127.0.0.3@mta2.news.test',
      MTA_WARMED_IPS: '127.0.0.2,127.0.0.3',
      EMAIL_PROVIDER: 'mta',
    },
  });
  const mta = bearerApi(() => b.app.mtaUrl!, KEY);
  expect((await mta('POST', '/dkim', { domain: 'news.test', selector: 'r1', privateKey: rsaPem })).status).toBeLessThan(300);
}, 120_000);

/** Posts to /webhooks/mta as the MTA does, signed with the secret the product generated. */
async function postSigned(event: unknown): Promise<number> {
  const body = JSON.stringify(event);
  const ts = Math.floor(Date.now() / 1000);
  const signature = createHmac('sha256', b.app.config.MTA_WEBHOOK_SECRET!).update(`${ts}.${body}`).digest('hex');
  const res = await fetch(`${b.url}/webhooks/mta`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-mta-timestamp': String(ts), 'x-mta-signature': signature }, body });
  await res.arrayBuffer();
  return res.status;
}

afterAll(async () => {
  await b?.close();
  await Promise.all([sink?.close(), dns?.stop()]);
});

it('a reply naming the campaign message in In-Reply-To is linked to its send, contact and campaign', async () => {
  const topic = await createTopic(b.url, 'Readers');
  await seedContact(b.app.db.pool, Date.now(), { id: 'ct_reader', email: 'reader@readers.test', topics: [{ id: topic.id }] });
  const created = await call(b.url, 'POST', '/admin/campaigns', {
    admin: true,
    json: { name: 'Autumn', subject: 'Autumn letter', html: '<p>Hello reader</p>', text: 'Hello reader', from: 'News <news@news.test>', topicId: topic.id },
  });
  expect(created.status).toBe(201);
  const campaignId = created.body.data.id as string;
  expect((await call(b.url, 'POST', `/admin/campaigns/${campaignId}/send`, { admin: true })).status).toBe(202);

  const [delivered] = await sink.waitForMessages(1, 30_000);
  const sent = await simpleParser(delivered!.data);
  expect(sent.subject).toBe('Autumn letter');
  const ourId = sent.messageId!;
  expect(ourId).toMatch(/^<[\w-]+@news\.test>$/);
  const send = (await b.app.db.pool.query(`SELECT id, message_id FROM email_sends WHERE campaign_id = $1`, [campaignId])).rows;
  expect(send).toEqual([{ id: expect.any(String), message_id: ourId }]);

  // The reader's mail client answers: In-Reply-To and References name the message it got.
  const reply = await new MailComposer({
    from: 'Reader <reader@readers.test>',
    to: 'News <news@news.test>',
    subject: 'Re: Autumn letter',
    text: 'Lovely letter, thank you.',
    inReplyTo: ourId,
    references: [ourId],
  })
    .compile()
    .build();
  const event = mtaEvent(
    'inbound.received',
    {
      messageId: '<reply-e2e@readers.test>',
      from: 'Reader <reader@readers.test>',
      to: ['news@news.test'],
      subject: 'Re: Autumn letter',
      text: 'Lovely letter, thank you.',
      inReplyTo: ourId,
      references: [ourId],
      rawSize: reply.length,
      raw: reply.toString('base64'),
      receivedAt: new Date().toISOString(),
    },
    { at: Date.now() },
  );
  expect(await postSigned(event)).toBe(200);

  const listed = await eventually(async () => (await call(b.url, 'GET', '/admin/inbox?contactId=ct_reader', { admin: true })).body.data[0]);
  expect(listed).toMatchObject({ subject: 'Re: Autumn letter', links: { sendId: send[0].id, contactId: 'ct_reader', campaignId, linkedBy: 'in_reply_to' } });
  const raw = await fetch(`${b.url}/admin/inbox/${listed.id}/raw`, { headers: { authorization: 'Bearer test-admin-token-0123456789abcdef' } });
  expect(Buffer.from(await raw.arrayBuffer()).equals(reply)).toBe(true);
});

it('a reply whose References name a transactional send (POST /api/v1/transactional through the MTA) is linked to that send', async () => {
  const key = await call(b.url, 'POST', '/admin/api-keys', { admin: true, json: { scopes: ['transactional:send'] } });
  expect(key.status).toBe(201);
  const r = await call(b.url, 'POST', '/api/v1/transactional', {
    headers: { authorization: `Bearer ${key.body.data.key}` },
    json: { to: 'buyer@readers.test', from: 'Shop <shop@news.test>', subject: 'Your receipt', html: '<p>Thanks</p>' },
  });
  expect(r.status, r.text).toBe(202);
  const sendId = r.body.data.id as string;
  await sink.waitUntil(() => sink.messages.some((m) => m.rcptTo.includes('buyer@readers.test')), 30_000, 'the receipt at the sink');
  const sent = await simpleParser(sink.messages.find((m) => m.rcptTo.includes('buyer@readers.test'))!.data);
  // The reply's client kept an older thread id first; ours is the last reference.
  expect(await postSigned(mtaEvent('inbound.received', { from: 'buyer@readers.test', to: ['shop@news.test'], subject: 'Re: Your receipt', references: ['<older@readers.test>', sent.messageId!], receivedAt: new Date().toISOString() }, { at: Date.now() }))).toBe(200);
  const listed = await eventually(async () => (await call(b.url, 'GET', `/admin/inbox?sendId=${sendId}`, { admin: true })).body.data[0]);
  expect(listed).toMatchObject({ subject: 'Re: Your receipt', links: { sendId, campaignId: null, linkedBy: 'references' } });
});
