import { verify as cryptoVerify, X509Certificate } from 'node:crypto';
import type { Clock } from '../../../shared/clock.js';
import { findInputFault } from '../../../shared/input.js';
import { checkTolerance, VerificationError } from './common.js';

/**
 * Amazon SNS message signatures (SES feedback arrives through SNS). Hand-written: the
 * published validators fetch certificates with their own HTTP client, which we could not
 * pin in tests nor bound in time and size, and several skip the expiry check.
 *
 * Steps, in order, each before the next costs anything: the certificate URL must be
 * `https://sns.<region>.amazonaws.com/<name>.pem` (checked on the parsed URL, nothing
 * fetched otherwise); the message Timestamp must be within the 5-minute tolerance; the
 * certificate is fetched (cached) and must be within its validity period; the signature
 * over the canonical string must verify (SignatureVersion 1 = SHA1withRSA, 2 = SHA256withRSA).
 */

export const SNS_TYPES = ['Notification', 'SubscriptionConfirmation', 'UnsubscribeConfirmation'] as const;
export type SnsType = (typeof SNS_TYPES)[number];

export interface SnsMessage {
  Type: SnsType;
  MessageId: string;
  TopicArn: string;
  Message: string;
  Timestamp: string;
  SignatureVersion: string;
  Signature: string;
  SigningCertURL: string;
  Subject?: string;
  SubscribeURL?: string;
  Token?: string;
  UnsubscribeURL?: string;
}

// Signed fields per message type, in the byte order SNS signs them (alphabetical).
const SIGNED_FIELDS: Record<SnsType, (keyof SnsMessage)[]> = {
  Notification: ['Message', 'MessageId', 'Subject', 'Timestamp', 'TopicArn', 'Type'],
  SubscriptionConfirmation: ['Message', 'MessageId', 'SubscribeURL', 'Timestamp', 'Token', 'TopicArn', 'Type'],
  UnsubscribeConfirmation: ['Message', 'MessageId', 'SubscribeURL', 'Timestamp', 'Token', 'TopicArn', 'Type'],
};

const ALGORITHMS: Record<string, string> = { '1': 'sha1', '2': 'sha256' };

/** A malformed body is the sender's mistake (400), not a signature failure. */
export class SnsFormatError extends Error {
  override name = 'SnsFormatError';
}

/** Parses and shape-checks an SNS message body. Missing signature fields are a VerificationError (401). */
export function parseSnsMessage(body: Buffer): SnsMessage {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body.toString('utf8'));
  } catch {
    throw new SnsFormatError('Request body is not valid JSON');
  }
  const fault = findInputFault(parsed, 'body');
  if (fault) throw new SnsFormatError(fault.message);
  if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) throw new SnsFormatError('SNS message must be a JSON object');
  const m = parsed as Record<string, unknown>;
  if (typeof m.Signature !== 'string' || typeof m.SigningCertURL !== 'string' || typeof m.SignatureVersion !== 'string') {
    throw new VerificationError('missing_signature', 'SNS message is missing Signature, SignatureVersion or SigningCertURL');
  }
  if (!SNS_TYPES.includes(m.Type as SnsType)) throw new SnsFormatError(`Unsupported SNS message Type: ${String(m.Type)}`);
  for (const f of SIGNED_FIELDS[m.Type as SnsType]) {
    if (f === 'Subject' && m.Subject === undefined) continue;
    if (typeof m[f] !== 'string') throw new SnsFormatError(`SNS message field ${f} must be a string`);
  }
  return m as unknown as SnsMessage;
}

/** The canonical string SNS signs: `Name\nValue\n` for each signed field present. */
export function snsCanonicalString(m: SnsMessage): string {
  let out = '';
  for (const f of SIGNED_FIELDS[m.Type]) {
    const v = m[f];
    if (v === undefined) continue; // only Subject may be absent (checked by parseSnsMessage)
    out += `${f}\n${v}\n`;
  }
  return out;
}

// Region names such as us-east-1, eu-central-2, us-gov-west-1, ap-southeast-4.
const SNS_HOST = /^sns\.([a-z]{2}(?:-[a-z]+)+-\d{1,2})\.amazonaws\.com$/;
const CERT_PATH = /^\/[A-Za-z0-9._-]+\.pem$/;

/**
 * The region of an SNS endpoint URL, or null when the URL is not exactly an https URL on
 * `sns.<region>.amazonaws.com`: no userinfo, no explicit port, nothing that a lenient
 * parser could read as another host. Checked on the WHATWG-parsed URL, whose hostname is
 * what a fetch would connect to.
 */
