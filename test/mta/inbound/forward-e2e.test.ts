/**
 * Forwarding by re-origination through the real product (role mta): mail to a forward route
 * is re-sent under the route's domain through the standard pipeline, captured at a loopback
 * sink with the rewritten From, the original sender in Reply-To and a DKIM signature dkimpy
 * verifies for that domain. A DSN of the copy suppresses the forward target, and the copy
 * sent back to us (a second forwarder pointing at us) is refused as a loop.
 */
import { generateKeyPairSync } from 'node:crypto';
import nodemailer from 'nodemailer';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dkimTxtRecord } from '../../../src/mta/delivery/dkim/keys.js';
import { bearerApi, startTestApp, type TestApp } from '../../harness/app.js';
import { pollUntil, startDnsServer, type DnsServer } from '../../harness/dns.js';
import { startHttpReceiver, type HttpReceiver } from '../../harness/http-receiver.js';
import { dsnReport } from '../../harness/reports.js';
import { startSmtpSink, type SinkMessage, type SmtpSink } from '../../harness/smtp-sink.js';
import { dkimpyVerify } from '../delivery/dkimpy.js';

const KEY = 'lm_mta_forward_e2e_0123456789abcdefghijklmnop';
const pem = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
let dns: DnsServer;
let sink: SmtpSink;
let backend: HttpReceiver;
let app: TestApp;
const api = bearerApi(() => app.mtaUrl!, KEY);

beforeAll(async () => {
  sink = await startSmtpSink({ host: '127.0.0.19', port: 0 });
  backend = await startHttpReceiver();
  dns = await startDnsServer({
    zones: {
      'dest.test': [
        { name: '@', type: 'MX', value: '10 mx.dest.test' },
        { name: 'mx', type: 'A', value: '127.0.0.19' },
      ],
      'mailbox.test': [
        { name: 'fw._domainkey', type: 'TXT', value: dkimTxtRecord(pem) },
        { name: '@', type: 'TXT', value: 'v=spf1 ip4:127.0.0.2 -all' },
      ],
      'outside.test': [{ name: '@', type: 'TXT', value: 'v=spf1 ip4:127.0.0.1 -all' }],
    },
  });
  app = await startTestApp({
    role: 'mta',
    env: {
      MTA_API_KEY: KEY,
      BOUNCE_VERP_KEY: 'forward-e2e-verp-key-0123456789abcdef',
      BOUNCE_HOST: 'bounces.mailbox.test',
      DNS_SERVERS: dns.servers,
      MTA_DELIVERY_PORT: String(sink.port),
      MTA_POOLS: 'transactional:127.0.0.2@mta1.mailbox.test;campaign:127.0.0.3@mta2.mailbox.test',
      MTA_WARMED_IPS: '127.0.0.2,127.0.0.3',
      MTA_WEBHOOK_URL: `${backend.url}/webhooks/mta`,
      MTA_WEBHOOK_SECRET: 'forward-e2e-secret',
    },
  });
  expect((await api('POST', '/dkim', { domain: 'mailbox.test', selector: 'fw', privateKey: pem })).status).toBeLessThan(300);
  expect((await api('POST', '/inbound/routes', { domain: 'mailbox.test', address: 'info', action: 'forward', targets: ['owner@dest.test'], organizationId: 'org-fw' })).status).toBe(201);
}, 120_000);

afterAll(async () => {
  await app?.close();
  await Promise.all([sink?.close(), dns?.stop(), backend?.close()]);
});

const inboundPort = () => app.mta!.inbound.port!;
const headers = (m: SinkMessage) => m.data.toString('latin1').split('\r\n\r\n')[0]!.replace(/\r\n\s+/g, ' ');
const header = (m: SinkMessage, name: string) => new RegExp(`^${name}: (.*)$`, 'mi').exec(headers(m))?.[1];

async function send(to: string, raw: string | Buffer, from = 'alice@outside.test'): Promise<{ ok: boolean; response: string }> {
  const transport = nodemailer.createTransport({ host: '127.0.0.1', port: inboundPort(), secure: false, ignoreTLS: true, name: 'mx.outside.test' });
  try {
    const info = await transport.sendMail({ envelope: { from, to: [to] }, raw });
    return { ok: true, response: info.response };
  } catch (err) {
    return { ok: false, response: (err as { response?: string; message: string }).response ?? (err as Error).message };
  } finally {
    transport.close();
  }
}

describe('a forward route', () => {
  let copy: SinkMessage;

  beforeAll(async () => {
    const original = [
      'From: "Alice Example" <alice@outside.test>',
      'To: info@mailbox.test',
      'Subject: Quote request',
      'Message-ID: <orig-1@outside.test>',
      'DKIM-Signature: v=1; a=rsa-sha256; d=outside.test; s=x; h=from; bh=AAAA; b=AAAA',
      '',
      'Could you send a quote?',
      '',
    ].join('\r\n');
    expect((await send('info@mailbox.test', original)).ok).toBe(true);
    [copy] = await sink.waitForMessages(1, 30_000);
  }, 60_000);

  it('re-originates the copy: From of the route domain with the display name, Reply-To the sender, original results recorded', () => {
    expect(copy.rcptTo).toEqual(['owner@dest.test']);
    expect(header(copy, 'From')).toBe('"Alice Example" <info@mailbox.test>');
    expect(header(copy, 'Reply-To')).toBe('"Alice Example" <alice@outside.test>');
    expect(header(copy, 'X-Original-Authentication-Results')).toMatch(/^bounces\.mailbox\.test; .*spf=pass .*smtp\.mailfrom=alice@outside\.test/);
    expect(header(copy, 'X-Lettermill-Loop')).toBe('mailbox.test');
    expect(header(copy, 'Subject')).toBe('Quote request');
    expect(header(copy, 'Message-ID')).not.toBe('<orig-1@outside.test>');
    expect(copy.data.toString()).toContain('Could you send a quote?');
    // Envelope of the mailbox domain's VERP host: a DSN comes back to us.
    expect(copy.mailFrom).toMatch(/^bounce\+.+@bounces\.mailbox\.test$/);
  });

  it('carries one DKIM signature, of the mailbox domain, that dkimpy verifies', async () => {
    const sigs = headers(copy).match(/^DKIM-Signature: .*$/gim) ?? [];
    expect(sigs).toHaveLength(1);
    expect(sigs[0]).toMatch(/\bd=mailbox\.test\b/);
    expect(await dkimpyVerify(copy.data, dns)).toEqual(['pass']);
  });

  it('a DSN of the copy suppresses the forward target', async () => {
    const report = dsnReport({ recipient: 'owner@dest.test', status: '5.1.1', diagnostic: '550 5.1.1 no such user', returnPath: copy.mailFrom });
    expect((await send(copy.mailFrom, report, '')).ok).toBe(true);
    await pollUntil(async () => (await api('GET', '/suppression/check/owner@dest.test')).body.data?.suppressed === true, 10_000, () => 'owner@dest.test not suppressed');
    expect((await api('GET', '/suppression/check/owner@dest.test')).body.data).toMatchObject({ suppressed: true });
  });

  it('the copy sent back to us by another forwarder is refused as a loop', async () => {
    const r = await send('info@mailbox.test', copy.data, 'relay@outside.test');
    expect(r.ok).toBe(false);
    expect(r.response).toMatch(/^554 5\.4\.6/);
    await new Promise((res) => setTimeout(res, 500));
    expect(sink.messages).toHaveLength(1);
  });
});
