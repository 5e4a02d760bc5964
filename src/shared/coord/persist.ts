import { systemClock, type Clock } from '../clock.js';
import type { Db } from '../db/pool.js';
import type { Logger } from '../log.js';
import { MemoryCoordination, type PersistentEntry } from './memory.js';
import type { Coordination } from './types.js';

// Rows per INSERT: keeps parameter arrays and statement time small when many keys changed.
const BATCH = 500;
// Expired rows are never reloaded; deleting them now and then only keeps the table small.
const PURGE_EVERY_MS = 10 * 60_000;

export interface CoordPersistenceOptions {
  db: Db;
  coord: Coordination;
  clock?: Clock;
  /** How far behind PostgreSQL may lag (default 2 s). */
  intervalMs?: number;
  /** Failed background flushes are reported here (they are retried on the next tick). */
  log?: Logger;
}

/**
 * Makes the memory adapter's `persist:` counters and JSON values survive a restart: changes are
 * upserted into `coord_state` a few seconds behind, and live rows are reloaded at start with
 * their original expiry. With Redis (the fleet's shared, durable store) every method is a no-op.
 */
export class CoordPersistence {
  private readonly db: Db;
  private readonly mem: MemoryCoordination | null;
  private readonly clock: Clock;
  private readonly intervalMs: number;
  private readonly log?: Logger;
  /** Taken from the adapter but not yet written (kept across a failed flush). */
  private readonly pending = new Map<string, PersistentEntry>();
  /** Flushes run one after another; this is the end of the chain. */
  private tail: Promise<void> = Promise.resolve();
  private timer: NodeJS.Timeout | undefined;
  private nextPurgeAt = -Infinity;

  constructor(opts: CoordPersistenceOptions) {
    this.db = opts.db;
    this.mem = opts.coord instanceof MemoryCoordination ? opts.coord : null;
    this.clock = opts.clock ?? systemClock;
    this.intervalMs = opts.intervalMs ?? 2000;
    this.log = opts.log;
  }

  /** Reloads live rows into the adapter; returns how many. Call before the adapter is used. */
  async load(): Promise<number> {
    if (!this.mem) return 0;
    const now = this.clock.now();
    await this.purge(now);
    const { rows } = await this.db.query<{ key: string; kind: string; value: string; expires_at: Date | null }>(
      `SELECT key, kind, value::text AS value, expires_at FROM coord_state WHERE expires_at IS NULL OR expires_at > $1`,
      [new Date(now)],
    );
    const entries: PersistentEntry[] = [];
    for (const r of rows) {
      const expiresAt = r.expires_at === null ? null : r.expires_at.getTime();
      if (r.kind === 'json') entries.push({ key: r.key, kind: 'json', json: r.value, expiresAt });
      // A counter always has a TTL; a row without one was not written by us.
      else if (r.kind === 'counter' && expiresAt !== null) {
        entries.push({ key: r.key, kind: 'counter', value: Number(r.value), expiresAt });
      }
    }
    this.mem.restorePersistent(entries);
    return entries.length;
  }

  /** Writes every change since the previous flush. Concurrent calls are serialized. */
  flush(): Promise<void> {
    const run = this.tail.then(() => this.flushOnce());
    this.tail = run.catch(() => {});
    return run;
  }

  /** Flushes every `intervalMs` in the background (the timer does not keep the process alive). */
  start(): void {
    if (!this.mem || this.timer) return;
    this.timer = setInterval(() => {
      this.flush().catch((err: unknown) => this.log?.warn({ err }, 'coordination state flush failed; will retry'));
    }, this.intervalMs);
    this.timer.unref();
  }

  /** Stops the background flushes and writes what is left. */
  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    await this.flush();
  }

  private async flushOnce(): Promise<void> {
    if (!this.mem) return;
    for (const e of this.mem.dirtyPersistentEntries()) this.pending.set(e.key, e);
    const now = this.clock.now();
    if (this.pending.size > 0) {
      const entries = [...this.pending.values()];
      for (let i = 0; i < entries.length; i += BATCH) {
        const batch = entries.slice(i, i + BATCH);
        await this.upsert(batch, now);
        for (const e of batch) this.pending.delete(e.key);
      }
    }
    if (now >= this.nextPurgeAt) await this.purge(now);
  }

  private async upsert(batch: PersistentEntry[], now: number): Promise<void> {
    const keys: string[] = [];
    const kinds: string[] = [];
    const values: string[] = [];
    const expiries: (Date | null)[] = [];
    for (const e of batch) {
      keys.push(e.key);
      kinds.push(e.kind);
      // String(n) of a finite number is valid JSON; a non-finite counter cannot be stored.
      values.push(e.kind === 'json' ? e.json : Number.isFinite(e.value) ? String(e.value) : '0');
      expiries.push(e.expiresAt === null ? null : new Date(e.expiresAt));
    }
    await this.db.query(
      `INSERT INTO coord_state (key, kind, value, expires_at, updated_at)
       SELECT k, kd, v::jsonb, e, $5 FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[]) AS u(k, kd, v, e)
       ON CONFLICT (key) DO UPDATE
         SET kind = EXCLUDED.kind, value = EXCLUDED.value, expires_at = EXCLUDED.expires_at, updated_at = EXCLUDED.updated_at`,
      [keys, kinds, values, expiries, new Date(now)],
    );
  }

  private async purge(now: number): Promise<void> {
    await this.db.query('DELETE FROM coord_state WHERE expires_at <= $1', [new Date(now)]);
    this.nextPurgeAt = now + PURGE_EVERY_MS;
  }
}
