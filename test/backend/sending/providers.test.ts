/**
 * The SES, Resend and Mandrill providers against loopback HTTP servers that check the real
 * request format (the MTA's job is checked in test/backend/api/events-transactional.test.ts): SES's SigV4 signature recomputed by botocore (Debian python3-botocore, an
 * implementation we did not write) and the SESv2 SendEmail body; Resend's and Mandrill's
 * documented JSON and auth. Then, for each and the MTA: 429 then success (Retry-After
 * honoured), 500 then success, a 4xx as a clear failure, a timeout within its bound, and no
 * credential in an error; the SMTP relay the same in SMTP terms (4xx, 5xx, no answer).
 */
import { execFileSync } from 'node:child_process';
import { simpleParser } from 'mailparser';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createProvider, providerSettings, type ProviderName } from '../../../src/backend/api/sending/provider.js';
import { ProviderError, type OutboundMessage } from '../../../src/backend/api/sending/types.js';
import { systemClock } from '../../../src/shared/clock.js';
import { describeConfig, loadConfig, SECRET_NAMES } from '../../../src/shared/config.js';
import { startHttpReceiver, type HttpReceiver, type RecordedRequest } from '../../harness/http-receiver.js';
import { startSmtpSink, type SmtpSink } from '../../harness/smtp-sink.js';

const AWS = { AWS_ACCESS_KEY_ID: 'AKIDLETTERMILLTEST01', AWS_SECRET_ACCESS_KEY: 'wJalrXUtnFEMI/K7MDENG/bPxRfiCYLETTERMILL', AWS_REGION: 'eu-west-1' };
const RESEND_KEY = 're_lettermill_test_key_0123456789';
const MANDRILL_KEY = 'md-lettermill-test-key-0123456789';
const SECRETS = [AWS.AWS_SECRET_ACCESS_KEY, RESEND_KEY, MANDRILL_KEY, 'session-token-secret-value', 'mta-master-key-0123456789'];

const message: OutboundMessage = {
  id: 'es_01JTESTSENDID0000000000000',
  to: 'reader@example.com',
  from: 'Acme Receipts <receipts@acme.test>',
  subject: 'Your receipt',
  html: '<p>Thanks! <a href="http://lettermill.test/t/c/tok123">See your order</a></p>',
  text: 'Thanks! http://lettermill.test/t/c/tok123',
  replyTo: 'help@acme.test',
  headers: { 'List-Unsubscribe': '<http://lettermill.test/unsub/tok456>', 'List-Unsubscribe-Post': 'List-Unsubscribe=One-Click', 'X-Campaign': 'spring' },
  ipPool: 'transactional',
  dkimDomain: 'acme.test',
};

let server: HttpReceiver;
beforeAll(async () => {
  server = await startHttpReceiver();
});
afterAll(async () => {
  await server?.close();
});
beforeEach(() => server.reset());

function provider(name: ProviderName, env: Record<string, string> = {}, timeoutMs = 5_000) {
  const config = loadConfig({
    ...AWS,
    SES_ENDPOINT: server.url,
    RESEND_API_KEY: RESEND_KEY,
    RESEND_API_URL: server.url,
    MANDRILL_API_KEY: MANDRILL_KEY,
    MANDRILL_API_URL: server.url,
    MTA_API_KEY: 'mta-master-key-0123456789',
    ...env,
  });
  return createProvider(name, providerSettings(config, server.url), { timeoutMs, clock: systemClock });
}

const json = (r: RecordedRequest) => JSON.parse(r.rawBody.toString('utf8'));

/** botocore's SigV4 over the request as received: the headers it names, the URL, the body. */
function botocoreSignature(r: RecordedRequest, creds: { key: string; secret: string; token?: string }, region: string): string {
  const auth = String(r.headers.authorization);
  const signed = /SignedHeaders=([^,]+)/.exec(auth)![1]!.split(';');
  const headers: Record<string, string> = {};
  // host is left out: botocore derives it from the URL itself.
  for (const h of signed) if (h !== 'host') headers[h] = String(r.headers[h]);
  const script = `
import sys, json
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
d = json.load(sys.stdin)
req = AWSRequest(method=d['method'], url=d['url'], data=d['body'].encode('utf-8'), headers=d['headers'])
req.context['timestamp'] = d['headers']['x-amz-date']
auth = SigV4Auth(Credentials(d['key'], d['secret'], d.get('token')), 'ses', d['region'])
canonical = auth.canonical_request(req)
print(auth.signature(auth.string_to_sign(req, canonical), req))
`;
  const input = JSON.stringify({ method: r.method, url: `${server.url}${r.url}`, headers, body: r.rawBody.toString('utf8'), ...creds, region });
  return execFileSync('/usr/bin/python3', ['-c', script], { input }).toString().trim();
}

