import type { Clock } from '../../shared/clock.js';
import { tx, type Db } from '../../shared/db/pool.js';
import type { Logger } from '../../shared/log.js';
import { DEFAULT_PROFILE, type IspProfileValues, type SeedIspProfile } from '../policy.js';
import type { ChangeFeed } from './change-feed.js';
import { ReloadingCache } from './config-cache.js';

export interface IspProfile extends IspProfileValues {
  /** Profile key: a provider's main domain, a custom domain, or `default`. */
  domain: string;
  aliases: string[];
  source: 'seed' | 'custom';
  updatedAt: string;
}

interface Index {
  byDomain: Map<string, IspProfile>;
  byAlias: Map<string, IspProfile>;
  fallback: IspProfile;
}

interface Row {
  domain: string;
  aliases: string[];
  default_rate: number;
  ceiling: number;
  floor: number;
  backoff_factor: number;
  recovery_factor: number;
  source: 'seed' | 'custom';
  updated_at: Date;
}

const toProfile = (r: Row): IspProfile => ({
  domain: r.domain,
  aliases: r.aliases,
  defaultRate: r.default_rate,
  ceiling: r.ceiling,
  floor: r.floor,
  backoffFactor: r.backoff_factor,
  recoveryFactor: r.recovery_factor,
  source: r.source,
  updatedAt: r.updated_at.toISOString(),
});

/**
 * ISP profiles: seeded from policy at start (a runtime override is never overwritten; a
 * seeded row follows the policy's current values), tunable through /isp-profiles, resolved
 * on the hot path from memory: exact domain, then alias, then `default`.
 */
export class IspProfileStore extends ReloadingCache<Index> {
  constructor(
    db: Db,
    log: Logger,
    feed: ChangeFeed,
    private readonly clock: Clock,
    private readonly seeds: SeedIspProfile[],
  ) {
    const fallbackSeed = seeds.find((s) => s.domain === DEFAULT_PROFILE);
    if (!fallbackSeed) throw new Error(`policy.ispProfiles must contain a "${DEFAULT_PROFILE}" profile`);
    const empty: Index = { byDomain: new Map(), byAlias: new Map(), fallback: seedProfile(fallbackSeed, new Date(0)) };
    super(db, log, feed, 'mta_isp_profiles', empty);
    // Until the first load the seeds answer, so nothing ever resolves to "no profile".
    this.data = buildIndex(seeds.map((s) => seedProfile(s, new Date(0))), empty.fallback);
  }

  /** Writes the seeds without touching custom rows. Call before the first load. */
  async seed(): Promise<void> {
    const now = new Date(this.clock.now());
    await tx(this.db, async (c) => {
      for (const s of this.seeds) {
        await c.query(
          `INSERT INTO mta_isp_profiles (domain, aliases, default_rate, ceiling, floor, backoff_factor, recovery_factor, source, updated_at)
           VALUES ($1, $2, $3, $4, $5, $6, $7, 'seed', $8)
           ON CONFLICT (domain) DO UPDATE SET aliases = EXCLUDED.aliases, default_rate = EXCLUDED.default_rate,
             ceiling = EXCLUDED.ceiling, floor = EXCLUDED.floor, backoff_factor = EXCLUDED.backoff_factor,
             recovery_factor = EXCLUDED.recovery_factor, updated_at = EXCLUDED.updated_at
           WHERE mta_isp_profiles.source = 'seed'
             AND (mta_isp_profiles.aliases, mta_isp_profiles.default_rate, mta_isp_profiles.ceiling, mta_isp_profiles.floor,
                  mta_isp_profiles.backoff_factor, mta_isp_profiles.recovery_factor)
             IS DISTINCT FROM (EXCLUDED.aliases, EXCLUDED.default_rate, EXCLUDED.ceiling, EXCLUDED.floor,
                  EXCLUDED.backoff_factor, EXCLUDED.recovery_factor)`,
          [s.domain, s.aliases, s.defaultRate, s.ceiling, s.floor, s.backoffFactor, s.recoveryFactor, now],
        );
      }
      await this.announce(c);
    });
  }

