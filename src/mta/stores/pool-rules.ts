import type { Clock } from '../../shared/clock.js';
import { tx, type Db } from '../../shared/db/pool.js';
import type { Logger } from '../../shared/log.js';
import type { ChangeFeed } from './change-feed.js';
import { ReloadingCache } from './config-cache.js';

export interface PoolRule {
  organizationId: string;
  pool: string;
  /** A dedicated sending IP of the pool; bypasses round-robin. */
  dedicatedIp: string | null;
  updatedAt: string;
}

/** Organization → pool assignment (pipeline phase 7), cached in memory. */
export class PoolRuleStore extends ReloadingCache<Map<string, PoolRule>> {
  constructor(
    db: Db,
    log: Logger,
    feed: ChangeFeed,
    private readonly clock: Clock,
  ) {
    super(db, log, feed, 'mta_pool_rules', new Map());
  }

  protected async load(): Promise<Map<string, PoolRule>> {
    const res = await this.db.query<{ organization_id: string; pool: string; dedicated_ip: string | null; updated_at: Date }>(
      'SELECT * FROM mta_pool_rules',
    );
    return new Map(
      res.rows.map((r) => [
        r.organization_id,
        { organizationId: r.organization_id, pool: r.pool, dedicatedIp: r.dedicated_ip, updatedAt: r.updated_at.toISOString() },
      ]),
    );
  }

  /** Hot path. */
  ruleFor(orgId: string): PoolRule | undefined {
    return this.data.get(orgId);
  }

  /** Every rule (the pipeline asks whether any rule routes a queue group's jobs apart). */
  rules(): Iterable<PoolRule> {
    return this.data.values();
  }

  async set(orgId: string, pool: string, dedicatedIp: string | null): Promise<{ rule: PoolRule; created: boolean }> {
    const now = new Date(this.clock.now());
    const created = await tx(this.db, async (c) => {
      const res = await c.query<{ inserted: boolean }>(
        `INSERT INTO mta_pool_rules (organization_id, pool, dedicated_ip, updated_at) VALUES ($1, $2, $3, $4)
         ON CONFLICT (organization_id) DO UPDATE SET pool = $2, dedicated_ip = $3, updated_at = $4
         RETURNING (xmax = 0) AS inserted`,
        [orgId, pool, dedicatedIp, now],
      );
      await this.announce(c);
      return res.rows[0]!.inserted;
    });
    await this.reload();
    return { rule: this.ruleFor(orgId)!, created };
  }

  async remove(orgId: string): Promise<boolean> {
    const removed = await tx(this.db, async (c) => {
      const res = await c.query('DELETE FROM mta_pool_rules WHERE organization_id = $1', [orgId]);
      if (res.rowCount === 1) await this.announce(c);
      return res.rowCount === 1;
    });
    if (removed) await this.reload();
    return removed;
  }
}