describe('request formats', () => {
  it('SES: SESv2 SendEmail with the raw MIME message and the send id tag, signed as botocore signs', async () => {
    server.respondWith([{ status: 200, body: { MessageId: '0102018c-ses-message-id-000001' } }]);
    const result = await provider('ses', { SES_CONFIGURATION_SET: 'lettermill-feedback' }).send(message);
    expect(result.providerMessageId).toBe('0102018c-ses-message-id-000001');

    const [r] = server.requests;
    expect(r!.method).toBe('POST');
    expect(r!.url).toBe('/v2/email/outbound-emails');
    expect(r!.headers['content-type']).toBe('application/json');
    const body = json(r!);
    expect(Object.keys(body).sort()).toEqual(['ConfigurationSetName', 'Content', 'Destination', 'EmailTags', 'FromEmailAddress']);
    expect(body).toMatchObject({
      FromEmailAddress: message.from,
      Destination: { ToAddresses: ['reader@example.com'] },
      ConfigurationSetName: 'lettermill-feedback',
      EmailTags: [{ Name: 'lettermill_send_id', Value: message.id }],
    });
    const mime = await simpleParser(Buffer.from(body.Content.Raw.Data, 'base64'));
    expect(mime.subject).toBe('Your receipt');
    const line = (k: string) => mime.headerLines.find((h) => h.key === k)?.line;
    expect(line('list-unsubscribe-post')).toBe('List-Unsubscribe-Post: List-Unsubscribe=One-Click');
    expect(line('list-unsubscribe')).toBe('List-Unsubscribe: <http://lettermill.test/unsub/tok456>');
    expect(mime.headers.get('x-lettermill-send-id')).toBe(message.id);
    expect(mime.headers.get('x-campaign')).toBe('spring');
    expect(mime.replyTo?.text).toBe('help@acme.test');
    expect(mime.html).toContain('http://lettermill.test/t/c/tok123');

    const auth = String(r!.headers.authorization);
    expect(auth).toMatch(/^AWS4-HMAC-SHA256 Credential=AKIDLETTERMILLTEST01\/\d{8}\/eu-west-1\/ses\/aws4_request, SignedHeaders=content-type;host;x-amz-date, Signature=[0-9a-f]{64}$/);
    expect(/Signature=([0-9a-f]{64})/.exec(auth)![1]).toBe(botocoreSignature(r!, { key: AWS.AWS_ACCESS_KEY_ID, secret: AWS.AWS_SECRET_ACCESS_KEY }, 'eu-west-1'));
  });

  it('SES: temporary credentials sign the session token too; SES_REGION wins over AWS_REGION', async () => {
    server.respondWith([{ status: 200, body: { MessageId: 'ses-2' } }]);
    await provider('ses', { AWS_SESSION_TOKEN: 'session-token-secret-value', SES_REGION: 'us-east-2' }).send(message);
    const [r] = server.requests;
    expect(r!.headers['x-amz-security-token']).toBe('session-token-secret-value');
    expect(String(r!.headers.authorization)).toContain('/us-east-2/ses/aws4_request, SignedHeaders=content-type;host;x-amz-date;x-amz-security-token,');
    expect(/Signature=([0-9a-f]{64})/.exec(String(r!.headers.authorization))![1]).toBe(
      botocoreSignature(r!, { key: AWS.AWS_ACCESS_KEY_ID, secret: AWS.AWS_SECRET_ACCESS_KEY, token: 'session-token-secret-value' }, 'us-east-2'),
    );
    // A wrong secret gives another signature: the comparison above is not vacuous.
    expect(/Signature=([0-9a-f]{64})/.exec(String(r!.headers.authorization))![1]).not.toBe(
      botocoreSignature(r!, { key: AWS.AWS_ACCESS_KEY_ID, secret: 'not-the-secret', token: 'session-token-secret-value' }, 'us-east-2'),
    );
  });

  it("Resend: POST /emails with Resend's documented JSON, Bearer key, the send id as tag and Idempotency-Key", async () => {
    server.respondWith([{ status: 200, body: { id: '49a3999c-0ce1-4ea6-ab68-afcd6dc2e794' } }]);
    const result = await provider('resend').send(message);
    expect(result.providerMessageId).toBe('49a3999c-0ce1-4ea6-ab68-afcd6dc2e794');
    const [r] = server.requests;
    expect(r!.url).toBe('/emails');
    expect(r!.headers.authorization).toBe(`Bearer ${RESEND_KEY}`);
    expect(r!.headers['idempotency-key']).toBe(message.id);
    expect(json(r!)).toEqual({
      from: message.from,
      to: ['reader@example.com'],
      subject: 'Your receipt',
      html: message.html,
      text: message.text,
      reply_to: 'help@acme.test',
      headers: { ...message.headers, 'X-Lettermill-Send-Id': message.id },
      tags: [{ name: 'lettermill_send_id', value: message.id }],
    });
  });

  it("Mandrill: messages/send.json with the key in the body, the send id as metadata, Mandrill's tracking off", async () => {
    server.respondWith([{ status: 200, body: [{ email: 'reader@example.com', status: 'sent', _id: 'abc123abc123abc123abc123abc123ab', reject_reason: null }] }]);
    const result = await provider('mandrill').send(message);
    expect(result.providerMessageId).toBe('abc123abc123abc123abc123abc123ab');
    const [r] = server.requests;
    expect(r!.url).toBe('/messages/send.json');
    expect(r!.headers.authorization).toBeUndefined();
    expect(json(r!)).toEqual({
      key: MANDRILL_KEY,
      message: {
        html: message.html,
        text: message.text,
        subject: 'Your receipt',
        from_email: 'receipts@acme.test',
        from_name: 'Acme Receipts',
        to: [{ email: 'reader@example.com', type: 'to' }],
        headers: { ...message.headers, 'X-Lettermill-Send-Id': message.id, 'Reply-To': 'help@acme.test' },
        track_opens: false,
        track_clicks: false,
        metadata: { lettermill_send_id: message.id },
      },
      async: false,
    });
  });
});

