/**
 * DKIM key access for the delivery engine. Keys are stored by the MTA's DKIM key store
 * (PostgreSQL, managed through /dkim); delivery reads them through the narrow `KeySource`
 * interface and keeps them for 5 minutes as parsed `KeyObject`s: parsing a PEM costs about
 * twice an RSA-2048 signature, so re-parsing per message would halve signing throughput.
 */
import { createHash, createPrivateKey, createPublicKey, type KeyObject } from 'node:crypto';
import type { Clock } from '../../../shared/clock.js';
import { DELIVERY } from '../settings.js';
import type { DkimAlgorithm, ParsedDkimKey } from './sign.js';

export interface SigningKeyRecord {
  selector: string;
  /** PKCS#8 or PKCS#1 PEM. */
  privateKeyPem: string;
  /** Informational; the algorithm is read from the key itself. */
  algorithm?: string;
}

/**
 * Where delivery reads a domain's active signing keys (at most one per algorithm is used).
 * The MTA's PgDkimKeyStore (src/mta/stores/dkim.ts) satisfies it as is.
 */
export interface KeySource {
  getSigningKeys(domain: string): Promise<SigningKeyRecord[]>;
}

interface CacheEntry {
  expiresAt: number;
  keys: ParsedDkimKey[];
}

/** Parses a PEM private key and reports its DKIM algorithm; throws on anything else. */
export function parseSigningKey(pem: string): { key: KeyObject; algorithm: DkimAlgorithm } {
  const key = createPrivateKey({ key: pem, format: 'pem' });
  if (key.asymmetricKeyType === 'rsa') {
    const bits = key.asymmetricKeyDetails?.modulusLength ?? 0;
    if (bits < 1024) throw new Error(`RSA key of ${bits} bits is too short for DKIM (RFC 8301 needs 1024+)`);
    return { key, algorithm: 'rsa' };
  }
  if (key.asymmetricKeyType === 'ed25519') return { key, algorithm: 'ed25519' };
  throw new Error(`unsupported DKIM key type ${key.asymmetricKeyType ?? 'unknown'}`);
}

/** The DNS TXT value publishing the public half of a private key (`v=DKIM1; k=...; p=...`). */
export function dkimTxtRecord(privateKeyPem: string): string {
  const { key, algorithm } = parseSigningKey(privateKeyPem);
  const spki = createPublicKeyDer(key);
  // RFC 8463: an Ed25519 p= is the raw 32-byte key, not SubjectPublicKeyInfo.
  const p = algorithm === 'ed25519' ? spki.subarray(spki.length - 32) : spki;
  return `v=DKIM1; k=${algorithm}; p=${p.toString('base64')}`;
}

function createPublicKeyDer(key: KeyObject): Buffer {
  return createPublicKey(key).export({ type: 'spki', format: 'der' });
}

/** 5-minute cache of parsed keys per domain (5 s for a domain without keys), with single-flight loads. */
export class DkimKeyCache {
  private readonly entries = new Map<string, CacheEntry>();
  private readonly loading = new Map<string, Promise<ParsedDkimKey[]>>();
  /** PEM fingerprint → parsed key: a reload after expiry re-parses only keys that changed. */
  private parsed = new Map<string, { key: KeyObject; algorithm: DkimAlgorithm }>();

  constructor(
    private readonly source: KeySource,
    private readonly clock: Clock,
    private readonly ttlMs: number = DELIVERY.dkimKeyCacheMs,
    private readonly missingTtlMs: number = DELIVERY.dkimMissingKeyCacheMs,
  ) {}

  async get(domain: string): Promise<ParsedDkimKey[]> {
    const d = domain.toLowerCase();
    const hit = this.entries.get(d);
    if (hit && hit.expiresAt > this.clock.now()) return hit.keys;
    let p = this.loading.get(d);
    if (!p) {
      p = this.load(d).finally(() => this.loading.delete(d));
      this.loading.set(d, p);
    }
    return p;
  }

  /** Drops a domain (after /dkim changes it) or everything. */
  invalidate(domain?: string): void {
    if (domain) this.entries.delete(domain.toLowerCase());
    else this.entries.clear();
  }

  private async load(domain: string): Promise<ParsedDkimKey[]> {
    const records = await this.source.getSigningKeys(domain);
    const keys: ParsedDkimKey[] = [];
    const seen = new Set<DkimAlgorithm>();
    // Bounded: a fleet rotating keys forever must not grow this map without end.
    const nextParsed = this.parsed.size > 10_000 ? new Map<string, { key: KeyObject; algorithm: DkimAlgorithm }>() : new Map(this.parsed);
    for (const r of records) {
      const fp = createHash('sha256').update(r.privateKeyPem).digest('base64');
      let parsed = this.parsed.get(fp);
      if (!parsed) {
        parsed = parseSigningKey(r.privateKeyPem);
        nextParsed.set(fp, parsed);
      }
      if (seen.has(parsed.algorithm)) continue;
      seen.add(parsed.algorithm);
      keys.push({ domain, selector: r.selector, algorithm: parsed.algorithm, key: parsed.key });
    }
    // RSA first: receivers that stop at the first signature they understand see rsa-sha256.
    keys.sort((a, b) => (a.algorithm === b.algorithm ? 0 : a.algorithm === 'rsa' ? -1 : 1));
    this.parsed = nextParsed;
    this.entries.set(domain, { expiresAt: this.clock.now() + (keys.length ? this.ttlMs : this.missingTtlMs), keys });
    return keys;
  }
}
