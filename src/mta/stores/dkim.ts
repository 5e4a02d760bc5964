import { createPrivateKey, createPublicKey, generateKeyPair, type KeyObject } from 'node:crypto';
import { promisify } from 'node:util';
import type { Clock } from '../../shared/clock.js';
import { randomString } from '../../shared/crypto.js';
import { tx, type Db } from '../../shared/db/pool.js';

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

/** A host name of two or more labels; an IP address (all-numeric last label) is not a signing domain. */
export const isDkimDomain = (d: string): boolean => DOMAIN.test(d) && !/\.\d+$/.test(d);
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

/** A selector already names another key of the domain (both would be `<selector>._domainkey.<domain>`). */
export class DkimSelectorInUse extends Error {}

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

const TYPE_OF: Record<DkimAlgorithm, KeyType> = { 'rsa-sha256': 'rsa', 'ed25519-sha256': 'ed25519' };
const SELECTOR_CHARS = 'abcdefghijklmnopqrstuvwxyz0123456789';
// RSA first: receivers that read only the first signature they understand see rsa-sha256.
const ORDER = `domain, (algorithm = 'rsa') DESC`;

/**
 * DKIM keys in PostgreSQL: one active key per (domain, algorithm) — an RSA key, an Ed25519
 * key, or both (migration 023) — plus an optional pending RSA rotation key.
 */
export class PgDkimKeyStore implements DkimKeyStore {
  constructor(
    private readonly db: Db,
    private readonly clock: Clock,
  ) {}

  /** Every active key of the domain, RSA first. */
  async getSigningKeys(domain: string): Promise<DkimSigningKey[]> {
    const res = await this.db.query<Row>(`SELECT selector, private_key_pem, algorithm FROM mta_dkim_keys WHERE domain = $1 ORDER BY ${ORDER}`, [
      domain.toLowerCase(),
    ]);
    return res.rows.map((r) => ({ selector: r.selector, privateKeyPem: r.private_key_pem, algorithm: ALG[r.algorithm] }));
  }

  /**
   * Adds or replaces the domain's active key of the key's algorithm (the domain's key of the
   * other algorithm stays); `created` tells which. Inputs must be validated. Throws
   * DkimKeyError for an unusable key, DkimSelectorInUse when the selector names the domain's
   * key (or pending key) of the other algorithm.
   */
  async upsert(domain: string, selector: string, privateKeyPem: string): Promise<{ created: boolean; key: DkimKeyInfo }> {
    const { pem, type } = normalizePrivateKey(privateKeyPem);
    const now = new Date(this.clock.now());
    const write = tx(this.db, async (c) => {
      // Row locks of the domain's keys; a race with no row to lock ends at the unique index below.
      const others = await c.query<Row>('SELECT * FROM mta_dkim_keys WHERE domain = $1 AND algorithm <> $2 FOR UPDATE', [domain, type]);
      const clash = others.rows.find((r) => r.selector === selector || r.pending_selector === selector);
      if (clash) {
        throw new DkimSelectorInUse(`selector ${selector} is already used by the ${ALG[clash.algorithm]} key of ${domain}; each key needs its own selector`);
      }
      const res = await c.query<Row & { inserted: boolean }>(
        `INSERT INTO mta_dkim_keys AS k (domain, selector, private_key_pem, algorithm, created_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, $5)
         ON CONFLICT (domain, algorithm) DO UPDATE SET selector = $2, private_key_pem = $3, updated_at = $5,
           -- a pending key under the selector just made active is no longer pending
           pending_selector = CASE WHEN k.pending_selector = $2 THEN NULL ELSE k.pending_selector END,
           pending_private_key_pem = CASE WHEN k.pending_selector = $2 THEN NULL ELSE k.pending_private_key_pem END,
           pending_algorithm = CASE WHEN k.pending_selector = $2 THEN NULL ELSE k.pending_algorithm END,
           pending_created_at = CASE WHEN k.pending_selector = $2 THEN NULL ELSE k.pending_created_at END
         RETURNING *, (xmax = 0) AS inserted`,
        [domain, selector, pem, type, now],
      );
      return { created: res.rows[0]!.inserted, key: info(res.rows[0]!) };
    });
    return write.catch((err: { code?: string; constraint?: string }) => {
      if (err.code === '23505' && err.constraint === 'mta_dkim_keys_selector') {
        throw new DkimSelectorInUse(`selector ${selector} is already used by another key of ${domain}; each key needs its own selector`);
      }
      throw err;
    });
  }

  async list(): Promise<DkimKeyInfo[]> {
    const res = await this.db.query<Row>(`SELECT * FROM mta_dkim_keys ORDER BY ${ORDER}`);
    return res.rows.map(info);
  }

  /** The domain's keys, RSA first (empty when none). */
  async get(domain: string): Promise<DkimKeyInfo[]> {
    const res = await this.db.query<Row>(`SELECT * FROM mta_dkim_keys WHERE domain = $1 ORDER BY ${ORDER}`, [domain]);
    return res.rows.map(info);
  }