const OK: Record<string, unknown> = {
  ses: { MessageId: 'ses-ok' },
  resend: { id: 'resend-ok' },
  mandrill: [{ email: 'reader@example.com', status: 'queued', _id: 'mandrill-ok' }],
  mta: { data: { jobId: 'job_1', messageId: message.id, status: 'queued' } },
};
const OK_ID: Record<string, string> = { ses: 'ses-ok', resend: 'resend-ok', mandrill: 'mandrill-ok', mta: message.id };
/** Each provider's documented refusal. */
const REFUSAL: Record<string, { status: number; body: unknown; reason: string }> = {
  ses: { status: 400, body: { message: 'Email address is not verified. The following identities failed the check: receipts@acme.test' }, reason: 'Email address is not verified' },
  resend: { status: 422, body: { statusCode: 422, name: 'validation_error', message: 'The acme.test domain is not verified.' }, reason: 'validation_error: The acme.test domain is not verified.' },
  mandrill: { status: 500, body: { status: 'error', code: -1, name: 'Invalid_Key', message: 'Invalid API key' }, reason: 'Invalid_Key: Invalid API key' },
  mta: { status: 400, body: { error: { message: 'dkimDomain has no active DKIM key', category: 'invalid_input', data: { reason: 'validation_error' } } }, reason: 'dkimDomain has no active DKIM key' },
};

const sendError = async (p: { send(m: OutboundMessage): Promise<unknown> }): Promise<ProviderError> => {
  try {
    await p.send(message);
  } catch (err) {
    return err as ProviderError;
  }
  throw new Error('the send succeeded');
};

describe.each(['ses', 'resend', 'mandrill', 'mta'] as const)('%s errors', (name) => {
  it('429 with Retry-After: waits that long, then the retry succeeds', async () => {
    server.respondWith([{ status: 429, headers: { 'retry-after': '1' }, body: { message: 'slow down' } }, { status: 200, body: OK[name] }]);
    const result = await provider(name).send(message);
    expect(result.providerMessageId).toBe(OK_ID[name]);
    const [a, b] = server.requests;
    expect(server.requests).toHaveLength(2);
    expect(b!.receivedAt.getTime() - a!.receivedAt.getTime()).toBeGreaterThanOrEqual(950);
    expect(b!.rawBody.toString()).toBe(a!.rawBody.toString()); // the same message again
  });

  it('500 then success: retried after a short backoff', async () => {
    server.respondWith([{ status: 500, body: { message: 'Internal failure' } }, { status: 200, body: OK[name] }]);
    expect((await provider(name).send(message)).providerMessageId).toBe(OK_ID[name]);
    expect(server.requests).toHaveLength(2);
  });

  it("a refusal fails at once, not retryable, with the provider's reason and no credential", async () => {
    const refusal = REFUSAL[name]!;
    server.respondWith([{ status: refusal.status, body: refusal.body }]);
    const err = await sendError(provider(name, { AWS_SESSION_TOKEN: 'session-token-secret-value' }));
    expect(err).toBeInstanceOf(ProviderError);
    expect(err.retryable).toBe(false);
    expect(err.message).toContain(refusal.reason);
    expect(server.requests).toHaveLength(1);
    for (const s of SECRETS) expect(err.message + String(err.stack)).not.toContain(s);
  });

  it('5xx every time: gives up after the policy attempts, retryable', async () => {
    server.setResponder(() => ({ status: 503, body: { message: 'Service unavailable' } }));
    const err = await sendError(provider(name));
    expect(err.retryable).toBe(true);
    expect(err.message).toMatch(/503 after 4 attempt/);
    expect(server.requests).toHaveLength(4);
  });

  it('no answer: fails within the timeout, retryable', async () => {
    server.setResponder(() => ({ hang: true }));
    const started = performance.now();
    const err = await sendError(provider(name, {}, 700));
    const took = performance.now() - started;
    expect(err.retryable).toBe(true);
    expect(err.message).toContain('no answer within 700 ms');
    expect(took).toBeGreaterThanOrEqual(650);
    expect(took).toBeLessThan(2_000);
  });
});