export function snsHostRegion(raw: string): string | null {
  if (raw.length > 2048 || !raw.startsWith('https://')) return null;
  let u: URL;
  try {
    u = new URL(raw);
  } catch {
    return null;
  }
  if (u.protocol !== 'https:' || u.username !== '' || u.password !== '' || u.port !== '' || u.host !== u.hostname) return null;
  // The authority as written must be the bare host: no default port, escapes or separators
  // that the parser would normalize away.
  if (!/^[a-z0-9.-]+$/.test(raw.slice('https://'.length).split(/[/?#]/, 1)[0]!)) return null;
  const m = SNS_HOST.exec(u.hostname);
  return m ? m[1]! : null;
}

/** The region of a valid `SigningCertURL`, or null. */
export function snsCertUrlRegion(raw: string): string | null {
  const region = snsHostRegion(raw);
  if (!region) return null;
  const u = new URL(raw);
  return CERT_PATH.test(u.pathname) && u.search === '' && u.hash === '' ? region : null;
}

/** Region of a topic ARN `arn:aws:sns:<region>:<account>:<name>` (also aws-us-gov), or null. */
export function topicArnRegion(arn: string): string | null {
  const m = /^arn:aws(?:-[a-z-]+)?:sns:([a-z0-9-]+):\d{12}:[A-Za-z0-9_.-]{1,256}$/.exec(arn);
  return m ? m[1]! : null;
}

/** Returns the PEM text at an https URL; injectable so tests pin certificates. */
export type TextFetcher = (url: string) => Promise<string>;

const CERT_MAX_BYTES = 64 * 1024;
const FETCH_TIMEOUT_MS = 10_000;

/** Production fetcher: https GET, no redirects, 10 s timeout, 64 KiB cap. */
export const httpsTextFetcher: TextFetcher = async (url) => {
  const res = await fetch(url, { redirect: 'error', signal: AbortSignal.timeout(FETCH_TIMEOUT_MS) });
  if (res.status !== 200) throw new Error(`GET ${url} answered ${res.status}`);
  const reader = res.body?.getReader();
  if (!reader) return '';
  const chunks: Uint8Array[] = [];
  let size = 0;
  while (true) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > CERT_MAX_BYTES) {
      await reader.cancel();
      throw new Error(`GET ${url} exceeded ${CERT_MAX_BYTES} bytes`);
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks).toString('utf8');
};

/**
 * Certificates by URL. Concurrent requests for one URL share one fetch; failures are not
 * cached; entries live for `ttlMs` (SNS rotates its signing certificate rarely, and a new
 * one comes with a new URL) and the least recently used is dropped beyond `maxEntries`.
 */
export class SnsCertificateCache {
  private readonly entries = new Map<string, { cert: Promise<X509Certificate>; at: number }>();
  private readonly fetchText: TextFetcher;
  private readonly clock: Clock;
  private readonly ttlMs: number;
  private readonly maxEntries: number;

  constructor(opts: { fetch: TextFetcher; clock: Clock; ttlMs?: number; maxEntries?: number }) {
    this.fetchText = opts.fetch;
    this.clock = opts.clock;
    this.ttlMs = opts.ttlMs ?? 24 * 60 * 60 * 1000;
    this.maxEntries = opts.maxEntries ?? 32;
  }

  get(url: string): Promise<X509Certificate> {
    const now = this.clock.now();
    const hit = this.entries.get(url);
    if (hit && now - hit.at < this.ttlMs) {
      this.entries.delete(url); // re-insert: Map order is the LRU order
      this.entries.set(url, hit);
      return hit.cert;
    }
    const cert = this.fetchText(url).then((pem) => new X509Certificate(pem));
    const entry = { cert, at: now };
    this.entries.set(url, entry);
    cert.catch(() => {
      if (this.entries.get(url) === entry) this.entries.delete(url);
    });
    while (this.entries.size > this.maxEntries) this.entries.delete(this.entries.keys().next().value!);
    return cert;
  }
}

export interface SnsVerifyOptions {
  certs: SnsCertificateCache;
  nowMs: number;
  /** Production always checks; only tests of the (expired) real Amazon samples turn it off. */
  checkCertExpiry: boolean;
}

/** Throws VerificationError unless the message is signed by Amazon SNS. */
export async function verifySnsMessage(m: SnsMessage, opts: SnsVerifyOptions): Promise<void> {
  const region = snsCertUrlRegion(m.SigningCertURL);
  if (!region) throw new VerificationError('untrusted_certificate_url', 'SigningCertURL is not an Amazon SNS certificate URL');
  const algorithm = ALGORITHMS[m.SignatureVersion];
  if (!algorithm) throw new VerificationError('unsupported_signature_version', `Unsupported SignatureVersion: ${m.SignatureVersion}`);
  checkTolerance(Date.parse(m.Timestamp), opts.nowMs);

  let cert: X509Certificate;
  try {
    cert = await opts.certs.get(m.SigningCertURL);
  } catch {
    throw new VerificationError('certificate_unavailable', 'The SNS signing certificate could not be fetched');
  }
  if (opts.checkCertExpiry) {
    const from = Date.parse(cert.validFrom);
    const to = Date.parse(cert.validTo);
    if (!(opts.nowMs >= from && opts.nowMs <= to)) {
      throw new VerificationError('certificate_expired', 'The SNS signing certificate is not valid at this time');
    }
  }
  const ok = cryptoVerify(algorithm, Buffer.from(snsCanonicalString(m), 'utf8'), cert.publicKey, Buffer.from(m.Signature, 'base64'));
  if (!ok) throw new VerificationError('invalid_signature', 'Invalid SNS message signature');
}
