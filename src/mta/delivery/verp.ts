/**
 * VERP return paths (mta.md → Return-path addressing):
 *   bounce+<base64url(messageId)>+<hmac>@{BOUNCE_HOST}
 * The HMAC (HMAC-SHA256 with BOUNCE_VERP_KEY over the encoded id, truncated to 96 bits and
 * base64url) makes the token unforgeable, so a bounce names exactly the send it answers. CFBL
 * tokens use the same key with a `cfbl:` prefixed input, so neither kind replays as the other.
 */
import { hmacSha256, safeEqual } from '../../shared/crypto.js';

const MAC_BYTES = 12;

export type TokenPurpose = 'bounce' | 'cfbl';

/** The `<base64url(messageId)>+<hmac>` token for a purpose. */
export function signToken(messageId: string, key: string, purpose: TokenPurpose = 'bounce'): string {
  const id = Buffer.from(messageId, 'utf8').toString('base64url');
  return `${id}+${mac(id, key, purpose)}`;
}

function mac(encodedId: string, key: string, purpose: TokenPurpose): string {
  const input = purpose === 'cfbl' ? `cfbl:${encodedId}` : encodedId;
  return hmacSha256(key, input).subarray(0, MAC_BYTES).toString('base64url');
}

/** The envelope sender (MAIL FROM) for a message. */
export function verpAddress(messageId: string, key: string, bounceHost: string): string {
  return `bounce+${signToken(messageId, key)}@${bounceHost.toLowerCase()}`;
}

export interface ParsedToken {
  messageId: string;
  /** True only when the HMAC checked out; unsigned tokens are accepted only with allowUnsigned. */
  verified: boolean;
}

/** Verifies a `<id>+<hmac>` token (the part after `bounce+` / `fbl+`). Null when invalid. */
export function verifyToken(
  token: string,
  key: string | undefined,
  purpose: TokenPurpose = 'bounce',
  opts: { allowUnsigned?: boolean } = {},
): ParsedToken | null {
  const plus = token.indexOf('+');
  const encodedId = plus < 0 ? token : token.slice(0, plus);
  if (!/^[A-Za-z0-9_-]+$/.test(encodedId)) return null;
  const messageId = Buffer.from(encodedId, 'base64url').toString('utf8');
  // Reject non-canonical encodings: one message id has exactly one token.
  if (Buffer.from(messageId, 'utf8').toString('base64url') !== encodedId) return null;
  if (plus < 0) return opts.allowUnsigned ? { messageId, verified: false } : null;
  if (!key) return null;
  const given = token.slice(plus + 1);
  return safeEqual(given, mac(encodedId, key, purpose)) ? { messageId, verified: true } : null;
}

/**
 * Parses a VERP address (`bounce+...@host`, any case in the prefix and host) received as a
 * bounce's envelope recipient or scraped from a returned message. Null when it is not ours or
 * does not verify.
 */
export function parseVerpAddress(
  address: string,
  opts: { key: string | undefined; bounceHost: string; allowUnsigned?: boolean },
): ParsedToken | null {
  const addr = address.trim().replace(/^<|>$/g, '');
  const at = addr.lastIndexOf('@');
  if (at < 0) return null;
  const local = addr.slice(0, at);
  const host = addr.slice(at + 1).toLowerCase();
  if (host !== opts.bounceHost.toLowerCase()) return null;
  if (!/^bounce\+/i.test(local)) return null;
  return verifyToken(local.slice('bounce+'.length), opts.key, 'bounce', { allowUnsigned: opts.allowUnsigned });
}
