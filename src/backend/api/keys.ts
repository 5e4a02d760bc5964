/** API key format, generation and storage form. */
import { randomToken, sha256Hex } from '../../shared/crypto.js';

/** Spec scope table. */
export const SCOPES = ['contacts:read', 'contacts:write', 'events:write', 'transactional:send', 'topics:write'] as const;
export type Scope = (typeof SCOPES)[number];

export const KEY_PREFIX = 'lm_live_';
/** lm_live_ + base64url of at least 32 random bytes (43 characters); longer bodies are accepted. */
const KEY_FORMAT = /^lm_live_[A-Za-z0-9_-]{43,256}$/;

export function isScope(s: string): s is Scope {
  return (SCOPES as readonly string[]).includes(s);
}

export function generateApiKey(): string {
  return KEY_PREFIX + randomToken(32);
}

export function hasKeyFormat(key: string): boolean {
  return KEY_FORMAT.test(key);
}

/** Only this is stored. A key has 256 bits of entropy, so an unsalted SHA-256 is not brute-forceable. */
export function hashApiKey(key: string): string {
  return sha256Hex(key);
}

/** Shown in listings so operators can tell keys apart: `lm_live_` plus 6 characters. */
export function displayPrefix(key: string): string {
  return key.slice(0, KEY_PREFIX.length + 6);
}
