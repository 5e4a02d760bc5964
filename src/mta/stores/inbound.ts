/**
 * Inbound routes and the mailbox cache (docs/inbound.md), durable in PostgreSQL (migration
 * 068) and held in memory in full: the inbound listener asks at every RCPT TO. A write
 * NOTIFYs in its transaction, so every instance reloads (ReloadingCache).
 */
import type { Clock } from '../../shared/clock.js';
import { tx, type Db } from '../../shared/db/pool.js';
import type { Logger } from '../../shared/log.js';
import type { ChangeFeed } from './change-feed.js';
import { ReloadingCache } from './config-cache.js';

export const ROUTE_ACTIONS = ['inbox', 'forward'] as const;
export type RouteAction = (typeof ROUTE_ACTIONS)[number];
/** The address of a route that takes every local part of its domain. */
export const CATCH_ALL = '*';

export interface InboundRoute {
  /** Lower case, A-label form. */
  domain: string;
  /** A local part (lower case) or `*`. */
  address: string;
  action: RouteAction;
  /** Forward targets (normalized addresses); empty for `inbox`. */
  targets: string[];
  /** Whose forwarded copies these are (limits, suppression, provenance); null: ORGANIZATION_ID. */
  organizationId: string | null;
  createdAt: string;
  updatedAt: string;
}

export class InboundRouteStore extends ReloadingCache<Map<string, InboundRoute>> {
  constructor(
    db: Db,
    log: Logger,
    feed: ChangeFeed,
    private readonly clock: Clock,
  ) {
    super(db, log, feed, 'mta_inbound_routes', new Map());
  }

  protected async load(): Promise<Map<string, InboundRoute>> {
    const res = await this.db.query<Record<string, any>>('SELECT * FROM mta_inbound_routes');
    return new Map(
      res.rows.map((r) => [
        `${r.address}@${r.domain}`,
        {
          domain: r.domain,
          address: r.address,
          action: r.action,
          targets: r.targets,
          organizationId: r.organization_id,
          createdAt: r.created_at.toISOString(),
          updatedAt: r.updated_at.toISOString(),
        },
      ]),
    );
  }

  /** Hot path: the route of exactly `local@domain` (`local` may be `*`). */
  exact(local: string, domain: string): InboundRoute | null {
    return this.data.get(`${local.toLowerCase()}@${domain.toLowerCase()}`) ?? null;
  }

  /** The route of an address, an exact one before its domain's catch-all. */
  resolve(address: string): InboundRoute | null {
    const at = address.lastIndexOf('@');
    if (at < 1) return null;
    const local = address.slice(0, at).toLowerCase();
    const domain = address.slice(at + 1).toLowerCase();
    return this.data.get(`${local}@${domain}`) ?? this.data.get(`${CATCH_ALL}@${domain}`) ?? null;
  }

  list(): InboundRoute[] {
    return [...this.data.values()].sort((a, b) => a.domain.localeCompare(b.domain) || a.address.localeCompare(b.address));
  }

  async set(r: Pick<InboundRoute, 'domain' | 'address' | 'action' | 'targets' | 'organizationId'>): Promise<{ route: InboundRoute; created: boolean }> {
    const now = new Date(this.clock.now());
    const created = await tx(this.db, async (c) => {
      const res = await c.query<{ inserted: boolean }>(
        `INSERT INTO mta_inbound_routes (domain, address, action, targets, organization_id, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $6)
         ON CONFLICT (domain, address) DO UPDATE SET action = $3, targets = $4, organization_id = $5, updated_at = $6 RETURNING (xmax = 0) AS inserted`,
        [r.domain, r.address, r.action, r.targets, r.organizationId, now],
      );
      await this.announce(c);
      return res.rows[0]!.inserted;
    });
    await this.reload();
    return { route: this.data.get(`${r.address}@${r.domain}`)!, created };
  }

