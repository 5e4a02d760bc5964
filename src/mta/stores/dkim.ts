import { createPrivateKey, createPublicKey, generateKeyPair, type KeyObject } from 'node:crypto';
import { promisify } from 'node:util';
import type { Clock } from '../../shared/clock.js';
import { randomString } from '../../shared/crypto.js';
import type { Db } from '../../shared/db/pool.js';

/** DKIM `a=` values the signer uses. */
export type DkimAlgorithm = 'rsa-sha256' | 'ed25519-sha256';

export interface DkimSigningKey {
  selector: string;
  privateKeyPem: string;
  algorithm: DkimAlgorithm;
}

/**
 * What the delivery engine reads (src/mta/delivery): the keys that sign mail of a domain,
 * active key first. A pending (rotation) key is not returned until it is activated. Callers
 * cache (mta.md: 5-minute in-memory cache).
 */
export interface DkimKeyStore {
  getSigningKeys(domain: string): Promise<DkimSigningKey[]>;
}

/** Listing shape: never the private key. */
export interface DkimKeyInfo {
  domain: string;
  selector: string;
  algorithm: DkimAlgorithm;
  /** DNS TXT record name and value that publish the public key. */
  dnsName: string;
  dnsValue: string;
  createdAt: string;
  updatedAt: string;
  pending: { selector: string; algorithm: DkimAlgorithm; dnsName: string; dnsValue: string; createdAt: string } | null;
}

export class DkimKeyError extends Error {}

