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
import pg from 'pg';
import type { Db } from '../../shared/db/pool.js';
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
  private generation = 0;
  private reloading: Promise<void> | null = null;
  private again = false;
  private listener: pg.Client | undefined;
  private refreshTimer: NodeJS.Timeout | undefined;
  private reconnectTimer: NodeJS.Timeout | undefined;
  private running = false;

  constructor(private readonly o: SubscriptionCacheOptions) {
    if (!/^[a-z_]+$/.test(o.channel)) throw new Error(`bad channel name ${o.channel}`);
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
    if (this.o.listen !== false) await this.connect();
    await this.changed();
    if (this.o.refreshMs > 0) {
      this.refreshTimer = setInterval(() => void this.reload(), this.o.refreshMs);
      this.refreshTimer.unref();
    }
  }

  async stop(): Promise<void> {
    this.running = false;
    clearInterval(this.refreshTimer);
    clearTimeout(this.reconnectTimer);
    const l = this.listener;
    this.listener = undefined;
    await l?.end().catch(() => {});
    await this.reloading;
  }

  /**
   * An endpoint changed (committed): every event passes until a read that started after this
   * call has finished. Resolves then (or when that read failed; events keep passing).
   */
  changed(): Promise<void> {
    this.generation++;
    this.events = null;
    return this.reload();
  }

  /** Reads the table; concurrent calls share a run, a call during a run makes it read again. */
  reload(): Promise<void> {
    if (this.reloading) {
      this.again = true;
      return this.reloading;
    }
    this.reloading = (async () => {
      do {
        this.again = false;
        const gen = this.generation;
        try {
          const set = await this.o.load();
          // A change during the read, or a lost listener: the result may be stale.
          if (gen === this.generation && (this.listener || this.o.listen === false)) this.events = set;
        } catch (err) {
          this.o.log.warn({ err }, 'reading webhook subscriptions failed; every event goes to the fan-out meanwhile');
          this.events = null;
          return;
        }
      } while (this.again);
    })().finally(() => {
      this.reloading = null;
    });
    return this.reloading;
  }

  private async connect(): Promise<void> {
    // A dedicated client, not a pool slot: it lives as long as the service.
    const client = new pg.Client((this.o.db as pg.Pool).options);
    client.on('notification', (msg) => {
      if (msg.channel !== this.o.channel) return;
      if (this.o.selfTag && msg.payload?.startsWith(`${this.o.selfTag} `)) return;
      void this.changed();
    });
    const lost = (why: string) => {
      if (this.listener !== client) return;
      this.listener = undefined;
      this.generation++;
      this.events = null; // changes made while we are not listening would go unnoticed
      this.o.log.warn({ err: why }, 'webhook subscriptions: LISTEN connection lost; every event goes to the fan-out until it is back');
      client.end().catch(() => {});
      this.scheduleReconnect();
    };
    client.on('error', (err) => lost(err.message));
    client.on('end', () => lost('connection ended'));
    try {
      await client.connect();
      await client.query(`LISTEN ${this.o.channel}`);
    } catch (err) {
      this.o.log.warn({ err: (err as Error).message }, 'webhook subscriptions: LISTEN failed; retrying');
      client.end().catch(() => {});
      this.scheduleReconnect();
      return;
    }
    if (!this.running) {
      await client.end().catch(() => {});
      return;
    }
    this.listener = client;
  }

  private scheduleReconnect(): void {
    if (!this.running || this.reconnectTimer) return;
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = undefined;
      if (!this.running || this.listener) return;
      void this.connect().then(() => {
        if (this.listener) return this.changed();
      });
    }, this.o.reconnectMs);
    this.reconnectTimer.unref();
  }
}
