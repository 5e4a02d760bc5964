import { createHmac } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { Webhook } from 'svix';
import { VerificationError } from '../../../src/backend/feedback/verify/common.js';
import { MTA_SCHEME, RELAY_SCHEME, verifyTimestampedHmac } from '../../../src/backend/feedback/verify/hmac.js';
import { verifySvix } from '../../../src/backend/feedback/verify/svix.js';
import { parseFormFields, verifyMandrill } from '../../../src/backend/feedback/verify/mandrill.js';
import {
  parseSnsMessage,
  snsCertUrlRegion,
  snsHostRegion,
  SnsCertificateCache,
  verifySnsMessage,
} from '../../../src/backend/feedback/verify/sns.js';
import { ManualClock } from '../../../src/shared/clock.js';
import {
  EXPIRED_SIGNER_URL,
  fixture,
  hexHmac,
  mandrillBody,
  mandrillSignature,
  pinnedCertificates,
  REAL_SNS,
  recordingFetcher,
  signSns,
  TEST_SIGNER_URL,
  TEST_TOPIC,
} from './helpers.js';

const NOW = Date.UTC(2026, 0, 1, 12, 0, 0);
const NOW_S = NOW / 1000;

function reasonOf(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    if (err instanceof VerificationError) return err.reason;
    throw err;
  }
  return 'accepted';
}
async function reasonOfAsync(fn: () => Promise<unknown>): Promise<string> {
  try {
    await fn();
  } catch (err) {
    if (err instanceof VerificationError) return err.reason;
    throw err;
  }
  return 'accepted';
}

describe.each([
  { name: 'MTA', scheme: MTA_SCHEME, ts: 'x-mta-timestamp', sig: 'x-mta-signature' },
  { name: 'relay', scheme: RELAY_SCHEME, ts: 'x-relay-timestamp', sig: 'x-relay-signature' },
])('$name timestamped HMAC-SHA256', ({ scheme, ts, sig }) => {
  const secret = 'a-shared-secret-of-reasonable-length';
  const body = Buffer.from('{"event":"bounced","data":{"email":"a@b.test"}}');
  const check = (headers: Record<string, string>, b = body, s = secret, now = NOW) =>
    reasonOf(() => verifyTimestampedHmac(scheme, { secret: s, body: b, headers, nowMs: now }));
  const signed = (t: number, b: Buffer | string = body, s = secret) => ({ [ts]: String(t), [sig]: hexHmac(s, t, b) });

  it.each([
    ['valid signature', () => check(signed(NOW_S)), 'accepted'],
    ['valid at exactly 300 s old', () => check(signed(NOW_S - 300)), 'accepted'],
    ['valid at exactly 300 s ahead', () => check(signed(NOW_S + 300)), 'accepted'],
    ['tampered body', () => check(signed(NOW_S), Buffer.from(body.toString().replace('a@b', 'x@b'))), 'invalid_signature'],
    ['wrong secret', () => check(signed(NOW_S, body, 'another-secret')), 'invalid_signature'],
    ['stale timestamp (301 s)', () => check(signed(NOW_S - 301)), 'timestamp_out_of_tolerance'],
    ['future timestamp (301 s)', () => check(signed(NOW_S + 301)), 'timestamp_out_of_tolerance'],
    ['timestamp swapped after signing', () => check({ ...signed(NOW_S), [ts]: String(NOW_S + 1) }), 'invalid_signature'],
    ['missing signature', () => check({ [ts]: String(NOW_S) }), 'missing_signature'],
    ['missing timestamp', () => check({ [sig]: hexHmac(secret, NOW_S, body) }), 'missing_timestamp'],
    ['timestamp in milliseconds', () => check(signed(NOW)), 'invalid_timestamp'],
    ['non-numeric timestamp', () => check({ [ts]: '1e9', [sig]: hexHmac(secret, '1e9', body) }), 'invalid_timestamp'],
    ['empty signature', () => check({ [ts]: String(NOW_S), [sig]: '' }), 'missing_signature'],
  ])('%s', (_n, run, expected) => {
    expect(run()).toBe(expected);
  });

  it('verifies over the raw bytes, not a re-serialization', () => {
    const spaced = Buffer.from('{ "event" : "sent" }');
    expect(check(signed(NOW_S, spaced), spaced)).toBe('accepted');
    expect(check(signed(NOW_S, spaced), Buffer.from('{"event":"sent"}'))).toBe('invalid_signature');
  });

  it('treats a repeated signature header as missing', () => {
    const h: Record<string, any> = signed(NOW_S);
    h[sig] = [h[sig], h[sig]];
    expect(check(h)).toBe('missing_signature');
  });

  it(scheme.lowercaseOnly ? 'refuses an upper-case hex signature (spec: lowercase)' : 'accepts upper-case hex', () => {
    const h = signed(NOW_S);
    h[sig] = h[sig]!.toUpperCase();
    expect(check(h)).toBe(scheme.lowercaseOnly ? 'invalid_signature' : 'accepted');
  });
});

