/**
 * Which event names at least one enabled endpoint subscribes to, held in memory so that the
 * fan-out drops an event nobody wants before buffering or writing anything (an `email.clicked`
 * per click would otherwise cost a transaction share even with no endpoint configured).
 *
 * Correctness rule: the cache may say "wanted" wrongly (the fan-out then reads the table and
 * writes nothing), never "not wanted" for an endpoint that exists. So whenever the set may be
 * stale it is `null`, which lets every event through:
 * - before the first load, and while the LISTEN connection is down (notifications may be lost);
 * - from a change (a local write, or a NOTIFY from any instance) until a load that started
 *   after it has finished. Loads carry a generation number: one that overlapped a change is
 *   not installed and runs again.
 * Every endpoint write sends NOTIFY in its own statement (delivered on commit), so every
 * instance of a fleet re-reads; a periodic re-read bounds the staleness should that fail.
 */
import { checkChannel, PgListener } from '../../shared/db/listener.js';
import type { Db } from '../../shared/db/pool.js';
import { CoalescingReload } from '../../shared/db/reload.js';
import type { Logger } from '../../shared/log.js';

export interface SubscriptionCacheOptions {
  db: Db;
  log: Logger;
  /** Reads the subscribed event names of enabled endpoints. */
  load: () => Promise<ReadonlySet<string>>;
  channel: string;
  /** Periodic re-read; 0 disables. */
  refreshMs: number;
  reconnectMs: number;
  /** LISTEN for changes made by other instances (default true). */
  listen?: boolean;
  /**
   * This instance's tag in notification payloads (`<tag> <webhook id>`): its own changes are
   * applied by the caller through changed() before it returns, so their echo is ignored
   * (it would only let every event through for one more read).
   */
  selfTag?: string;
}

export class SubscriptionCache {
  private events: ReadonlySet<string> | null = null;
  private readonly reloads: CoalescingReload<ReadonlySet<string>>;
  private readonly listener: PgListener | undefined;
  private refreshTimer: NodeJS.Timeout | undefined;
  private running = false;

  constructor(private readonly o: SubscriptionCacheOptions) {
    checkChannel(o.channel);
    this.reloads = new CoalescingReload({
      load: () => o.load(),
      // A set read while not listening may miss a change made meanwhile: not trusted.
      apply: (set) => {
        if (!this.listener || this.listener.up) this.events = set;
      },
      onError: (err) => {
        o.log.warn({ err }, 'reading webhook subscriptions failed; every event goes to the fan-out meanwhile');
        this.events = null;
      },
    });
    if (o.listen !== false) {
      this.listener = new PgListener({
        db: o.db,
        channels: [o.channel],
        onNotification: (_channel, payload) => {
          if (o.selfTag && payload.startsWith(`${o.selfTag} `)) return;
          void this.changed();
        },
        // Also the first read: LISTEN is in place before it, so no change falls in between.
        onUp: () => this.changed(),
        // Changes made while we are not listening would go unnoticed.
        onDown: () => this.forget(),
        reconnectMs: o.reconnectMs,
        log: o.log.child({ cache: 'webhook subscriptions' }),
      });
    }
  }

  /** False only when no enabled endpoint subscribes to `name` (as far as is known for sure). */
  wants(name: string): boolean {
    return this.events === null || this.events.has(name);
  }

  /** The known set, or null while it is unknown (every event passes). */
  current(): ReadonlySet<string> | null {
    return this.events;
  }

  /** Starts listening (LISTEN before the first read, so no change falls in between), then reads. */
  async start(): Promise<void> {
    if (this.running) return;
    this.running = true;
    // The listener's onUp does the first read; should LISTEN fail, the set stays unknown until it works.
    if (this.listener) await this.listener.start();
    else await this.changed();
    if (this.o.refreshMs > 0) {
      this.refreshTimer = setInterval(() => void this.reload(), this.o.refreshMs);
      this.refreshTimer.unref();
    }
  }

  async stop(): Promise<void> {
    this.running = false;
    clearInterval(this.refreshTimer);
    await this.listener?.stop();
    await this.reloads.idle();
  }

  /**
   * An endpoint changed (committed): every event passes until a read that started after this
   * call has finished. Resolves then (or when that read failed; events keep passing).
   */
  changed(): Promise<void> {
    this.forget();
    return this.reloads.run();
  }

  /** Reads the table; concurrent calls share a run, a call during a run makes it read again. */
  reload(): Promise<void> {
    return this.reloads.run();
  }

  /** The set may be stale from now on: every event passes, and no read in flight is trusted. */
  private forget(): void {
    this.reloads.invalidate();
    this.events = null;
  }
}
