/**
 * VERP return paths (mta.md → Return-path addressing):
 *   bounce+<base64url(sendId)>+<hmac>@{BOUNCE_HOST}
 * The id is the send's, not the caller's message id: message ids are chosen per organization,
 * so two organizations may use the same one, and a token naming it could not tell their sends
 * apart. The send id (the queue job's id) is unique across the fleet, so provenance is keyed
 * by it. The HMAC (HMAC-SHA256 with BOUNCE_VERP_KEY over `send:` and the encoded id, truncated
 * to 96 bits and base64url) makes the token unforgeable; CFBL tokens prefix the input `cfbl:`
 * too, so neither kind replays as the other.
 *
 * Tokens of the previous form carried the message id (input without `send:`). They are still
 * verified, as `legacy`, so reports about mail sent before the upgrade keep being attributed
 * while their provenance lives (16 days); the input prefixes keep the two forms apart.
 */
import { hmacSha256, safeEqual } from '../../shared/crypto.js';

const MAC_BYTES = 12;

export type TokenPurpose = 'bounce' | 'cfbl';

/** The `<base64url(sendId)>+<hmac>` token of a send for a purpose. */
export function signToken(sendId: string, key: string, purpose: TokenPurpose = 'bounce'): string {
  const id = Buffer.from(sendId, 'utf8').toString('base64url');
  return `${id}+${mac(id, key, purpose, false)}`;
}

function mac(encodedId: string, key: string, purpose: TokenPurpose, legacy: boolean): string {
  const input = `${purpose === 'cfbl' ? 'cfbl:' : ''}${legacy ? '' : 'send:'}${encodedId}`;
  return hmacSha256(key, input).subarray(0, MAC_BYTES).toString('base64url');
}

/** The envelope sender (MAIL FROM) for a send. */
export function verpAddress(sendId: string, key: string, bounceHost: string): string {
  return `bounce+${signToken(sendId, key)}@${bounceHost.toLowerCase()}`;
}

export interface ParsedToken {
  /** The send id, or for a legacy token the message id it carried. */
  id: string;
  /** A token of the previous form (message id): looked up among the provenance written before the upgrade. */
  legacy: boolean;
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
  const id = Buffer.from(encodedId, 'base64url').toString('utf8');
  // Reject non-canonical encodings: one id has exactly one token.
  if (Buffer.from(id, 'utf8').toString('base64url') !== encodedId) return null;
  if (plus < 0) return opts.allowUnsigned ? { id, legacy: false, verified: false } : null;
  if (!key) return null;
  const given = token.slice(plus + 1);
  // Both forms are computed and compared whatever the first gives: the time taken says nothing.
  const current = safeEqual(given, mac(encodedId, key, purpose, false));
  const legacy = safeEqual(given, mac(encodedId, key, purpose, true));
  if (current) return { id, legacy: false, verified: true };
  return legacy ? { id, legacy: true, verified: true } : null;
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