describe('Svix (Resend) signatures made by the real svix package', () => {
  const secret = 'whsec_' + Buffer.from('0123456789abcdef0123456789abcdef').toString('base64');
  const other = 'whsec_' + Buffer.from('fedcba9876543210fedcba9876543210').toString('base64');
  const body = Buffer.from('{"type":"email.bounced","created_at":"2026-01-01T12:00:00.000Z","data":{"email_id":"e1"}}');
  const sign = (id: string, tsMs: number, payload: Buffer | string = body, s = secret) => ({
    'svix-id': id,
    'svix-timestamp': String(Math.floor(tsMs / 1000)),
    'svix-signature': new Webhook(s).sign(id, new Date(tsMs), payload.toString()),
  });
  const check = (headers: Record<string, string>, b = body, s = secret) =>
    reasonOf(() => verifySvix({ secret: s, body: b, headers, nowMs: NOW }));

  it('accepts a svix signature and returns the svix-id as the event id', () => {
    const headers = sign('msg_2a', NOW);
    expect(verifySvix({ secret, body, headers, nowMs: NOW })).toEqual({ id: 'msg_2a', timestamp: NOW_S });
  });

  it('agrees with the svix package\'s own verifier (which reads the real time)', () => {
    const now = Date.now();
    const headers = sign('msg_live', now);
    expect(() => new Webhook(secret).verify(body.toString(), headers)).not.toThrow();
    expect(verifySvix({ secret, body, headers, nowMs: now }).id).toBe('msg_live');
  });

  it.each([
    ['tampered body', () => check(sign('msg_1', NOW), Buffer.from(body.toString().replace('e1', 'e2'))), 'invalid_signature'],
    ['wrong secret', () => check(sign('msg_1', NOW, body, other)), 'invalid_signature'],
    ['stale timestamp', () => check(sign('msg_1', NOW - 301_000)), 'timestamp_out_of_tolerance'],
    ['future timestamp', () => check(sign('msg_1', NOW + 301_000)), 'timestamp_out_of_tolerance'],
    ['id swapped after signing', () => check({ ...sign('msg_1', NOW), 'svix-id': 'msg_2' }), 'invalid_signature'],
    ['missing signature', () => check({ 'svix-id': 'msg_1', 'svix-timestamp': String(NOW_S) }), 'missing_signature'],
    ['missing id', () => check({ ...sign('msg_1', NOW), 'svix-id': '' }), 'missing_signature'],
    ['missing timestamp', () => check({ ...sign('msg_1', NOW), 'svix-timestamp': '' }), 'missing_timestamp'],
    ['v2 scheme only', () => check({ ...sign('msg_1', NOW), 'svix-signature': sign('msg_1', NOW)['svix-signature'].replace('v1,', 'v2,') }), 'invalid_signature'],
  ])('%s', (_n, run, expected) => {
    expect(run()).toBe(expected);
  });

  it('accepts when any of several space-separated entries matches (secret rotation)', () => {
    const good = sign('msg_1', NOW)['svix-signature'];
    const old = sign('msg_1', NOW, body, other)['svix-signature'];
    expect(check({ ...sign('msg_1', NOW), 'svix-signature': `${old} ${good}` })).toBe('accepted');
    expect(check({ ...sign('msg_1', NOW), 'svix-signature': `${old} v1,AAAA` })).toBe('invalid_signature');
  });
});

