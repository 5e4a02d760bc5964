/**
 * A throwaway Postfix relaying to our MX (docs/inbound.md): mail it is given for a routed
 * address, a cached mailbox, a full mailbox and an unknown recipient gets, respectively, the
 * inbox event, the mailbox delivery, and Postfix's own DSNs quoting our 452 4.2.2 and
 * 550 5.1.1 (Postfix makes one attempt here, so a 4xx bounces at once). Skips, saying why,
 * only where Postfix cannot run.
 */
import nodemailer from 'nodemailer';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pollUntil } from '../../harness/dns.js';
import { startHttpReceiver, type HttpReceiver } from '../../harness/http-receiver.js';
import { postfixUnavailable, startPostfixRelay, type RelayMta } from '../../harness/relay-mta.js';
import { startSmtpSink, type SmtpSink } from '../../harness/smtp-sink.js';
import { postedEvents, startMta, type TestMta } from '../helpers.js';

const why = postfixUnavailable();

describe.skipIf(why !== null)(`Postfix relaying to our MX${why ? ` (skipped: ${why})` : ''}`, () => {
  let backend: HttpReceiver;
  let dsnSink: SmtpSink;
  let relay: RelayMta;
  let t: TestMta;

  beforeAll(async () => {
    backend = await startHttpReceiver({
      respond: (req) => (req.url === '/webhooks/mta-mailbox' ? { status: 200, body: { data: { stored: true, duplicate: false, usedBytes: 10 } } } : 200),
    });
    dsnSink = await startSmtpSink({ host: '127.0.0.27', port: 0 });
    t = await startMta({ start: true, env: { MTA_WEBHOOK_URL: `${backend.url}/webhooks/mta`, MTA_WEBHOOK_SECRET: 'postfix-secret', BOUNCE_HOST: 'mx.lettermill.test' } });
    relay = await startPostfixRelay({ host: '127.0.0.28', relayTo: { host: '127.0.0.1', port: t.mta.inbound.port! }, bouncesTo: { host: dsnSink.host, port: dsnSink.port }, bounceDomain: 'outside.test' });
    expect((await t.call('POST', '/inbound/routes', { domain: 'acme.test', address: 'support', action: 'inbox' })).status).toBe(201);
    expect((await t.call('POST', '/mailboxes/cache/carol@acme.test', { mailboxId: 'mb-carol', organizationId: 'org-1', quota: 1_000_000 })).status).toBe(201);
    expect((await t.call('POST', '/mailboxes/cache/full@acme.test', { mailboxId: 'mb-full', organizationId: 'org-1', quota: 0 })).status).toBe(201);
  }, 120_000);
  afterAll(async () => {
    await relay?.stop();
    await t?.close();
    await Promise.all([backend?.close(), dsnSink?.close()]);
  });

  it('routed and mailbox mail arrive; the full mailbox and the unknown recipient come back as DSNs with our codes', async () => {
    const transport = nodemailer.createTransport({ host: relay.host, port: relay.port, secure: false, ignoreTLS: true, name: 'client.outside.test' });
    try {
      for (const to of ['support@acme.test', 'carol@acme.test', 'full@acme.test', 'ghost@nowhere.test']) {
        const raw = ['From: Sender <sender@outside.test>', `To: ${to}`, `Subject: via postfix to ${to}`, '', 'Hello.', ''].join('\r\n');
        await transport.sendMail({ envelope: { from: 'sender@outside.test', to: [to] }, raw });
      }
    } finally {
      transport.close();
    }
    await pollUntil(async () => backend.requests.length >= 2 && dsnSink.messages.length >= 2, 60_000, () => `${backend.requests.length} posts, ${dsnSink.messages.length} DSNs\n${relay.log().slice(-3000)}`);
    const inbox = postedEvents(backend.requests.filter((r) => r.url === '/webhooks/mta'));
    expect(inbox).toHaveLength(1);
    expect(inbox[0]!.data).toMatchObject({ to: ['support@acme.test'], subject: 'via postfix to support@acme.test', from: 'Sender <sender@outside.test>' });
    // Postfix's own Received field is in what we kept.
    expect(Buffer.from(inbox[0]!.data.raw, 'base64').toString()).toMatch(/\r\nReceived: from client\.outside\.test/);
    const mailbox = backend.requests.filter((r) => r.url === '/webhooks/mta-mailbox').map((r) => JSON.parse(r.rawBody.toString()));
    expect(mailbox).toHaveLength(1);
    expect(mailbox[0]).toMatchObject({ address: 'carol@acme.test', mailboxId: 'mb-carol', envelopeFrom: 'sender@outside.test' });
    const dsns = dsnSink.messages.map((m) => m.data.toString());
    expect(dsns.find((d) => d.includes('ghost@nowhere.test'))).toMatch(/550 5\.1\.1/);
    expect(dsns.find((d) => d.includes('full@acme.test'))).toMatch(/452 4\.2\.2/);
  }, 90_000);
});
