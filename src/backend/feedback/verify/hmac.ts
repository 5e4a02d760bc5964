import { hmacSha256Hex, safeEqual } from '../../../shared/crypto.js';
import { checkUnixSeconds, singleHeader, VerificationError, type HeaderBag } from './common.js';

/**
 * The timestamped hex HMAC-SHA256 scheme shared by the bundled MTA (`X-MTA-*`) and the
 * generic relay (`X-Relay-*`): signature = hex HMAC-SHA256(secret, `<timestamp>.<raw body>`),
 * timestamp in Unix seconds. Hand-written: it is one HMAC over bytes we already hold, and
 * no library applies our tolerance, Clock and constant-time comparison together.
 */
export interface TimestampedHmacScheme {
  timestampHeader: string;
  signatureHeader: string;
  /** Relay: the spec says lowercase hex, so an upper-case signature is refused. MTA: any hex case. */
  lowercaseOnly: boolean;
}

export const MTA_SCHEME: TimestampedHmacScheme = {
  timestampHeader: 'x-mta-timestamp',
  signatureHeader: 'x-mta-signature',
  lowercaseOnly: false,
};

export const RELAY_SCHEME: TimestampedHmacScheme = {
  timestampHeader: 'x-relay-timestamp',
  signatureHeader: 'x-relay-signature',
  lowercaseOnly: true,
};

/** The signature a sender computes; exported for the MTA side and for tests. */
export function signTimestamped(secret: string, timestampSec: number | string, body: Buffer | string): string {
  return hmacSha256Hex(secret, Buffer.concat([Buffer.from(`${timestampSec}.`), Buffer.from(body)]));
}

/**
 * What can be checked before the body is read: one signature header, and a timestamp within
 * the tolerance. A request without them is refused before its body costs anything.
 */
export function precheckTimestamped(scheme: TimestampedHmacScheme, headers: HeaderBag, nowMs: number): void {
  if (singleHeader(headers, scheme.signatureHeader) === undefined) throw new VerificationError('missing_signature', 'Missing webhook signature header');
  checkUnixSeconds(singleHeader(headers, scheme.timestampHeader), nowMs);
}

/** Throws VerificationError unless the request carries a valid signature within the tolerance. Returns the timestamp. */
export function verifyTimestampedHmac(
  scheme: TimestampedHmacScheme,
  input: { secret: string; body: Buffer; headers: HeaderBag; nowMs: number },
): number {
  let signature = singleHeader(input.headers, scheme.signatureHeader);
  const rawTs = singleHeader(input.headers, scheme.timestampHeader);
  if (signature === undefined) throw new VerificationError('missing_signature', 'Missing webhook signature header');
  const ts = checkUnixSeconds(rawTs, input.nowMs);
  if (!scheme.lowercaseOnly) signature = signature.toLowerCase();
  const expected = signTimestamped(input.secret, rawTs!, input.body);
  if (!safeEqual(signature, expected)) throw new VerificationError('invalid_signature', 'Invalid webhook signature');
  return ts;
}
