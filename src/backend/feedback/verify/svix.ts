import { createHmac } from 'node:crypto';
import { safeEqual } from '../../../shared/crypto.js';
import { checkUnixSeconds, singleHeader, VerificationError, type HeaderBag } from './common.js';

/**
 * Svix signatures (Resend): `svix-signature` holds one or more space-separated `v1,<base64>`
 * entries, each an HMAC-SHA256 of `<svix-id>.<svix-timestamp>.<raw body>` keyed with the
 * base64 part of the `whsec_...` secret. Hand-written rather than using the `svix` package at
 * runtime: that package is a whole API client, while this is one HMAC, and we need our own
 * Clock, tolerance and constant-time comparison. Tests check it against signatures made by
 * the real `svix` package.
 */
export function svixKey(secret: string): Buffer {
  const b64 = secret.startsWith('whsec_') ? secret.slice('whsec_'.length) : secret;
  const key = Buffer.from(b64, 'base64');
  if (key.length === 0) throw new Error('RESEND_WEBHOOK_SECRET is not a whsec_<base64> secret');
  return key;
}

const MAX_ID_LENGTH = 256;

/** The headers and the timestamp, before the body is read (verifySvix checks them again with the signature). */
export function precheckSvix(headers: HeaderBag, nowMs: number): void {
  if (singleHeader(headers, 'svix-id') === undefined || singleHeader(headers, 'svix-signature') === undefined) {
    throw new VerificationError('missing_signature', 'Missing svix-id or svix-signature header');
  }
  checkUnixSeconds(singleHeader(headers, 'svix-timestamp'), nowMs);
}

/** Throws VerificationError unless one of the v1 signatures matches. Returns the svix-id (the provider event id). */
export function verifySvix(input: { secret: string; body: Buffer; headers: HeaderBag; nowMs: number }): { id: string; timestamp: number } {
  const id = singleHeader(input.headers, 'svix-id');
  const rawTs = singleHeader(input.headers, 'svix-timestamp');
  const sigHeader = singleHeader(input.headers, 'svix-signature');
  if (id === undefined || sigHeader === undefined) {
    throw new VerificationError('missing_signature', 'Missing svix-id or svix-signature header');
  }
  if (id.length > MAX_ID_LENGTH) throw new VerificationError('invalid_signature', 'Invalid webhook signature');
  const timestamp = checkUnixSeconds(rawTs, input.nowMs);
  const expected = createHmac('sha256', svixKey(input.secret))
    .update(Buffer.concat([Buffer.from(`${id}.${rawTs}.`), input.body]))
    .digest('base64');
  let matched = false;
  // Several entries appear during secret rotation; any v1 match is enough. Every entry is
  // compared so the time taken does not depend on which one matched.
  for (const entry of sigHeader.split(' ')) {
    const comma = entry.indexOf(',');
    if (comma < 0 || entry.slice(0, comma) !== 'v1') continue;
    if (safeEqual(entry.slice(comma + 1), expected)) matched = true;
  }
  if (!matched) throw new VerificationError('invalid_signature', 'Invalid webhook signature');
  return { id, timestamp };
}