describe('Mandrill per-recipient answers', () => {
  it('a rejected recipient is a refusal with its reject_reason', async () => {
    server.respondWith([{ status: 200, body: [{ email: 'reader@example.com', status: 'rejected', reject_reason: 'hard-bounce', _id: 'x1' }] }]);
    const err = await sendError(provider('mandrill'));
    expect(err.retryable).toBe(false);
    expect(err.message).toContain('rejected');
    expect(err.message).toContain('hard-bounce');
  });
});

describe('configuration', () => {
  it('lists every provider variable in `lettermill config`; credentials are secrets (redacted from logs)', () => {
    const names = describeConfig().map((v) => v.name);
    for (const n of ['SES_ENDPOINT', 'RESEND_API_URL', 'MANDRILL_API_URL', 'AWS_REGION', 'SES_REGION', 'SES_CONFIGURATION_SET']) {
      expect(names).toContain(n);
      expect(SECRET_NAMES.has(n)).toBe(false);
    }
    for (const n of ['AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY', 'AWS_SESSION_TOKEN', 'RESEND_API_KEY', 'MANDRILL_API_KEY', 'SMTP_RELAY_URL']) {
      expect(names).toContain(n);
      expect(SECRET_NAMES.has(n)).toBe(true);
    }
    expect(loadConfig({}).RESEND_API_URL).toBe('https://api.resend.com');
    expect(loadConfig({}).MANDRILL_API_URL).toBe('https://mandrillapp.com/api/1.0');
    expect(() => loadConfig({ SES_ENDPOINT: 'ftp://x' })).toThrow(/SES_ENDPOINT must be a URL/);
  });
});

describe('smtp errors (the relay on an SMTP sink)', () => {
  let sink: SmtpSink;
  beforeAll(async () => {
    sink = await startSmtpSink();
  });
  afterAll(async () => {
    await sink?.close();
  });
  beforeEach(() => sink.reset());
  const relay = (timeoutMs = 5_000) => {
    const config = loadConfig({ SMTP_RELAY_URL: `smtp://relayuser:relay-password-secret@127.0.0.1:${sink.port}` });
    return createProvider('smtp', providerSettings(config, undefined), { timeoutMs, clock: systemClock }) as ReturnType<typeof createProvider> & { close(): Promise<void> };
  };

  it('a 451 and then a 421 are tried again; the message arrives once', async () => {
    sink.failNext({ stage: 'rcpt', code: 451, message: '4.7.1 Try again later' });
    sink.failNext({ stage: 'mail', code: 421, message: '4.3.2 Service not available' });
    const p = relay();
    try {
      const result = await p.send(message);
      const [m] = await sink.waitForMessages(1);
      expect(sink.messages).toHaveLength(1);
      expect((await simpleParser(m!.data)).headers.get('x-lettermill-send-id')).toBe(message.id);
      expect(result.providerMessageId).toBeTruthy();
    } finally {
      await p.close();
    }
  });

  it("a 550 fails at once with the relay's text and no credential", async () => {
    sink.failNext({ stage: 'rcpt', code: 550, message: '5.1.1 No such user here' });
    const p = relay();
    try {
      const err = await sendError(p);
      expect(err.retryable).toBe(false);
      expect(err.message).toContain('No such user here');
      expect(err.message + String(err.stack)).not.toContain('relay-password-secret');
      expect(sink.messages).toHaveLength(0);
    } finally {
      await p.close();
    }
  });

  it('no answer to MAIL FROM: fails within the timeout, retryable', async () => {
    sink.failNext({ stage: 'mail', hang: true });
    const p = relay(700);
    try {
      const started = performance.now();
      const err = await sendError(p);
      expect(err.retryable).toBe(true);
      expect(err.message).toContain('within 700 ms');
      expect(performance.now() - started).toBeLessThan(2_500);
    } finally {
      await p.close();
    }
  });
});
