import { createHmac } from 'node:crypto';
import { safeEqual } from '../../../shared/crypto.js';
import { singleHeader, VerificationError, type HeaderBag } from './common.js';

/**
 * Mandrill: `X-Mandrill-Signature` = base64 HMAC-SHA1, keyed with the webhook key, of the
 * webhook URL exactly as registered in Mandrill followed by every POST field name and value,
 * fields sorted by name. Hand-written: Mandrill publishes only this recipe, no Node library.
 */

/**
 * The form fields of a urlencoded body. A repeated name keeps its last value, as PHP's
 * `$_POST` does in Mandrill's reference verifier; the same map is used for the signature
 * and for reading the events, so what is verified is what is read.
 */
export function parseFormFields(body: Buffer): Map<string, string> {
  const fields = new Map<string, string>();
  for (const [k, v] of new URLSearchParams(body.toString('utf8'))) fields.set(k, v);
  return fields;
}

export function signMandrill(key: string, url: string, fields: Map<string, string> | Record<string, string>): string {
  const entries = fields instanceof Map ? [...fields] : Object.entries(fields);
  // Byte-wise sort by name (PHP ksort on ASCII keys).
  entries.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  const hmac = createHmac('sha1', key).update(url);
  for (const [k, v] of entries) hmac.update(k).update(v);
  return hmac.digest('base64');
}

/** Throws VerificationError unless the signature matches the registered URL and these fields. */
export function verifyMandrill(input: { key: string; url: string; fields: Map<string, string>; headers: HeaderBag }): void {
  const signature = singleHeader(input.headers, 'x-mandrill-signature');
  if (signature === undefined) throw new VerificationError('missing_signature', 'Missing X-Mandrill-Signature header');
  if (!safeEqual(signature, signMandrill(input.key, input.url, input.fields))) {
    throw new VerificationError('invalid_signature', 'Invalid webhook signature');
  }
}
