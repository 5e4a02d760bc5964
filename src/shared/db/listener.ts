/**
 * LISTEN on a dedicated connection that comes back after a loss. Notifications sent while it
 * is down are lost for good, so onUp runs each time LISTEN is in place (at start and after
 * every reconnect): that is where a caller re-reads its table or wakes up its worker.
 */
import pg from 'pg';
import { silentLogger, type Logger } from '../log.js';
import type { Db } from './pool.js';

export interface PgListenerOptions {
  /** Connection settings come from this pool; the listener opens its own client (a pool slot would be held for good). */
  db: Db;
  channels: readonly string[];
  /** A NOTIFY on one of the channels (delivered after the sender's commit, in commit order). */
  onNotification: (channel: string, payload: string) => void;
  /**
   * LISTEN is in place (at start and after every reconnect); notifications may have been
   * missed before, so re-read or kick here. start() awaits the first call. A failure counts as
   * a lost connection: it is dropped and onUp runs again after the next reconnect.
   */
  onUp?: () => void | Promise<void>;
  /** The connection was lost (not called by stop()): until the next onUp, changes go unnoticed. */
  onDown?: () => void;
  /** Wait before connecting again after a failure or a loss; default 1000 ms. */
  reconnectMs?: number;
  /** start() rejects, leaving the listener stopped, when the first attempt (connect, LISTEN, onUp) fails. */
  failFast?: boolean;
  log?: Logger;
  /** application_name of the connection (pg_stat_activity); default the pool's. */
  applicationName?: string;
}

/** Channel names go into SQL unquoted: keep them to plain identifiers. */
export function checkChannel(name: string): string {
  if (!/^[a-z_][a-z0-9_]*$/.test(name)) throw new Error(`bad channel name ${name}`);
  return name;
}

export class PgListener {
  private readonly o: PgListenerOptions;
  private readonly log: Logger;
  private readonly reconnectMs: number;
  private running = false;
  /** The client of the latest attempt, connecting or listening; undefined once lost or stopped. */
  private client: pg.Client | undefined;
  private listening = false;
  private reconnectTimer: NodeJS.Timeout | undefined;
  /** onUp runs in flight; stop() waits for them. */
  private readonly upRuns = new Set<Promise<unknown>>();

  constructor(o: PgListenerOptions) {
    o.channels.forEach(checkChannel);
    this.o = o;
    this.log = o.log ?? silentLogger;
    this.reconnectMs = o.reconnectMs ?? 1000;
  }

  /** LISTEN is in place (onUp may still be running). */
  get up(): boolean {
    return this.listening;
  }

  /**
   * Connects, LISTENs and runs onUp. A failure is retried in the background (or, with
   * failFast, rejects); either way start() returns after the first attempt.
   */
  async start(): Promise<void> {
    if (this.running) return;
    this.running = true;
    const err = await this.connect(this.o.failFast ?? false);
    if (err && this.o.failFast) {
      await this.stop();
      throw err;
    }
  }

  /** Closes the connection; no reconnect, no callback after this resolves. */
  async stop(): Promise<void> {
    this.running = false;
    clearTimeout(this.reconnectTimer);
    this.reconnectTimer = undefined;
    const client = this.client;
    const wasListening = this.listening;
    this.client = undefined;
    this.listening = false;
    // A client still connecting is not awaited (a dead host could take minutes); its attempt ends it.
    if (wasListening) await client?.end().catch(() => {});
    else void client?.end().catch(() => {});
    await Promise.all(this.upRuns);
  }

  /** One attempt; returns its error, having scheduled the next attempt unless told not to. */
  private async connect(noRetry: boolean): Promise<Error | undefined> {
    const client = new pg.Client({ ...this.o.db.options, application_name: this.o.applicationName ?? this.o.db.options.application_name });
    this.client = client;
    client.on('notification', (msg) => {
      if (this.client !== client) return;
      try {
        this.o.onNotification(msg.channel, msg.payload ?? '');
      } catch (err) {
        // Thrown inside pg's socket handler it would be an uncaught exception.
        this.log.error({ err, channel: msg.channel }, 'notification handler failed');
      }
    });
    client.on('error', (err) => this.lost(client, err));
    client.on('end', () => this.lost(client, new Error('connection ended')));
    try {
      await client.connect();
      for (const channel of this.o.channels) await client.query(`LISTEN ${channel}`);
      // Lost (or stopped) between the last reply and here.
      if (this.client !== client) throw new Error('connection lost while starting to LISTEN');
    } catch (err) {
      if (this.client === client) this.client = undefined;
      client.end().catch(() => {});
      // Stopped, or stopped and started again (a newer attempt is under way).
      if (!this.running || this.client) return undefined;
      if (!noRetry) {
        this.log.warn({ err, channels: this.o.channels }, `LISTEN failed; retrying in ${this.reconnectMs} ms`);
        this.scheduleReconnect();
      }
      return err as Error;
    }
    this.listening = true;
    const run = Promise.resolve()
      .then(() => this.o.onUp?.())
      .then(
        () => undefined,
        (err: unknown) => (err instanceof Error ? err : new Error(String(err))),
      );
    this.upRuns.add(run);
    const err = await run;
    this.upRuns.delete(run);
    // Dropping the connection makes onUp run again once it is back.
    if (err && !noRetry) this.lost(client, err, 'onUp failed after LISTEN');
    return err;
  }

  private lost(client: pg.Client, err: Error, what = 'LISTEN connection lost'): void {
    if (this.client !== client) return; // an old client's late events, or stopped
    this.client = undefined;
    client.end().catch(() => {});
    if (!this.listening) return; // still connecting: the attempt sees the loss and retries
    this.listening = false;
    if (!this.running) return;
    this.log.warn({ err, channels: this.o.channels }, `${what}; reconnecting in ${this.reconnectMs} ms`);
    this.o.onDown?.();
    this.scheduleReconnect();
  }

  private scheduleReconnect(): void {
    if (!this.running || this.reconnectTimer) return;
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = undefined;
      if (this.running && !this.client) void this.connect(false);
    }, this.reconnectMs);
    this.reconnectTimer.unref();
  }
}
