/**
 * Signed tokens for anything we hand out and must trust when it comes back: pagination
 * cursors, double opt-in, unsubscribe and preference links.
 *
 * Token: `<base64url(JSON body)>.<base64url(HMAC-SHA256(key, purpose || 0x00 || body)[0..16])>`.
 * - The key is the instance signing key: 32 random bytes generated once and stored in
 *   `lm_meta` (key `signing_key`) with INSERT ... ON CONFLICT DO NOTHING, so every instance of
 *   a fleet reads the same key; each process loads it once per database pool.
 * - `purpose` separates domains: a cursor can never be replayed as an unsubscribe token.
 * - The body is `{ d: data, e?: expiry in Unix seconds }`; expiry is checked against the
 *   caller's clock (tests drive it with a ManualClock).
 * - The MAC is truncated to 128 bits (ample against forgery, keeps links short) and compared
 *   in constant time.
 * Tokens are integrity-protected, not encrypted: never put a secret in `data`.
 */
import { randomBytes, timingSafeEqual } from 'node:crypto';
import { fromBase64urlCanonical, hmacSha256 } from './crypto.js';
import type { Db } from './db/pool.js';

const MAC_BYTES = 16;
const META_KEY = 'signing_key';

export type VerifyResult<T> =
  | { ok: true; data: T; expiresAt: number | null }
  | { ok: false; reason: 'malformed' | 'bad_signature' | 'expired' };

export interface SignOptions {
  /** Absolute expiry, epoch ms (use the injected Clock). Omitted: the token does not expire. */
  expiresAt?: number;
}

export class Signer {
  constructor(private readonly key: Buffer) {
    if (key.length < 32) throw new Error('signing key must be at least 32 bytes');
  }

  sign(purpose: string, data: unknown, opts: SignOptions = {}): string {
    const body: { d: unknown; e?: number } = { d: data };
    if (opts.expiresAt !== undefined) body.e = Math.floor(opts.expiresAt / 1000);
    const encoded = Buffer.from(JSON.stringify(body), 'utf8').toString('base64url');
    return `${encoded}.${this.mac(purpose, encoded).toString('base64url')}`;
  }

  /** Checks the MAC first (constant time), then parses; `now` is epoch ms. */
  verify<T = unknown>(purpose: string, token: string, now: number): VerifyResult<T> {
    if (typeof token !== 'string' || token.length > 4096) return { ok: false, reason: 'malformed' };
    const dot = token.indexOf('.');
    if (dot <= 0 || dot !== token.lastIndexOf('.')) return { ok: false, reason: 'malformed' };
    const encoded = token.slice(0, dot);
    // One spelling per token: the MAC is compared as bytes, so its text must be canonical.
    const given = fromBase64urlCanonical(token.slice(dot + 1));
    if (given?.length !== MAC_BYTES || fromBase64urlCanonical(encoded) === null) return { ok: false, reason: 'malformed' };
    if (!timingSafeEqual(given, this.mac(purpose, encoded))) return { ok: false, reason: 'bad_signature' };
    let body: { d?: unknown; e?: unknown };
    try {
      body = JSON.parse(Buffer.from(encoded, 'base64url').toString('utf8'));
    } catch {
      return { ok: false, reason: 'malformed' };
    }
    if (typeof body !== 'object' || body === null || !('d' in body)) return { ok: false, reason: 'malformed' };
    let expiresAt: number | null = null;
    if (body.e !== undefined) {
      if (typeof body.e !== 'number' || !Number.isFinite(body.e)) return { ok: false, reason: 'malformed' };
      expiresAt = body.e * 1000;
      if (now >= expiresAt) return { ok: false, reason: 'expired' };
    }
    return { ok: true, data: body.d as T, expiresAt };
  }

  private mac(purpose: string, encoded: string): Buffer {
    return hmacSha256(this.key, Buffer.concat([Buffer.from(purpose, 'utf8'), Buffer.from([0]), Buffer.from(encoded, 'utf8')])).subarray(
      0,
      MAC_BYTES,
    );
  }
}

const loaded = new WeakMap<Db, Promise<Signer>>();

/**
 * The instance signer for this database, created on first use. Cached per pool (one
 * process may talk to several databases, as tests do); a failed load is not cached.
 */
export function loadSigner(db: Db): Promise<Signer> {
  let p = loaded.get(db);
  if (!p) {
    p = readOrCreateKey(db).then((key) => new Signer(key));
    p.catch(() => loaded.delete(db));
    loaded.set(db, p);
  }
  return p;
}

async function readOrCreateKey(db: Db): Promise<Buffer> {
  const candidate = randomBytes(32).toString('base64url');
  // Whoever inserts first wins; everyone then reads the winner's key.
  await db.query(`INSERT INTO lm_meta (key, value) VALUES ($1, to_jsonb($2::text)) ON CONFLICT (key) DO NOTHING`, [META_KEY, candidate]);
  const r = await db.query<{ value: unknown }>(`SELECT value FROM lm_meta WHERE key = $1`, [META_KEY]);
  const value = r.rows[0]?.value;
  if (typeof value !== 'string') throw new Error('lm_meta.signing_key is not a string');
  const key = Buffer.from(value, 'base64url');
  if (key.length < 32) throw new Error('lm_meta.signing_key is shorter than 32 bytes');
  return key;
}
