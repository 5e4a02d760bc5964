import { checkChannel, PgListener } from '../../shared/db/listener.js';
import type { Db } from '../../shared/db/pool.js';
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
  private listener: PgListener | null = null;

  constructor(
    private readonly db: Db,
    private readonly log: Logger,
    private readonly reconnectMs = 1_000,
  ) {}

  subscribe(channel: string, sub: FeedSubscriber): void {
    checkChannel(channel);
    // The channels are LISTENed to at start; a later one would never be.
    if (this.listener) throw new Error(`subscribe to ${channel} before the change feed starts`);
    const list = this.subs.get(channel) ?? [];
    list.push(sub);
    this.subs.set(channel, list);
  }

  /** Connects and runs every subscriber's first resync; throws if the database is unreachable. */
  async start(): Promise<void> {
    if (this.listener) return;
    const listener = new PgListener({
      db: this.db,
      channels: [...this.subs.keys()],
      onNotification: (channel, payload) => this.notify(channel, payload),
      // LISTEN is active before any reload reads the table, so no change can fall in between.
      onUp: () => this.resync(),
      reconnectMs: this.reconnectMs,
      failFast: true,
      log: this.log.child({ listener: 'change feed' }),
    });
    this.listener = listener;
    try {
      await listener.start();
    } catch (err) {
      this.listener = null;
      throw err;
    }
  }

  async stop(): Promise<void> {
    const listener = this.listener;
    this.listener = null;
    await listener?.stop();
  }

  get connected(): boolean {
    return this.listener?.up ?? false;
  }

  private notify(channel: string, payload: string): void {
    for (const sub of this.subs.get(channel) ?? []) {
      try {
        sub.onNotify(payload);
      } catch (err) {
        this.log.error({ err, channel }, 'change feed subscriber failed');
      }
    }
  }

  private async resync(): Promise<void> {
    for (const list of this.subs.values()) for (const sub of list) await sub.resync();
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