describe('Mandrill signatures', () => {
  const key = 'mandrill-webhook-key-123';
  const url = 'https://mail.example.test/webhooks/mandrill';
  const { body, fields } = mandrillBody([{ event: 'hard_bounce', _id: 'm1', ts: NOW_S, msg: { email: 'A@x.test' } }]);
  const check = (sig: string | undefined, b = body, u = url, k = key) =>
    reasonOf(() =>
      verifyMandrill({ key: k, url: u, fields: parseFormFields(Buffer.from(b)), headers: sig === undefined ? {} : { 'x-mandrill-signature': sig } }),
    );

  it.each([
    ['valid', () => check(mandrillSignature(key, url, fields)), 'accepted'],
    ['tampered body', () => check(mandrillSignature(key, url, fields), body.replace('hard_bounce', 'soft_bounce')), 'invalid_signature'],
    ['wrong key', () => check(mandrillSignature('other-key', url, fields)), 'invalid_signature'],
    ['other registered URL', () => check(mandrillSignature(key, url + '/', fields)), 'invalid_signature'],
    ['missing signature', () => check(undefined), 'missing_signature'],
  ])('%s', (_n, run, expected) => {
    expect(run()).toBe(expected);
  });

  it('signs every field, sorted by name', () => {
    const multi = { mandrill_events: '[]', b_extra: 'two', a_extra: 'one' };
    const b = new URLSearchParams(multi).toString();
    expect(check(mandrillSignature(key, url, multi), b)).toBe('accepted');
    // The same fields concatenated in body order instead of sorted order must not verify.
    const unsorted = Buffer.from(url + 'mandrill_events[]b_extratwoa_extraone');
    expect(check(createHmac('sha1', key).update(unsorted).digest('base64'), b)).toBe('invalid_signature');
  });
});

describe('SNS certificate URL', () => {
  it.each([
    'https://sns.us-east-1.amazonaws.com/SimpleNotificationService-abc.pem',
    'https://sns.us-gov-west-1.amazonaws.com/SimpleNotificationService-abc.pem',
    'https://sns.ap-southeast-2.amazonaws.com/SimpleNotificationService-abc.pem',
  ])('accepts %s', (u) => {
    expect(snsCertUrlRegion(u)).not.toBeNull();
  });

  it.each([
    'http://sns.us-east-1.amazonaws.com/SimpleNotificationService-abc.pem',
    'https://sns.us-east-1.amazonaws.com.evil.test/SimpleNotificationService-abc.pem',
    'https://evil.test/sns.us-east-1.amazonaws.com/x.pem',
    'https://sns.us-east-1.amazonaws.com@evil.test/x.pem',
    'https://user@sns.us-east-1.amazonaws.com/x.pem',
    'https://sns.us-east-1.amazonaws.com:8443/x.pem',
    'https://sns.us-east-1.amazonaws.com:443/x.pem',
    'https://sns.evil.amazonaws.com/x.pem',
    'https://s3.us-east-1.amazonaws.com/x.pem',
    'https://sns.us-east-1.amazonaws.com/x.pem?x=1',
    'https://sns.us-east-1.amazonaws.com/x.txt',
    'https://sns.us-east-1.amazonaws.com/a/../../evil.pem/..',
    'https://evil.test\\@sns.us-east-1.amazonaws.com/x.pem',
    'https://sns.us-east-1.amazonaws.com%2eevil.test/x.pem',
    'https://SNS.US-EAST-1.AMAZONAWS.COM.evil.test/x.pem',
    'file:///etc/passwd',
    'https://127.0.0.1/x.pem',
    'https://sns.us-east-1.amazonaws.com./x.pem',
  ])('refuses %s', (u) => {
    expect(snsCertUrlRegion(u)).toBeNull();
  });

  it('checks SubscribeURL hosts the same way, any path', () => {
    expect(snsHostRegion('https://sns.eu-west-1.amazonaws.com/?Action=ConfirmSubscription&Token=x')).toBe('eu-west-1');
    expect(snsHostRegion('https://attacker.test/?Action=ConfirmSubscription')).toBeNull();
  });
});

