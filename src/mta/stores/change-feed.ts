import type { Db, DbClient } from '../../shared/db/pool.js';
import type { Logger } from '../../shared/log.js';

export interface FeedSubscriber {
  /** A NOTIFY on the channel (delivered after the writer's commit, in commit order). */
  onNotify(payload: string): void;
  /**
   * Called once LISTEN is active, at start and after every reconnect: notifications may have
   * been missed, so the subscriber reloads from the table.
   */
  resync(): Promise<void>;
}

/**
 * One LISTEN connection per MTA instance that keeps the in-memory caches of durable records
 * (suppression, ISP profiles, org limits, pool rules, credentials) fresh across a fleet. The
 * hot path reads only the caches; PostgreSQL is hit when something changes.
 */
export class ChangeFeed {
  private readonly subs = new Map<string, FeedSubscriber[]>();
  private client: DbClient | null = null;
  private stopped = true;
  private reconnectTimer: NodeJS.Timeout | undefined;
  private connecting: Promise<void> | null = null;

  constructor(
    private readonly db: Db,
    private readonly log: Logger,
    private readonly reconnectMs = 1_000,
  ) {}

  subscribe(channel: string, sub: FeedSubscriber): void {
    if (!/^[a-z_]+$/.test(channel)) throw new Error(`bad channel name ${channel}`);
    const list = this.subs.get(channel) ?? [];
    list.push(sub);
    this.subs.set(channel, list);
  }

  /** Connects and runs every subscriber's first resync; throws if the database is unreachable. */
  async start(): Promise<void> {
    this.stopped = false;
    await this.connect();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.reconnectTimer);
    await this.connecting?.catch(() => {});
    const c = this.client;
    this.client = null;
    if (c) {
      c.removeAllListeners('notification');
      c.removeAllListeners('error');
      await c.query('UNLISTEN *').catch(() => {});
      c.release();
    }
  }

  get connected(): boolean {
    return this.client !== null;
  }

  private connect(): Promise<void> {
    this.connecting = (async () => {
      const client = await this.db.connect();
      try {
        client.on('notification', (msg) => {
          for (const sub of this.subs.get(msg.channel) ?? []) {
            try {
              sub.onNotify(msg.payload ?? '');
            } catch (err) {
              this.log.error({ err, channel: msg.channel }, 'change feed subscriber failed');
            }
          }
        });
        client.on('error', (err) => this.lost(client, err));
        for (const channel of this.subs.keys()) await client.query(`LISTEN ${channel}`);
      } catch (err) {
        client.release(err as Error);
        throw err;
      }
      this.client = client;
      // LISTEN is active before any reload reads the table, so no change can fall in between.
      for (const list of this.subs.values()) for (const sub of list) await sub.resync();
    })();
    return this.connecting.finally(() => {
      this.connecting = null;
    });
  }

  private lost(client: DbClient, err: Error): void {
    if (this.client !== client) return;
    this.client = null;
    client.removeAllListeners('notification');
    client.release(err);
    if (this.stopped) return;
    this.log.warn({ err: err.message }, 'change feed connection lost; reconnecting');
    this.scheduleReconnect();
  }

  private scheduleReconnect(): void {
    clearTimeout(this.reconnectTimer);
    this.reconnectTimer = setTimeout(() => {
      if (this.stopped) return;
      this.connect().catch((err) => {
        this.log.warn({ err: (err as Error).message }, 'change feed reconnect failed');
        this.scheduleReconnect();
      });
    }, this.reconnectMs);
    this.reconnectTimer.unref();
  }
}

/** Splits items into NOTIFY payloads below PostgreSQL's 8000-byte limit. */
export function chunkPayloads(prefix: string, items: string[], maxBytes = 7_000): string[] {
  const out: string[] = [];
  let cur: string[] = [];
  let size = prefix.length;
  for (const item of items) {
    const len = Buffer.byteLength(item) + 1;
    if (cur.length > 0 && size + len > maxBytes) {
      out.push(prefix + cur.join('\n'));
      cur = [];
      size = prefix.length;
    }
    cur.push(item);
    size += len;
  }
  if (cur.length > 0) out.push(prefix + cur.join('\n'));
  return out;
}
