/**
 * Reports about sends, end to end through the real product (role all: backend and MTA) and a
 * real Postfix on loopback as the recipients' MX. Postfix takes every message with 250 (the
 * send is `delivered` at the backend), relays it to a sink that refuses `gone*` recipients, and
 * returns its own DSN to the product's inbound listener.
 *
 * - Two organizations send one message id: organization A through the backend (the id is its
 *   send id), organization B straight to the MTA's POST /send. A real DSN for B's message and an
 *   ARF complaint for A's each land on their own send only, in the MTA and at the backend.
 * - A later DSN moves a delivered send to bounced (one `email.bounced`); a delay notice
 *   (Action: delayed) does not end it.
 */
import { generateKeyPairSync } from 'node:crypto';
import { createServer } from 'node:net';
import nodemailer from 'nodemailer';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearerApi, startTestApp, type TestApp } from '../../harness/app.js';
import { pollUntil, startDnsServer, type DnsServer } from '../../harness/dns.js';
import { startHttpReceiver, type HttpReceiver } from '../../harness/http-receiver.js';
import { postfixUnavailable, startPostfixRelay, type RelayMta } from '../../harness/relay-mta.js';
import { arfReport, dsnReport } from '../../harness/reports.js';
import { startSmtpSink, type SinkMessage, type SmtpSink } from '../../harness/smtp-sink.js';

const KEY = 'lm_mta_provenance_e2e_0123456789abcdefghijkl';
const ADMIN = 'lm_admin_provenance_e2e_0123456789abcdefghij';
const ORG_A = 'org-a';
const rsaPem = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
const why = postfixUnavailable();

async function freePort(host: string): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, host, r));
  const port = (s.address() as { port: number }).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