describe('SNS signatures: the real Amazon samples', () => {
  const clock = new ManualClock(NOW);
  const samples = Object.keys(REAL_SNS) as (keyof typeof REAL_SNS)[];

  it.each(samples)('%s verifies with its pinned certificate', async (name) => {
    const { calls, fetch } = recordingFetcher(pinnedCertificates());
    const certs = new SnsCertificateCache({ fetch, clock });
    const m = parseSnsMessage(fixture(`sns/${name}`));
    // The samples are years old: "now" is the message's own time. Their certificates were
    // valid then, so the expiry check can stay on.
    const nowMs = Date.parse(m.Timestamp) + 1000;
    await expect(verifySnsMessage(m, { certs, nowMs, checkCertExpiry: true })).resolves.toBeUndefined();
    expect(calls).toEqual([REAL_SNS[name].url]);
  });

  it.each(samples)('%s with its Message tampered does not verify', async (name) => {
    const { fetch } = recordingFetcher(pinnedCertificates());
    const certs = new SnsCertificateCache({ fetch, clock });
    const m = parseSnsMessage(fixture(`sns/${name}`));
    const nowMs = Date.parse(m.Timestamp);
    for (const tampered of [{ ...m, Message: m.Message + ' ' }, { ...m, TopicArn: m.TopicArn + 'x' }, { ...m, Subject: 'added' }]) {
      expect(await reasonOfAsync(() => verifySnsMessage(tampered, { certs, nowMs, checkCertExpiry: false }))).toBe('invalid_signature');
    }
  });

  it('a v1 signature presented as v2 does not verify', async () => {
    const { fetch } = recordingFetcher(pinnedCertificates());
    const certs = new SnsCertificateCache({ fetch, clock });
    const m = parseSnsMessage(fixture('sns/sdk-ruby-v1-sha1.json'));
    const nowMs = Date.parse(m.Timestamp);
    expect(await reasonOfAsync(() => verifySnsMessage({ ...m, SignatureVersion: '2' }, { certs, nowMs, checkCertExpiry: false }))).toBe(
      'invalid_signature',
    );
    expect(await reasonOfAsync(() => verifySnsMessage({ ...m, SignatureVersion: '3' }, { certs, nowMs, checkCertExpiry: false }))).toBe(
      'unsupported_signature_version',
    );
  });

  it('outside the tolerance at today\'s time, and refused as expired when the time is right but the certificate is not', async () => {
    const { fetch } = recordingFetcher(pinnedCertificates());
    const certs = new SnsCertificateCache({ fetch, clock });
    const m = parseSnsMessage(fixture('sns/real-notification-v1.json'));
    expect(await reasonOfAsync(() => verifySnsMessage(m, { certs, nowMs: NOW, checkCertExpiry: true }))).toBe('timestamp_out_of_tolerance');
  });

  it('a certificate URL on any other host is refused without being fetched', async () => {
    const { calls, fetch } = recordingFetcher(pinnedCertificates());
    const certs = new SnsCertificateCache({ fetch, clock });
    const m = parseSnsMessage(fixture('sns/sdk-ruby-v2-sha256.json'));
    const nowMs = Date.parse(m.Timestamp);
    for (const url of [
      'https://sns.us-east-2.amazonaws.com.attacker.test/SimpleNotificationService-7ff5318490ec183fbaddaa2a969abfda.pem',
      'https://attacker.test/SimpleNotificationService-7ff5318490ec183fbaddaa2a969abfda.pem',
      'http://sns.us-east-2.amazonaws.com/SimpleNotificationService-7ff5318490ec183fbaddaa2a969abfda.pem',
    ]) {
      expect(await reasonOfAsync(() => verifySnsMessage({ ...m, SigningCertURL: url }, { certs, nowMs, checkCertExpiry: false }))).toBe(
        'untrusted_certificate_url',
      );
    }
    expect(calls).toEqual([]);
  });
});

