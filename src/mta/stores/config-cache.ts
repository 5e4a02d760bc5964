import type { Db, DbClient } from '../../shared/db/pool.js';
import { CoalescingReload } from '../../shared/db/reload.js';
import type { Logger } from '../../shared/log.js';
import type { ChangeFeed } from './change-feed.js';

/** Channel of the small configuration tables; the payload names the table that changed. */
export const CONFIG_CHANNEL = 'mta_config';

/**
 * A small configuration table held in memory in full. A write announces itself with
 * NOTIFY (same transaction), every instance reloads the table; a periodic reload bounds the
 * staleness should a notification be lost (docs/mta.md).
 */
export abstract class ReloadingCache<T> {
  protected data: T;
  private timer: NodeJS.Timeout | undefined;
  private readonly reloads = new CoalescingReload<T>({
    load: () => this.load(),
    apply: (data) => {
      this.data = data;
    },
  });

  protected constructor(
    protected readonly db: Db,
    protected readonly log: Logger,
    feed: ChangeFeed,
    readonly table: string,
    empty: T,
    private readonly pollMs = 60_000,
  ) {
    this.data = empty;
    feed.subscribe(CONFIG_CHANNEL, {
      onNotify: (payload) => {
        if (payload === table) void this.reload().catch((err) => this.log.warn({ err: (err as Error).message, table }, 'reload failed'));
      },
      resync: () => this.reload(),
    });
  }

  protected abstract load(): Promise<T>;

  start(): void {
    this.timer = setInterval(() => void this.reload().catch(() => {}), this.pollMs);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  /** Coalesces concurrent reloads; one requested while running runs again afterwards. */
  reload(): Promise<void> {
    return this.reloads.run();
  }

  /** Inside a write transaction: tells every instance to reload after commit. */
  protected async announce(c: DbClient): Promise<void> {
    await c.query('SELECT pg_notify($1, $2)', [CONFIG_CHANNEL, this.table]);
  }
}
