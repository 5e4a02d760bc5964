import type { Clock } from '../../shared/clock.js';
import { tx, type Db } from '../../shared/db/pool.js';
import type { Logger } from '../../shared/log.js';
import type { ChangeFeed } from './change-feed.js';
import { ReloadingCache } from './config-cache.js';

export interface ReturnPathHost {
  /** Sending (From/DKIM) domain, lower case. */
  domain: string;
  /** The host of its VERP and CFBL addresses: the domain itself or a subdomain (RFC 9477 alignment). */
  host: string;
  updatedAt: string;
}

/**
 * Per-domain return-path hosts (docs/bounces.md → CFBL), cached in memory: the delivery
 * engine asks for every message, and the inbound server accepts bounces at every host.
 */
export class ReturnPathStore extends ReloadingCache<Map<string, ReturnPathHost>> {
  constructor(
    db: Db,
    log: Logger,
    feed: ChangeFeed,
    private readonly clock: Clock,
  ) {
    super(db, log, feed, 'mta_return_path_hosts', new Map());
  }

  protected async load(): Promise<Map<string, ReturnPathHost>> {
    const res = await this.db.query<{ domain: string; host: string; updated_at: Date }>('SELECT * FROM mta_return_path_hosts');
    return new Map(res.rows.map((r) => [r.domain, { domain: r.domain, host: r.host, updatedAt: r.updated_at.toISOString() }]));
  }

  /** Hot path: the registered host of a sending domain. */
  hostFor(domain: string): string | undefined {
    return this.data.get(domain.toLowerCase())?.host;
  }

  list(): ReturnPathHost[] {
    return [...this.data.values()].sort((a, b) => a.domain.localeCompare(b.domain));
  }

  /** Every registered host (the inbound server accepts bounce and fbl addresses at each). */
  hosts(): Set<string> {
    return new Set([...this.data.values()].map((r) => r.host));
  }

  async set(domain: string, host: string): Promise<{ entry: ReturnPathHost; created: boolean }> {
    const now = new Date(this.clock.now());
    const created = await tx(this.db, async (c) => {
      const res = await c.query<{ inserted: boolean }>(
        `INSERT INTO mta_return_path_hosts (domain, host, updated_at) VALUES ($1, $2, $3)
         ON CONFLICT (domain) DO UPDATE SET host = $2, updated_at = $3 RETURNING (xmax = 0) AS inserted`,
        [domain, host, now],
      );
      await this.announce(c);
      return res.rows[0]!.inserted;
    });
    await this.reload();
    return { entry: this.data.get(domain)!, created };
  }

  async remove(domain: string): Promise<boolean> {
    const removed = await tx(this.db, async (c) => {
      const res = await c.query('DELETE FROM mta_return_path_hosts WHERE domain = $1', [domain]);
      if (res.rowCount === 1) await this.announce(c);
      return res.rowCount === 1;
    });
    if (removed) await this.reload();
    return removed;
  }
}
