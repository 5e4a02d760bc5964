import type { Clock } from '../../shared/clock.js';
import { newId, randomToken, sha256Hex } from '../../shared/crypto.js';
import { tx, type Db } from '../../shared/db/pool.js';
import type { ChangeFeed } from './change-feed.js';
import { CONFIG_CHANNEL } from './config-cache.js';

/** Per-organization MTA keys: this fixed prefix plus 32 random bytes (base64url). */
export const ORG_KEY_PREFIX = 'lm_org_';

export interface CredentialInfo {
  id: string;
  organizationId: string;
  /** Enough of the key to recognise it; the key itself is shown once, at creation. */
  keyHint: string;
  createdAt: string;
  revokedAt: string | null;
}

const TABLE = 'mta_credentials';
const CACHE_TTL_MS = 60_000;
const CACHE_MAX = 10_000;

/**
 * Per-organization API keys. Only a SHA-256 hash is stored; a lookup by hash compares no
 * secret bytes in a data-dependent way. Verified keys are cached briefly; a revocation clears
 * every instance's cache through NOTIFY (and the TTL bounds it should a notification be lost).
 */
export class CredentialStore {
  private readonly cache = new Map<string, { organizationId: string; id: string; until: number }>();

  constructor(
    private readonly db: Db,
    private readonly clock: Clock,
    feed: ChangeFeed,
  ) {
    feed.subscribe(CONFIG_CHANNEL, {
      onNotify: (payload) => {
        if (payload === TABLE) this.cache.clear();
      },
      resync: async () => this.cache.clear(),
    });
  }

  static looksLikeOrgKey(key: string): boolean {
    return key.startsWith(ORG_KEY_PREFIX) && key.length > ORG_KEY_PREFIX.length;
  }

  async create(organizationId: string): Promise<{ id: string; apiKey: string; organizationId: string; createdAt: string }> {
    const now = this.clock.now();
    const apiKey = `${ORG_KEY_PREFIX}${randomToken(32)}`;
    const id = newId('mcred', now);
    await this.db.query(
      'INSERT INTO mta_credentials (id, key_hash, key_hint, organization_id, created_at) VALUES ($1, $2, $3, $4, $5)',
      [id, sha256Hex(apiKey), hint(apiKey), organizationId, new Date(now)],
    );
    return { id, apiKey, organizationId, createdAt: new Date(now).toISOString() };
  }

  async list(organizationId?: string): Promise<CredentialInfo[]> {
    const res = organizationId
      ? await this.db.query('SELECT * FROM mta_credentials WHERE organization_id = $1 ORDER BY created_at, id', [organizationId])
      : await this.db.query('SELECT * FROM mta_credentials ORDER BY created_at, id');
    return res.rows.map((r) => ({
      id: r.id,
      organizationId: r.organization_id,
      keyHint: r.key_hint,
      createdAt: r.created_at.toISOString(),
      revokedAt: r.revoked_at ? r.revoked_at.toISOString() : null,
    }));
  }

  /** Revokes by full key or by credential id; false when unknown or already revoked. */
  async revoke(keyOrId: string): Promise<boolean> {
    const byKey = CredentialStore.looksLikeOrgKey(keyOrId);
    const revoked = await tx(this.db, async (c) => {
      const res = await c.query(
        `UPDATE mta_credentials SET revoked_at = $2 WHERE ${byKey ? 'key_hash' : 'id'} = $1 AND revoked_at IS NULL`,
        [byKey ? sha256Hex(keyOrId) : keyOrId, new Date(this.clock.now())],
      );
      if (res.rowCount === 1) await c.query('SELECT pg_notify($1, $2)', [CONFIG_CHANNEL, TABLE]);
      return res.rowCount === 1;
    });
    if (revoked) this.cache.clear();
    return revoked;
  }

  /** The organization of a live key, or null. */
  async verify(key: string): Promise<{ organizationId: string; id: string } | null> {
    if (!CredentialStore.looksLikeOrgKey(key) || key.length > 200) return null;
    const hash = sha256Hex(key);
    const now = this.clock.now();
    const hit = this.cache.get(hash);
    if (hit && hit.until > now) return { organizationId: hit.organizationId, id: hit.id };
    const res = await this.db.query<{ id: string; organization_id: string }>(
      'SELECT id, organization_id FROM mta_credentials WHERE key_hash = $1 AND revoked_at IS NULL',
      [hash],
    );
    const row = res.rows[0];
    if (!row) {
      this.cache.delete(hash);
      return null;
    }
    if (this.cache.size >= CACHE_MAX) this.cache.clear();
    this.cache.set(hash, { organizationId: row.organization_id, id: row.id, until: now + CACHE_TTL_MS });
    return { organizationId: row.organization_id, id: row.id };
  }
}

function hint(key: string): string {
  return `${key.slice(0, ORG_KEY_PREFIX.length + 4)}…${key.slice(-4)}`;
}