describe('SNS signatures: test signer', () => {
  const clock = new ManualClock(NOW);
  const base = {
    Type: 'Notification',
    MessageId: 'b1',
    TopicArn: TEST_TOPIC,
    Message: '{"notificationType":"Delivery"}',
    Timestamp: new Date(NOW).toISOString(),
  };

  it('verifies SignatureVersion 1 and 2, with and without Subject', async () => {
    const { fetch } = recordingFetcher(pinnedCertificates());
    const certs = new SnsCertificateCache({ fetch, clock });
    for (const version of ['1', '2'] as const) {
      for (const msg of [base, { ...base, Subject: 'Amazon SES Email Event Notification' }]) {
        const m = parseSnsMessage(Buffer.from(JSON.stringify(signSns(msg, { version }))));
        await expect(verifySnsMessage(m, { certs, nowMs: NOW, checkCertExpiry: true })).resolves.toBeUndefined();
      }
    }
  });

  it('refuses an expired certificate when the expiry check is on (production)', async () => {
    const { fetch } = recordingFetcher(pinnedCertificates());
    const certs = new SnsCertificateCache({ fetch, clock });
    const m = parseSnsMessage(Buffer.from(JSON.stringify(signSns(base, { certUrl: EXPIRED_SIGNER_URL }))));
    expect(await reasonOfAsync(() => verifySnsMessage(m, { certs, nowMs: NOW, checkCertExpiry: true }))).toBe('certificate_expired');
    await expect(verifySnsMessage(m, { certs, nowMs: NOW, checkCertExpiry: false })).resolves.toBeUndefined();
  });

  it('caches certificates, shares concurrent fetches and does not cache failures', async () => {
    const { calls, fetch } = recordingFetcher(pinnedCertificates());
    const certs = new SnsCertificateCache({ fetch, clock, ttlMs: 60_000 });
    const m = parseSnsMessage(Buffer.from(JSON.stringify(signSns(base))));
    await Promise.all([1, 2, 3].map(() => verifySnsMessage(m, { certs, nowMs: NOW, checkCertExpiry: true })));
    await verifySnsMessage(m, { certs, nowMs: NOW, checkCertExpiry: true });
    expect(calls).toEqual([TEST_SIGNER_URL]);
    clock.advance(60_000);
    await verifySnsMessage(m, { certs, nowMs: NOW, checkCertExpiry: true });
    expect(calls).toEqual([TEST_SIGNER_URL, TEST_SIGNER_URL]);

    const missing = 'https://sns.us-east-1.amazonaws.com/SimpleNotificationService-missing.pem';
    const m2 = parseSnsMessage(Buffer.from(JSON.stringify(signSns(base, { certUrl: missing }))));
    expect(await reasonOfAsync(() => verifySnsMessage(m2, { certs, nowMs: NOW, checkCertExpiry: true }))).toBe('certificate_unavailable');
    expect(await reasonOfAsync(() => verifySnsMessage(m2, { certs, nowMs: NOW, checkCertExpiry: true }))).toBe('certificate_unavailable');
    expect(calls.filter((c) => c === missing)).toHaveLength(2);
  });

  it('a SubscriptionConfirmation signs SubscribeURL and Token', async () => {
    const { fetch } = recordingFetcher(pinnedCertificates());
    const certs = new SnsCertificateCache({ fetch, clock });
    const msg = {
      ...base,
      Type: 'SubscriptionConfirmation',
      Token: 'tok',
      SubscribeURL: 'https://sns.us-east-1.amazonaws.com/?Action=ConfirmSubscription&Token=tok',
    };
    const signed = signSns(msg);
    await expect(verifySnsMessage(parseSnsMessage(Buffer.from(JSON.stringify(signed))), { certs, nowMs: NOW, checkCertExpiry: true })).resolves.toBeUndefined();
    const swapped = { ...signed, SubscribeURL: 'https://sns.us-east-1.amazonaws.com/?Action=ConfirmSubscription&Token=other' };
    expect(
      await reasonOfAsync(() => verifySnsMessage(parseSnsMessage(Buffer.from(JSON.stringify(swapped))), { certs, nowMs: NOW, checkCertExpiry: true })),
    ).toBe('invalid_signature');
  });

  it('a message without signature fields is a missing signature', () => {
    expect(reasonOf(() => parseSnsMessage(Buffer.from(JSON.stringify(base))))).toBe('missing_signature');
  });
});
