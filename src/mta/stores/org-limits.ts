import type { Clock } from '../../shared/clock.js';
import { tx, type Db } from '../../shared/db/pool.js';
import type { Logger } from '../../shared/log.js';
import type { MtaPolicy } from '../policy.js';
import type { ChangeFeed } from './change-feed.js';
import { ReloadingCache } from './config-cache.js';

export interface OrgLimits {
  daily: number;
  hourly: number;
  source: 'default' | 'custom';
  updatedAt: string | null;
}

/** Per-organization daily and hourly send limits (overrides of the policy defaults), cached in memory. */
export class OrgLimitStore extends ReloadingCache<Map<string, OrgLimits>> {
  constructor(
    db: Db,
    log: Logger,
    feed: ChangeFeed,
    private readonly clock: Clock,
    private readonly policy: MtaPolicy,
  ) {
    super(db, log, feed, 'mta_org_limits', new Map());
  }

  protected async load(): Promise<Map<string, OrgLimits>> {
    const res = await this.db.query<{ organization_id: string; daily_limit: number; hourly_limit: number; updated_at: Date }>(
      'SELECT * FROM mta_org_limits',
    );
    return new Map(
      res.rows.map((r) => [
        r.organization_id,
        { daily: r.daily_limit, hourly: r.hourly_limit, source: 'custom' as const, updatedAt: r.updated_at.toISOString() },
      ]),
    );
  }

  /** Hot path. */
  limitsFor(orgId: string): OrgLimits {
    return this.data.get(orgId) ?? { daily: this.policy.orgLimits.daily, hourly: this.policy.orgLimits.hourly, source: 'default', updatedAt: null };
  }

  /** Sets the limits; an omitted one keeps its current value (or the default). */
  async set(orgId: string, limits: { daily?: number; hourly?: number }): Promise<OrgLimits> {
    const cur = this.limitsFor(orgId);
    const daily = limits.daily ?? cur.daily;
    const hourly = limits.hourly ?? cur.hourly;
    const now = new Date(this.clock.now());
    await tx(this.db, async (c) => {
      await c.query(
        `INSERT INTO mta_org_limits (organization_id, daily_limit, hourly_limit, updated_at) VALUES ($1, $2, $3, $4)
         ON CONFLICT (organization_id) DO UPDATE SET daily_limit = $2, hourly_limit = $3, updated_at = $4`,
        [orgId, daily, hourly, now],
      );
      await this.announce(c);
    });
    await this.reload();
    return this.limitsFor(orgId);
  }
}
