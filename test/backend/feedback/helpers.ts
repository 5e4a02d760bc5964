/** Test-side signers. Independent of the code under test: each computes the signature from the provider's recipe. */
import { createHmac, createSign } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

export const FIXTURES = fileURLToPath(new URL('../../fixtures/', import.meta.url));
export const fixture = (path: string): Buffer => readFileSync(FIXTURES + path);

export function hexHmac(secret: string, timestamp: number | string, body: string | Buffer): string {
  return createHmac('sha256', secret).update(`${timestamp}.`).update(body).digest('hex');
}

/** Mandrill's published recipe: URL, then each field name and value sorted by name. */
export function mandrillSignature(key: string, url: string, fields: Record<string, string>): string {
  let data = url;
  for (const k of Object.keys(fields).sort()) data += k + fields[k];
  return createHmac('sha1', key).update(data).digest('base64');
}

export function mandrillBody(events: unknown[]): { body: string; fields: Record<string, string> } {
  const fields = { mandrill_events: JSON.stringify(events) };
  return { body: new URLSearchParams(fields).toString(), fields };
}

export const REAL_SNS = {
  'real-notification-v1.json': {
    url: 'https://sns.us-west-2.amazonaws.com/SimpleNotificationService-56e67fcb41f6fec09b0196692625d385.pem',
    pem: 'sns/SimpleNotificationService-56e67fcb41f6fec09b0196692625d385.pem',
  },
  'sdk-ruby-v1-sha1.json': {
    url: 'https://sns.us-east-2.amazonaws.com/SimpleNotificationService-7ff5318490ec183fbaddaa2a969abfda.pem',
    pem: 'sns/sdk-ruby-cert-7ff5318490ec183fbaddaa2a969abfda.pem',
  },
  'sdk-ruby-v2-sha256.json': {
    url: 'https://sns.us-east-2.amazonaws.com/SimpleNotificationService-7ff5318490ec183fbaddaa2a969abfda.pem',
    pem: 'sns/sdk-ruby-cert-7ff5318490ec183fbaddaa2a969abfda.pem',
  },
} as const;

export const TEST_SIGNER_URL = 'https://sns.us-east-1.amazonaws.com/SimpleNotificationService-lettermilltest.pem';
export const EXPIRED_SIGNER_URL = 'https://sns.us-east-1.amazonaws.com/SimpleNotificationService-lettermillexpired.pem';
export const TEST_TOPIC = 'arn:aws:sns:us-east-1:123456789012:ses-feedback';

/** Certificates the injected fetcher serves: the real Amazon ones and the test signer's. */
export function pinnedCertificates(): Record<string, string> {
  const out: Record<string, string> = {};
  for (const s of Object.values(REAL_SNS)) out[s.url] = fixture(s.pem).toString('utf8');
  out[TEST_SIGNER_URL] = fixture('sns/test-signer/valid.pem').toString('utf8');
  out[EXPIRED_SIGNER_URL] = fixture('sns/test-signer/expired.pem').toString('utf8');
  return out;
}

/** A recording fetcher over a fixed URL → text map; unknown URLs fail like a 404. */
export function recordingFetcher(pages: Record<string, string>) {
  const calls: string[] = [];
  const fetch = async (url: string) => {
    calls.push(url);
    const page = pages[url];
    if (page === undefined) throw new Error(`GET ${url} answered 404`);
    return page;
  };
  return { calls, fetch };
}

/** Signs an SNS message with the test signer, as SNS does (canonical string per Type). */
export function signSns(
  msg: Record<string, string>,
  opts: { version?: '1' | '2'; certUrl?: string } = {},
): Record<string, string> {
  const version = opts.version ?? '2';
  const m: Record<string, string> = { ...msg, SignatureVersion: version, SigningCertURL: opts.certUrl ?? TEST_SIGNER_URL };
  const fields =
    m.Type === 'Notification'
      ? ['Message', 'MessageId', 'Subject', 'Timestamp', 'TopicArn', 'Type']
      : ['Message', 'MessageId', 'SubscribeURL', 'Timestamp', 'Token', 'TopicArn', 'Type'];
  let canonical = '';
  for (const f of fields) if (m[f] !== undefined) canonical += `${f}\n${m[f]}\n`;
  const signer = createSign(version === '1' ? 'RSA-SHA1' : 'RSA-SHA256');
  signer.update(canonical);
  m.Signature = signer.sign(fixture('sns/test-signer/signer.key'), 'base64');
  return m;
}