  protected async load(): Promise<Index> {
    const res = await this.db.query<Row>('SELECT * FROM mta_isp_profiles ORDER BY domain');
    const profiles = res.rows.map(toProfile);
    const fallback = profiles.find((p) => p.domain === DEFAULT_PROFILE) ?? this.data.fallback;
    return buildIndex(profiles, fallback);
  }

  /** Hot path: the profile that applies to a recipient domain (lowercase). */
  resolve(domain: string): IspProfile {
    const d = this.data;
    return d.byDomain.get(domain) ?? d.byAlias.get(domain) ?? d.fallback;
  }

  list(): IspProfile[] {
    return [...this.data.byDomain.values()].sort((a, b) => a.domain.localeCompare(b.domain));
  }

  isSeeded(domain: string): boolean {
    return this.seeds.some((s) => s.domain === domain);
  }

  /** Creates or updates a custom profile (values already validated by rule 1). */
  async upsert(domain: string, values: IspProfileValues, aliases?: string[]): Promise<{ profile: IspProfile; created: boolean }> {
    const seed = this.seeds.find((s) => s.domain === domain);
    const now = new Date(this.clock.now());
    const row = await tx(this.db, async (c) => {
      const res = await c.query<Row & { inserted: boolean }>(
        `INSERT INTO mta_isp_profiles AS p (domain, aliases, default_rate, ceiling, floor, backoff_factor, recovery_factor, source, updated_at)
         VALUES ($1, COALESCE($2, $9::text[], '{}'), $3, $4, $5, $6, $7, 'custom', $8)
         ON CONFLICT (domain) DO UPDATE SET aliases = COALESCE($2, p.aliases), default_rate = EXCLUDED.default_rate,
           ceiling = EXCLUDED.ceiling, floor = EXCLUDED.floor, backoff_factor = EXCLUDED.backoff_factor,
           recovery_factor = EXCLUDED.recovery_factor, source = 'custom', updated_at = EXCLUDED.updated_at
         RETURNING *, (xmax = 0) AS inserted`,
        [domain, aliases ?? null, values.defaultRate, values.ceiling, values.floor, values.backoffFactor, values.recoveryFactor, now, seed?.aliases ?? null],
      );
      await this.announce(c);
      return res.rows[0]!;
    });
    await this.reload();
    return { profile: toProfile(row), created: row.inserted };
  }

  /**
   * Removes a custom profile: a seeded domain reverts to its seed values, any other domain
   * falls back to `default`. Returns null when there is no custom profile for the domain.
   */
  async removeCustom(domain: string): Promise<'reverted' | 'deleted' | null> {
    const seed = this.seeds.find((s) => s.domain === domain);
    const now = new Date(this.clock.now());
    const outcome = await tx(this.db, async (c) => {
      let res;
      if (seed) {
        res = await c.query(
          `UPDATE mta_isp_profiles SET aliases = $2, default_rate = $3, ceiling = $4, floor = $5, backoff_factor = $6,
             recovery_factor = $7, source = 'seed', updated_at = $8
           WHERE domain = $1 AND source = 'custom'`,
          [domain, seed.aliases, seed.defaultRate, seed.ceiling, seed.floor, seed.backoffFactor, seed.recoveryFactor, now],
        );
      } else {
        res = await c.query(`DELETE FROM mta_isp_profiles WHERE domain = $1 AND source = 'custom'`, [domain]);
      }
      if (res.rowCount !== 1) return null;
      await this.announce(c);
      return seed ? ('reverted' as const) : ('deleted' as const);
    });
    if (outcome) await this.reload();
    return outcome;
  }
}

function seedProfile(s: SeedIspProfile, at: Date): IspProfile {
  return { ...s, aliases: [...s.aliases], source: 'seed', updatedAt: at.toISOString() };
}

function buildIndex(profiles: IspProfile[], fallback: IspProfile): Index {
  const byDomain = new Map<string, IspProfile>();
  const byAlias = new Map<string, IspProfile>();
  for (const p of profiles) byDomain.set(p.domain, p);
  for (const p of profiles) for (const a of p.aliases) if (!byAlias.has(a)) byAlias.set(a, p);
  return { byDomain, byAlias, fallback };
}