  async remove(domain: string, address: string): Promise<boolean> {
    const removed = await tx(this.db, async (c) => {
      const res = await c.query('DELETE FROM mta_inbound_routes WHERE domain = $1 AND address = $2', [domain, address]);
      if (res.rowCount === 1) await this.announce(c);
      return res.rowCount === 1;
    });
    if (removed) await this.reload();
    return removed;
  }
}

export interface MailboxEntry {
  /** Lower case. */
  address: string;
  mailboxId: string;
  organizationId: string;
  /** Bytes; null: no quota. */
  quota: number | null;
  /** What the backend said the mailbox holds after its last delivery. */
  usedBytes: number;
  updatedAt: string;
}

export class MailboxCacheStore extends ReloadingCache<Map<string, MailboxEntry>> {
  constructor(
    db: Db,
    log: Logger,
    feed: ChangeFeed,
    private readonly clock: Clock,
  ) {
    super(db, log, feed, 'mta_mailbox_cache', new Map());
  }

  protected async load(): Promise<Map<string, MailboxEntry>> {
    const res = await this.db.query<Record<string, any>>('SELECT * FROM mta_mailbox_cache');
    return new Map(
      res.rows.map((r) => [
        r.address,
        {
          address: r.address,
          mailboxId: r.mailbox_id,
          organizationId: r.organization_id,
          quota: r.quota === null ? null : Number(r.quota),
          usedBytes: Number(r.used_bytes),
          updatedAt: r.updated_at.toISOString(),
        },
      ]),
    );
  }

  get(address: string): MailboxEntry | null {
    return this.data.get(address.toLowerCase()) ?? null;
  }

  list(): MailboxEntry[] {
    return [...this.data.values()].sort((a, b) => a.address.localeCompare(b.address));
  }

  /** Creates or refreshes an entry; a refresh keeps the used bytes last reported. */
  async set(e: Pick<MailboxEntry, 'address' | 'mailboxId' | 'organizationId' | 'quota'>): Promise<{ entry: MailboxEntry; created: boolean }> {
    const now = new Date(this.clock.now());
    const created = await tx(this.db, async (c) => {
      const res = await c.query<{ inserted: boolean }>(
        `INSERT INTO mta_mailbox_cache (address, mailbox_id, organization_id, quota, updated_at) VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (address) DO UPDATE SET mailbox_id = $2, organization_id = $3, quota = $4, updated_at = $5,
           used_bytes = CASE WHEN mta_mailbox_cache.mailbox_id = $2 THEN mta_mailbox_cache.used_bytes ELSE 0 END
         RETURNING (xmax = 0) AS inserted`,
        [e.address, e.mailboxId, e.organizationId, e.quota, now],
      );
      await this.announce(c);
      return res.rows[0]!.inserted;
    });
    await this.reload();
    return { entry: this.data.get(e.address)!, created };
  }

  async remove(address: string): Promise<boolean> {
    const removed = await tx(this.db, async (c) => {
      const res = await c.query('DELETE FROM mta_mailbox_cache WHERE address = $1', [address]);
      if (res.rowCount === 1) await this.announce(c);
      return res.rowCount === 1;
    });
    if (removed) await this.reload();
    return removed;
  }

  /**
   * The backend's answer to a delivery: the mailbox's bytes, for the next 452 check. Written to
   * the row and to this instance's copy without a NOTIFY: a reload of the whole cache on every
   * instance per delivered message would cost more than it protects. Other instances read it at
   * their next reload (any change to the table, at most 60 s); the backend counts the quota.
   */
  async used(address: string, mailboxId: string, usedBytes: number): Promise<void> {
    await this.db.query('UPDATE mta_mailbox_cache SET used_bytes = $3 WHERE address = $1 AND mailbox_id = $2', [address, mailboxId, usedBytes]);
    const e = this.data.get(address);
    if (e && e.mailboxId === mailboxId) this.data.set(address, { ...e, usedBytes });
  }
}
