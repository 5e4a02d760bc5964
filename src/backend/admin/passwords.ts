/**
 * Password hashing with Node's scrypt: `scrypt$N$r$p$<salt b64url>$<key b64url>`, the
 * parameters recorded in the string so they can be raised later. Verified in constant time.
 */
import { randomBytes, scrypt, timingSafeEqual, type ScryptOptions } from 'node:crypto';
import { PASSWORD_HASH } from './policy.js';

function derive(password: string, salt: Buffer, keyLength: number, o: ScryptOptions): Promise<Buffer> {
  // maxmem must cover 128·N·r bytes (plus slack), above Node's 32 MiB default for N=2^15.
  const maxmem = 128 * o.N! * o.r! * 2 + 1024 * 1024;
  return new Promise((resolve, reject) => scrypt(password.normalize('NFC'), salt, keyLength, { ...o, maxmem }, (err, key) => (err ? reject(err) : resolve(key))));
}

export async function hashPassword(password: string): Promise<string> {
  const { N, r, p, keyLength, saltBytes } = PASSWORD_HASH;
  const salt = randomBytes(saltBytes);
  const key = await derive(password, salt, keyLength, { N, r, p });
  return `scrypt$${N}$${r}$${p}$${salt.toString('base64url')}$${key.toString('base64url')}`;
}

export async function verifyPassword(password: string, stored: string): Promise<boolean> {
  const parts = stored.split('$');
  if (parts.length !== 6 || parts[0] !== 'scrypt') return false;
  const [N, r, p] = parts.slice(1, 4).map(Number) as [number, number, number];
  if (![N, r, p].every(Number.isSafeInteger) || N < 2 || N > PASSWORD_HASH.maxN || (N & (N - 1)) !== 0 || r < 1 || r > 32 || p < 1 || p > 16) return false;
  const salt = Buffer.from(parts[4]!, 'base64url');
  const expected = Buffer.from(parts[5]!, 'base64url');
  if (expected.length < 16) return false;
  const key = await derive(password, salt, expected.length, { N, r, p });
  return timingSafeEqual(key, expected);
}

/** A hash to verify against when the account does not exist, so timing does not tell. */
let dummy: Promise<string> | null = null;
export function dummyHash(): Promise<string> {
  dummy ??= hashPassword(randomBytes(16).toString('hex'));
  return dummy;
}