const DOMAIN = /^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)+$/;
const SELECTOR = /^(?=.{1,63}$)[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$/i;

export const isDkimDomain = (d: string): boolean => DOMAIN.test(d);
export const isDkimSelector = (s: string): boolean => SELECTOR.test(s);

type KeyType = 'rsa' | 'ed25519';
const ALG: Record<KeyType, DkimAlgorithm> = { rsa: 'rsa-sha256', ed25519: 'ed25519-sha256' };

/**
 * Parses and checks a private key PEM (PKCS#1, PKCS#8 or SEC1 forms accepted by Node):
 * RSA of at least 1024 bits (RFC 8301) or Ed25519 (RFC 8463). Returns it as PKCS#8 PEM.
 */
export function normalizePrivateKey(pem: string): { pem: string; type: KeyType } {
  let key: KeyObject;
  try {
    key = createPrivateKey({ key: pem, format: 'pem' });
  } catch {
    throw new DkimKeyError('privateKey is not a readable PEM private key (encrypted keys are not supported)');
  }
  const type = key.asymmetricKeyType;
  if (type === 'rsa') {
    const bits = key.asymmetricKeyDetails?.modulusLength ?? 0;
    if (bits < 1024) throw new DkimKeyError(`RSA key of ${bits} bits is too short (at least 1024, 2048 recommended)`);
    if (bits > 8192) throw new DkimKeyError(`RSA key of ${bits} bits is too long (at most 8192)`);
  } else if (type !== 'ed25519') {
    throw new DkimKeyError(`unsupported key type ${type ?? 'unknown'}: use RSA or Ed25519`);
  }
  return { pem: key.export({ type: 'pkcs8', format: 'pem' }).toString(), type };
}

/** The `v=DKIM1; k=…; p=…` TXT value of a private key (Ed25519: the raw 32-byte key, RFC 8463). */
export function dnsValueFor(privateKeyPem: string): string {
  const pub = createPublicKey(createPrivateKey(privateKeyPem));
  const der = pub.export({ type: 'spki', format: 'der' });
  if (pub.asymmetricKeyType === 'ed25519') return `v=DKIM1; k=ed25519; p=${der.subarray(der.length - 32).toString('base64')}`;
  return `v=DKIM1; k=rsa; p=${der.toString('base64')}`;
}

const generate = promisify(generateKeyPair);

interface Row {
  domain: string;
  selector: string;
  private_key_pem: string;
  algorithm: KeyType;
  created_at: Date;
  updated_at: Date;
  pending_selector: string | null;
  pending_private_key_pem: string | null;
  pending_algorithm: KeyType | null;
  pending_created_at: Date | null;
}

/** DKIM keys in PostgreSQL (one active key per domain, plus an optional pending rotation key). */
export class PgDkimKeyStore implements DkimKeyStore {
  constructor(
    private readonly db: Db,
    private readonly clock: Clock,
  ) {}

  async getSigningKeys(domain: string): Promise<DkimSigningKey[]> {
    const res = await this.db.query<Row>('SELECT selector, private_key_pem, algorithm FROM mta_dkim_keys WHERE domain = $1', [
      domain.toLowerCase(),
    ]);
    return res.rows.map((r) => ({ selector: r.selector, privateKeyPem: r.private_key_pem, algorithm: ALG[r.algorithm] }));
  }

  /** Adds or replaces the domain's active key; `created` tells which. Inputs must be validated. */
  async upsert(domain: string, selector: string, privateKeyPem: string): Promise<{ created: boolean; key: DkimKeyInfo }> {
    const { pem, type } = normalizePrivateKey(privateKeyPem);
    const now = new Date(this.clock.now());
    const res = await this.db.query<Row & { inserted: boolean }>(
      `INSERT INTO mta_dkim_keys AS k (domain, selector, private_key_pem, algorithm, created_at, updated_at)
       VALUES ($1, $2, $3, $4, $5, $5)
       ON CONFLICT (domain) DO UPDATE SET selector = $2, private_key_pem = $3, algorithm = $4, updated_at = $5,
         -- a pending key under the selector just made active is no longer pending
         pending_selector = CASE WHEN k.pending_selector = $2 THEN NULL ELSE k.pending_selector END,
         pending_private_key_pem = CASE WHEN k.pending_selector = $2 THEN NULL ELSE k.pending_private_key_pem END,
         pending_algorithm = CASE WHEN k.pending_selector = $2 THEN NULL ELSE k.pending_algorithm END,
         pending_created_at = CASE WHEN k.pending_selector = $2 THEN NULL ELSE k.pending_created_at END
       RETURNING *, (xmax = 0) AS inserted`,
      [domain, selector, pem, type, now],
    );
    return { created: res.rows[0]!.inserted, key: info(res.rows[0]!) };
  }

  async list(): Promise<DkimKeyInfo[]> {
    const res = await this.db.query<Row>('SELECT * FROM mta_dkim_keys ORDER BY domain');
    return res.rows.map(info);
  }

  async get(domain: string): Promise<DkimKeyInfo | null> {
    const res = await this.db.query<Row>('SELECT * FROM mta_dkim_keys WHERE domain = $1', [domain]);
    return res.rows[0] ? info(res.rows[0]) : null;
  }

  async remove(domain: string): Promise<boolean> {
    const res = await this.db.query('DELETE FROM mta_dkim_keys WHERE domain = $1', [domain]);
    return res.rowCount === 1;
  }

  /**
   * Starts a rotation: a new RSA-2048 pair under a fresh selector is stored as the pending
   * key (the active key keeps signing). Replaces an earlier pending key. Null: no such domain.
   */
  async initiateRotation(domain: string): Promise<DkimKeyInfo | null> {
    const { privateKey } = await generate('rsa', { modulusLength: 2048 });
    const pem = privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
    const now = this.clock.now();
    const d = new Date(now).toISOString().slice(0, 10).replace(/-/g, '');
    const res = await this.db.query<Row>(
      `UPDATE mta_dkim_keys SET pending_selector = $2 || CASE WHEN selector = $2 THEN 'b' ELSE '' END,
         pending_private_key_pem = $3, pending_algorithm = 'rsa', pending_created_at = $4
       WHERE domain = $1 RETURNING *`,
      [domain, `lm${d}${randomString(4, 'abcdefghijklmnopqrstuvwxyz0123456789')}`, pem, new Date(now)],
    );
    return res.rows[0] ? info(res.rows[0]) : null;
  }

  /** Makes the pending key active (the DNS check belongs to the rotation job). False: nothing pending. */
  async activatePendingKey(domain: string): Promise<boolean> {
    const res = await this.db.query(
      `UPDATE mta_dkim_keys SET selector = pending_selector, private_key_pem = pending_private_key_pem,
         algorithm = pending_algorithm, updated_at = $2,
         pending_selector = NULL, pending_private_key_pem = NULL, pending_algorithm = NULL, pending_created_at = NULL
       WHERE domain = $1 AND pending_selector IS NOT NULL`,
      [domain, new Date(this.clock.now())],
    );
    return res.rowCount === 1;
  }

  /**
   * Seeds keys from DKIM_KEYS (JSON array of {domain, selector, privateKey}) without
   * overwriting existing ones. Throws DkimKeyError on a malformed value.
   */
  async seedFromConfig(raw: string | undefined): Promise<number> {
    if (!raw) return 0;
    let list: unknown;
    try {
      list = JSON.parse(raw);
    } catch {
      throw new DkimKeyError('DKIM_KEYS must be a JSON array of {domain, selector, privateKey}');
    }
    if (!Array.isArray(list)) throw new DkimKeyError('DKIM_KEYS must be a JSON array of {domain, selector, privateKey}');
    const now = new Date(this.clock.now());
    let seeded = 0;
    for (const [i, item] of list.entries()) {
      const { domain, selector, privateKey } = (item ?? {}) as Record<string, unknown>;
      if (typeof domain !== 'string' || !isDkimDomain(domain.toLowerCase())) throw new DkimKeyError(`DKIM_KEYS[${i}].domain is not a domain name`);
      if (typeof selector !== 'string' || !isDkimSelector(selector)) throw new DkimKeyError(`DKIM_KEYS[${i}].selector is not a valid selector`);
      if (typeof privateKey !== 'string') throw new DkimKeyError(`DKIM_KEYS[${i}].privateKey must be a PEM string`);
      let key;
      try {
        key = normalizePrivateKey(privateKey);
      } catch (err) {
        throw new DkimKeyError(`DKIM_KEYS[${i}]: ${(err as Error).message}`);
      }
      const res = await this.db.query(
        `INSERT INTO mta_dkim_keys (domain, selector, private_key_pem, algorithm, created_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, $5) ON CONFLICT (domain) DO NOTHING`,
        [domain.toLowerCase(), selector, key.pem, key.type, now],
      );
      seeded += res.rowCount ?? 0;
    }
    return seeded;
  }
}

function info(r: Row): DkimKeyInfo {
  return {
    domain: r.domain,
    selector: r.selector,
    algorithm: ALG[r.algorithm],
    dnsName: `${r.selector}._domainkey.${r.domain}`,
    dnsValue: dnsValueFor(r.private_key_pem),
    createdAt: r.created_at.toISOString(),
    updatedAt: r.updated_at.toISOString(),
    pending:
      r.pending_selector && r.pending_private_key_pem && r.pending_algorithm && r.pending_created_at
        ? {
            selector: r.pending_selector,
            algorithm: ALG[r.pending_algorithm],
            dnsName: `${r.pending_selector}._domainkey.${r.domain}`,
            dnsValue: dnsValueFor(r.pending_private_key_pem),
            createdAt: r.pending_created_at.toISOString(),
          }
        : null,
  };
}