describe.skipIf(why !== null)(`reports find their own send${why ? ` (skipped: ${why})` : ''}`, () => {
  let sink: SmtpSink;
  let relay: RelayMta;
  let dns: DnsServer;
  let customer: HttpReceiver;
  let app: TestApp;
  const mta = bearerApi(() => app.mtaUrl!, KEY);
  const admin = bearerApi(() => app.backendUrl!, ADMIN);
  let rest: ReturnType<typeof bearerApi>;

  beforeAll(async () => {
    const { dkimTxtRecord } = await import('../../../src/mta/delivery/dkim/keys.js');
    sink = await startSmtpSink({
      host: '127.0.0.33',
      script: ({ stage, rcpt }) => (stage === 'rcpt' && rcpt?.startsWith('gone') ? { code: 550, message: `5.1.1 <${rcpt}>: Recipient address rejected: User unknown in local recipient table` } : undefined),
    });
    customer = await startHttpReceiver();
    const relayHost = '127.0.0.34';
    dns = await startDnsServer({
      zones: {
        'dest.test': [
          { name: '@', type: 'MX', value: '10 relay.dest.test' },
          { name: 'relay', type: 'A', value: relayHost },
        ],
        'sender.test': [{ name: 'pv._domainkey', type: 'TXT', value: dkimTxtRecord(rsaPem) }],
      },
    });
    const inboundPort = await freePort('127.0.0.1');
    relay = await startPostfixRelay({ host: relayHost, relayTo: { host: sink.host, port: sink.port }, bouncesTo: { host: '127.0.0.1', port: inboundPort }, bounceDomain: 'bounces.sender.test', replyTimeoutSec: 2 });
    app = await startTestApp({
      role: 'all',
      env: {
        ADMIN_TOKEN: ADMIN,
        MTA_API_KEY: KEY,
        ORGANIZATION_ID: ORG_A,
        EMAIL_PROVIDER: 'mta',
        BOUNCE_VERP_KEY: 'provenance-e2e-verp-key-0123456789',
        BOUNCE_HOST: 'bounces.sender.test',
        DNS_SERVERS: dns.servers,
        MTA_DELIVERY_PORT: String(relay.port),
        INBOUND_SMTP_PORT: String(inboundPort),
        MTA_POOLS: 'transactional:127.0.0.2@mta1.sender.test',
        MTA_WARMED_IPS: '127.0.0.2',
        WEBHOOK_ALLOW_HOSTS: '127.0.0.1',
      },
    });
    expect((await mta('POST', '/dkim', { domain: 'sender.test', selector: 'pv', privateKey: rsaPem })).status).toBeLessThan(300);
    // The CFBL-Address is emitted only for a return-path host aligned with the From domain.
    expect((await mta('PUT', '/return-paths/sender.test', { host: 'bounces.sender.test' })).status).toBeLessThan(300);
    const key = await admin('POST', '/admin/api-keys', { scopes: ['transactional:send'] });
    expect(key.status).toBe(201);
    rest = bearerApi(() => app.backendUrl!, key.body.data.key);
    expect((await admin('POST', '/admin/webhooks', { url: `${customer.url}/hooks`, events: ['email.delivered', 'email.bounced', 'email.complained'] })).status).toBe(201);
  }, 120_000);

  afterAll(async () => {
    await app?.close();
    await relay?.stop();
    await Promise.all([sink?.close(), dns?.stop(), customer?.close()]);
  });

  const failure = () => relay.log().slice(-3000);
  const db = () => app.db.pool;
  const status = async (id: string) => (await db().query<{ status: string }>('SELECT status FROM email_sends WHERE id = $1', [id])).rows[0]?.status;
  const hooks = (event: string, id: string) => customer.requests.map((r) => JSON.parse(r.rawBody.toString())).filter((b) => b.event === event && b.data.emailId === id);
  const lifecycle = async (messageId: string) =>
    (await db().query<{ type: string; recipient: string; send_id: string | null }>(`SELECT type, recipient, send_id FROM feedback_events WHERE provider_message_id = $1 ORDER BY received_at, id`, [messageId])).rows;
  const suppression = async (address: string) => (await mta('GET', `/suppression/check/${address}`)).body.data;
  const atSink = (to: string) => sink.waitUntil(() => sink.messages.some((m) => m.rcptTo.includes(to)), 30_000, `the message to ${to} at the sink`).then(() => sink.messages.find((m) => m.rcptTo.includes(to))!);
  // Unfolded: a long token folds the field (RFC 5322 §2.2.3).
  const header = (m: SinkMessage, name: string) => new RegExp(`^${name}: (.*)$`, 'mi').exec(m.data.toString('latin1').split('\r\n\r\n')[0]!.replace(/\r\n[ \t]+/g, ' '))?.[1];

  /** A send of organization A through the backend; resolves with its id once the backend has it delivered. */
  async function sendA(to: string): Promise<string> {
    const r = await rest('POST', '/api/v1/transactional', { to, from: 'News <news@sender.test>', subject: 'Hello', html: '<p>Hello</p>' });
    expect(r.status, JSON.stringify(r.body)).toBe(202);
    const id = r.body.data.id as string;
    await pollUntil(async () => (await status(id)) === 'delivered', 30_000, () => `email_sends ${id} is not delivered\n${failure()}`);
    return id;
  }

  /** A report delivered to the inbound listener as a reporting MTA would (answered once its effects are committed). */
  async function report(to: string, raw: string): Promise<void> {
    const transport = nodemailer.createTransport({ host: '127.0.0.1', port: app.mta!.inbound.port!, secure: false, ignoreTLS: true, name: 'mx.provider.test' });
    try {
      await transport.sendMail({ envelope: { from: '', to: [to] }, raw });
    } finally {
      transport.close();
    }
  }

  it('one message id of two organizations: a real DSN for B\'s and a complaint for A\'s each land on their own send and recipient', async () => {
    // A first: its send id is the message id both use.
    const id = await sendA('carol@dest.test');
    const toA = await atSink('carol@dest.test');
    // B sends the same message id straight to the MTA, later: to a recipient the sink refuses after Postfix took it.
    const b = await mta('POST', '/send', { messageId: id, to: 'gone-b@dest.test', from: 'News <news@sender.test>', subject: 'Hello', html: '<p>Hello</p>', ipPool: 'transactional', organizationId: 'org-b', dkimDomain: 'sender.test' });
    expect(b.status, JSON.stringify(b.body)).toBe(202);
    expect(b.body.data.messageId).toBe(id);

    // Postfix's own DSN about B's message reaches the listener: B's recipient is suppressed, not A's.
    await pollUntil(async () => (await suppression('gone-b@dest.test')).suppressed === true, 60_000, () => `no suppression of gone-b\n${failure()}`);
    expect(await suppression('gone-b@dest.test')).toMatchObject({ reason: 'hard_bounce' });
    await pollUntil(async () => (await lifecycle(id)).some((e) => e.type === 'bounced'), 20_000, () => 'the backend has no bounce of B');
    // The backend took B's bounce for what it is: about gone-b, no send of its own; A's send is still delivered.
    expect((await lifecycle(id)).filter((e) => e.type === 'bounced')).toEqual([{ type: 'bounced', recipient: 'gone-b@dest.test', send_id: null }]);
    expect(await status(id)).toBe('delivered');
    expect((await suppression('carol@dest.test')).suppressed).toBe(false);

    // The mailbox provider's complaint about A's message, at the CFBL-Address A's message carried.
    const cfbl = /^(fbl\+\S+@\S+);/.exec(header(toA, 'CFBL-Address') ?? '')?.[1];
    expect(cfbl, 'A\'s message carries a CFBL-Address').toBeDefined();
    await report(cfbl!, arfReport({ recipient: 'carol@dest.test' }));
    expect(await suppression('carol@dest.test')).toMatchObject({ suppressed: true, reason: 'complaint' });
    await pollUntil(async () => (await status(id)) === 'complained', 20_000, () => `A's send is not complained`);
    expect((await lifecycle(id)).find((e) => e.type === 'complained')).toEqual({ type: 'complained', recipient: 'carol@dest.test', send_id: id });
    // B's address took the bounce only; A's send had no bounce.
    expect(await suppression('gone-b@dest.test')).toMatchObject({ reason: 'hard_bounce' });
    await pollUntil(async () => hooks('email.complained', id).length === 1, 20_000, () => 'no email.complained');
    expect(hooks('email.bounced', id)).toEqual([]);
    // The MTA's own record of each report names the organization of the send it is about.
    const rows = (await db().query<{ kind: string; organization_id: string; recipient: string }>(`SELECT kind, organization_id, recipient FROM mta_feedback_reports WHERE message_id = $1 ORDER BY id`, [id])).rows;
    expect(rows).toEqual([
      { kind: 'dsn', organization_id: 'org-b', recipient: 'gone-b@dest.test' },
      { kind: 'complaint', organization_id: ORG_A, recipient: 'carol@dest.test' },
    ]);
  }, 150_000);

  it('one message id of two organizations to one address: a bounce of B\'s copy leaves A\'s send at the backend as it was', async () => {
    const id = await sendA('dave@dest.test');
    const b = await mta('POST', '/send', { messageId: id, to: 'dave@dest.test', from: 'News <news@sender.test>', subject: 'Hello', html: '<p>Hello</p>', ipPool: 'transactional', organizationId: 'org-b', dkimDomain: 'sender.test' });
    expect(b.status, JSON.stringify(b.body)).toBe(202);
    await sink.waitUntil(() => sink.messages.filter((m) => m.rcptTo.includes('dave@dest.test')).length === 2, 30_000, 'both copies at the sink');
    const [copyA, copyB] = sink.messages.filter((m) => m.rcptTo.includes('dave@dest.test'));
    // Each copy has its own return path; B's is the later one.
    expect(copyA!.mailFrom).not.toBe(copyB!.mailFrom);
    await report(copyB!.mailFrom, dsnReport({ recipient: 'dave@dest.test', status: '5.2.1', diagnostic: '550 5.2.1 Mailbox disabled for this sender', returnPath: copyB!.mailFrom }));
    await pollUntil(async () => (await lifecycle(id)).some((e) => e.type === 'bounced'), 20_000, () => 'the backend has no bounce of B');
    // The bounce is B's (org-b): recorded, about no send of this backend's; A's send is still delivered.
    expect((await lifecycle(id)).filter((e) => e.type === 'bounced')).toEqual([{ type: 'bounced', recipient: 'dave@dest.test', send_id: null }]);
    expect(await status(id)).toBe('delivered');
    expect(hooks('email.bounced', id)).toEqual([]);
    const [row] = (await db().query<{ organization_id: string }>(`SELECT organization_id FROM mta_feedback_reports WHERE message_id = $1`, [id])).rows;
    expect(row).toEqual({ organization_id: 'org-b' });
  }, 120_000);

  it('a real DSN after the remote\'s 250 moves the send from delivered to bounced, with one email.bounced', async () => {
    const id = await sendA('gone-a@dest.test');
    await pollUntil(async () => (await status(id)) === 'bounced', 60_000, () => `the send is not bounced\n${failure()}`);
    expect(await suppression('gone-a@dest.test')).toMatchObject({ suppressed: true, reason: 'hard_bounce' });
    expect((await lifecycle(id)).map((e) => e.type)).toEqual(['delivered', 'bounced']);
    await pollUntil(async () => hooks('email.bounced', id).length > 0, 20_000, () => 'no email.bounced');
    expect(hooks('email.delivered', id)).toHaveLength(1);
    // Once: a second look after the webhook worker had time for a duplicate.
    await new Promise((r) => setTimeout(r, 1500));
    expect(hooks('email.bounced', id)).toHaveLength(1);
  }, 120_000);

  it('a delay notice (Action: delayed, 4.4.1) leaves the delivered send as it is; the final failure after it bounces it once', async () => {
    const id = await sendA('slow-a@dest.test');
    const m = await atSink('slow-a@dest.test');
    // Postfix kept our VERP envelope sender: the remote's reports go there.
    expect(m.mailFrom).toMatch(/^bounce\+[A-Za-z0-9_-]+\+[A-Za-z0-9_-]+@bounces\.sender\.test$/);
    const dsn = (action: 'delayed' | 'failed') => dsnReport({ recipient: 'slow-a@dest.test', status: '4.4.1', action, diagnostic: '421 4.4.1 Connection timed out', returnPath: m.mailFrom });
    await report(m.mailFrom, dsn('delayed'));
    // The report is committed when the listener answers; give the outbox and the backend time to act on it.
    await new Promise((r) => setTimeout(r, 2000));
    expect(await status(id)).toBe('delivered');
    expect((await lifecycle(id)).map((e) => e.type)).toEqual(['delivered']);
    expect(hooks('email.bounced', id)).toEqual([]);
    expect((await suppression('slow-a@dest.test')).suppressed).toBe(false);

    // The remote gives up: a failure with the same status is not taken for the delay's replay.
    await report(m.mailFrom, dsn('failed'));
    await pollUntil(async () => (await status(id)) === 'bounced', 20_000, () => 'the send is not bounced');
    expect((await lifecycle(id)).map((e) => e.type)).toEqual(['delivered', 'bounced']);
    await pollUntil(async () => hooks('email.bounced', id).length > 0, 20_000, () => 'no email.bounced');
    await new Promise((r) => setTimeout(r, 1500));
    expect(hooks('email.bounced', id)).toHaveLength(1);
    // A soft failure: nothing suppressed.
    expect((await suppression('slow-a@dest.test')).suppressed).toBe(false);
  }, 120_000);
});
