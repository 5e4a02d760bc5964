import { createHmac, hash, randomBytes, randomFillSync, timingSafeEqual } from 'node:crypto';

export function hmacSha256(key: string | Buffer, data: string | Buffer): Buffer {
  return createHmac('sha256', key).update(data).digest();
}

export function hmacSha256Hex(key: string | Buffer, data: string | Buffer): string {
  return hmacSha256(key, data).toString('hex');
}

export function sha256Hex(data: string | Buffer): string {
  return hash('sha256', data, 'hex');
}

/**
 * Constant-time equality for secrets of any length: both sides are hashed first so the
 * comparison never short-circuits on length or content.
 */
export function safeEqual(a: string | Buffer, b: string | Buffer): boolean {
  // One-shot hashes: no Hash object per side (a third of the cost on every API request).
  const ha = hash('sha256', a, 'buffer');
  const hb = hash('sha256', b, 'buffer');
  return timingSafeEqual(ha, hb) && Buffer.byteLength(a) === Buffer.byteLength(b);
}

/** Unguessable token: `bytes` random bytes, base64url (no padding). */
export function randomToken(bytes = 32): string {
  return randomBytes(bytes).toString('base64url');
}

const ALNUM = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';

/** Random string of `length` characters drawn uniformly (rejection sampling, no modulo bias). */
export function randomString(length: number, alphabet = ALNUM): string {
  const out: string[] = [];
  const limit = 256 - (256 % alphabet.length);
  while (out.length < length) {
    for (const byte of randomBytes(length * 2)) {
      if (byte < limit) out.push(alphabet[byte % alphabet.length]!);
      if (out.length === length) break;
    }
  }
  return out.join('');
}

const CROCKFORD = '0123456789abcdefghjkmnpqrstvwxyz';

// Ids take their random tails from a cache filled from the CSPRNG, each byte used once, as
// Node's randomUUID does: randomBytes(10) per id was a native call and a Buffer each, 0.7 % of
// role all's event loop (the backend makes several ids per message).
const ENTROPY = Buffer.allocUnsafeSlow(4_000);
let entropyAt = ENTROPY.length;
function randomTail(): Uint8Array {
  if (entropyAt === ENTROPY.length) {
    randomFillSync(ENTROPY);
    entropyAt = 0;
  }
  entropyAt += 10;
  return ENTROPY.subarray(entropyAt - 10, entropyAt);
}

/**
 * Time-ordered id: `<prefix>_` + 10 chars of millisecond time + 16 chars (Crockford base32)
 * of the first 80 bits of `tail`, random by default. Sorting by id sorts by creation time,
 * which keeps B-tree inserts local. A keyed hash as `tail` gives an id that is the same on
 * every attempt yet unguessable (campaign send ids).
 */
export function newId(prefix: string, nowMs: number = Date.now(), tail: Uint8Array = randomTail()): string {
  let t = nowMs;
  let time = '';
  for (let i = 0; i < 10; i++) {
    time = CROCKFORD[t % 32] + time;
    t = Math.floor(t / 32);
  }
  if (tail.length < 10) throw new RangeError('newId needs at least 10 bytes of tail');
  let rest = '';
  for (let bit = 0; bit < 80; bit += 5) {
    // The 5 bits at `bit`, read from the two bytes that hold them (big-endian).
    const v = ((tail[bit >> 3]! << 8) | (tail[(bit >> 3) + 1] ?? 0)) >> (11 - (bit & 7));
    rest += CROCKFORD[v & 31];
  }
  return `${prefix}_${time}${rest}`;
}

/**
 * The bytes of a base64url string in its one canonical form (no padding, no `+/`, zero
 * trailing bits), or null. Node's decoder accepts many spellings of the same bytes; a token
 * that did too would have many valid forms, each with a rate-limit bucket of its own.
 */
export function fromBase64urlCanonical(s: string): Buffer | null {
  if (!/^[A-Za-z0-9_-]*$/.test(s)) return null;
  const b = Buffer.from(s, 'base64url');
  return b.toString('base64url') === s ? b : null;
}