  /** Removes the domain's keys (only the one of `algorithm` when given); returns the algorithms removed. */
  async remove(domain: string, algorithm?: DkimAlgorithm): Promise<DkimAlgorithm[]> {
    const res = algorithm
      ? await this.db.query<Row>('DELETE FROM mta_dkim_keys WHERE domain = $1 AND algorithm = $2 RETURNING algorithm', [domain, TYPE_OF[algorithm]])
      : await this.db.query<Row>('DELETE FROM mta_dkim_keys WHERE domain = $1 RETURNING algorithm', [domain]);
    return res.rows.map((r) => ALG[r.algorithm]).sort((a, b) => (a === b ? 0 : a === 'rsa-sha256' ? -1 : 1));
  }

  /**
   * Starts a rotation of the domain's RSA key: a new RSA-2048 pair under a fresh selector is
   * stored as the pending key (the active keys keep signing). Replaces an earlier pending key.
   * A domain without an RSA key gets the new key as its active key at once (`activated`).
   */
  async initiateRotation(domain: string): Promise<DkimKeyInfo & { activated?: boolean }> {
    const { privateKey } = await generate('rsa', { modulusLength: 2048 });
    const pem = privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
    const now = this.clock.now();
    const day = new Date(now).toISOString().slice(0, 10).replace(/-/g, '');
    return tx(this.db, async (c) => {
      const rows = (await c.query<Row>('SELECT * FROM mta_dkim_keys WHERE domain = $1 FOR UPDATE', [domain])).rows;
      const used = new Set(rows.flatMap((r) => [r.selector, r.pending_selector]));
      let selector: string;
      do selector = `lm${day}${randomString(4, SELECTOR_CHARS)}`;
      while (used.has(selector));
      if (!rows.some((r) => r.algorithm === 'rsa')) {
        // No RSA key to overlap with: the new key signs at once.
        const res = await c.query<Row>(
          `INSERT INTO mta_dkim_keys (domain, selector, private_key_pem, algorithm, created_at, updated_at)
           VALUES ($1, $2, $3, 'rsa', $4, $4) RETURNING *`,
          [domain, selector, pem, new Date(now)],
        );
        return { ...info(res.rows[0]!), activated: true };
      }
      // One pending key per domain: a pending key left on another row (written before 023) goes.
      await c.query(
        `UPDATE mta_dkim_keys SET pending_selector = NULL, pending_private_key_pem = NULL, pending_algorithm = NULL, pending_created_at = NULL
         WHERE domain = $1 AND algorithm <> 'rsa' AND pending_selector IS NOT NULL`,
        [domain],
      );
      const res = await c.query<Row>(
        `UPDATE mta_dkim_keys SET pending_selector = $2, pending_private_key_pem = $3, pending_algorithm = 'rsa', pending_created_at = $4
         WHERE domain = $1 AND algorithm = 'rsa' RETURNING *`,
        [domain, selector, pem, new Date(now)],
      );
      return info(res.rows[0]!);
    });
  }

  /**
   * Makes the pending key the domain's active key of its algorithm (the DNS check belongs to
   * the rotation job). False: nothing pending.
   */
  async activatePendingKey(domain: string): Promise<boolean> {
    const now = new Date(this.clock.now());
    return tx(this.db, async (c) => {
      const res = await c.query<Row>(
        'SELECT * FROM mta_dkim_keys WHERE domain = $1 AND pending_selector IS NOT NULL ORDER BY pending_created_at DESC FOR UPDATE',
        [domain],
      );
      const from = res.rows[0];
      if (!from) return false;
      await c.query(
        `UPDATE mta_dkim_keys SET pending_selector = NULL, pending_private_key_pem = NULL, pending_algorithm = NULL, pending_created_at = NULL
         WHERE domain = $1 AND pending_selector IS NOT NULL`,
        [domain],
      );
      // Rotation and upsert keep the pending selector distinct from every key of the domain.
      await c.query(
        `INSERT INTO mta_dkim_keys (domain, selector, private_key_pem, algorithm, created_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, $5)
         ON CONFLICT (domain, algorithm) DO UPDATE SET selector = $2, private_key_pem = $3, created_at = $5, updated_at = $5`,
        [domain, from.pending_selector, from.pending_private_key_pem, from.pending_algorithm, now],
      );
      return true;
    });
  }

  /**
   * Seeds keys from DKIM_KEYS (JSON array of {domain, selector, privateKey}) without
   * overwriting existing ones: a key is added when the domain has no key of its algorithm
   * (and the selector is free). Throws DkimKeyError on a malformed value.
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
      // No conflict target: an existing key of the algorithm, or of the selector, wins.
      const res = await this.db.query(
        `INSERT INTO mta_dkim_keys (domain, selector, private_key_pem, algorithm, created_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, $5) ON CONFLICT DO NOTHING`,
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
