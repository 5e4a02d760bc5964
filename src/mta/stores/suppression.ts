import type { Clock } from '../../shared/clock.js';
import { tx, type Db, type DbClient } from '../../shared/db/pool.js';
import type { Logger } from '../../shared/log.js';
import { chunkPayloads, type ChangeFeed } from './change-feed.js';

export const SUPPRESSION_REASONS = ['hard_bounce', 'complaint', 'manual'] as const;
export type SuppressionReason = (typeof SUPPRESSION_REASONS)[number];

export interface SuppressionEntry {
  address: string;
  reason: SuppressionReason;
  source: string | null;
  createdAt: string;
}

const CHANNEL = 'mta_suppression';
/** Addresses per notification in `suppressionUpsertCtes`: 25 × 255 bytes stays under NOTIFY's 8,000. */
const NOTIFY_GROUP = 25;

/**
 * `addIn` as two CTEs of a caller's single statement (one round trip, no BEGIN/COMMIT): `sup`
 * upserts the rows of `from` (a query yielding columns a, r, s, n: address, reason, source,
 * order; the last of an address wins) and `sup_notify` announces them. The final SELECT must
 * read `sup_notify` (a plain CTE nobody reads is not run); call `noteAdded` with `sup`'s
 * addresses after it.
 */
export function suppressionUpsertCtes(from: string, now: string): string {
  return `sup AS (
    INSERT INTO mta_suppression (address, reason, source, created_at)
    SELECT DISTINCT ON (f.a) f.a, f.r, f.s, ${now} FROM (${from}) f ORDER BY f.a, f.n DESC
    ON CONFLICT (address) DO UPDATE SET reason = EXCLUDED.reason, source = COALESCE(EXCLUDED.source, mta_suppression.source)
    RETURNING address),
  sup_notify AS (
    SELECT pg_notify('${CHANNEL}', '+' || chr(10) || string_agg(g.address, chr(10))) AS sent
      FROM (SELECT address, (row_number() OVER () - 1) / ${NOTIFY_GROUP} AS grp FROM sup) g GROUP BY g.grp)`;
}

/**
 * The suppression list: durable in PostgreSQL, answered from an in-memory set on the hot path
 * (pipeline phase 2 never queries the database). The set is loaded at start; every change is
 * announced with NOTIFY in the writing transaction, so each instance of a fleet applies it
 * within the notification latency (milliseconds). If the LISTEN connection drops, the set is
 * reloaded on reconnect; a periodic count check catches anything else (see docs/mta.md).
 */
export class SuppressionStore {
  private set = new Set<string>();
  /** Non-null while a reload runs: notifications received meanwhile, replayed on the new set. */
  private buffered: string[] | null = null;
  private timer: NodeJS.Timeout | undefined;
  private checking = false;

  constructor(
    private readonly db: Db,
    private readonly clock: Clock,
    private readonly log: Logger,
    feed: ChangeFeed,
    private readonly checkEveryMs = 30_000,
  ) {
    feed.subscribe(CHANNEL, {
      onNotify: (payload) => (this.buffered ? this.buffered.push(payload) : this.apply(payload)),
      resync: () => this.reload(),
    });
  }

  /** Starts the periodic consistency check (the feed's start() does the first load). */
  start(): void {
    this.timer = setInterval(() => void this.check(), this.checkEveryMs);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  /** Hot path: `address` must already be lowercase. */
  has(address: string): boolean {
    return this.set.has(address);
  }

  get size(): number {
    return this.set.size;
  }

  async reload(): Promise<void> {
    this.buffered = [];
    try {
      const next = new Set<string>();
      const res = await this.db.query<{ address: string }>('SELECT address FROM mta_suppression');
      for (const r of res.rows) next.add(r.address);
      for (const p of this.buffered) applyTo(next, p);
      this.set = next;
    } finally {
      this.buffered = null;
    }
  }

  private apply(payload: string): void {
    applyTo(this.set, payload);
  }

  private async check(): Promise<void> {
    if (this.checking) return;
    this.checking = true;
    try {
      const res = await this.db.query<{ n: number }>('SELECT count(*)::bigint AS n FROM mta_suppression');
      if (Number(res.rows[0]!.n) !== this.set.size) {
        this.log.info({ table: Number(res.rows[0]!.n), cache: this.set.size }, 'suppression cache out of step; reloading');
        await this.reload();
      }
    } catch (err) {
      this.log.warn({ err: (err as Error).message }, 'suppression consistency check failed');
    } finally {
      this.checking = false;
    }
  }

  /**
   * Adds (or re-reasons) addresses; they must be lowercase and valid. Returns how many were
   * new. An address already listed keeps its first date and takes the newest reason.
   */
  async add(addresses: string[], reason: SuppressionReason, source: string | null = null): Promise<{ added: number; updated: number }> {
    const unique = [...new Set(addresses)];
    if (unique.length === 0) return { added: 0, updated: 0 };
    const result = await tx(this.db, (c) => this.addIn(c, unique.map((address) => ({ address, reason, source }))));
    this.noteAdded(unique);
    return result;
  }

  /**
   * Entries added inside a caller's transaction (effects that must commit with it), each with
   * its own reason and source; one statement and one notification whatever their number. Call
   * `noteAdded` after the commit. An address given twice keeps its last entry.
   */
  async addIn(c: DbClient, entries: readonly { address: string; reason: SuppressionReason; source: string | null }[]): Promise<{ added: number; updated: number }> {
    const byAddress = new Map(entries.map((e) => [e.address, e]));
    if (byAddress.size === 0) return { added: 0, updated: 0 };
    const list = [...byAddress.values()];
    const res = await c.query<{ inserted: boolean }>(
      `INSERT INTO mta_suppression (address, reason, source, created_at)
       SELECT a, r, s, $4 FROM unnest($1::text[], $2::text[], $3::text[]) AS u(a, r, s)
       ON CONFLICT (address) DO UPDATE SET reason = EXCLUDED.reason, source = COALESCE(EXCLUDED.source, mta_suppression.source)
       RETURNING (xmax = 0) AS inserted`,
      [list.map((e) => e.address), list.map((e) => e.reason), list.map((e) => e.source), new Date(this.clock.now())],
    );
    await c.query(`SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p`, [CHANNEL, chunkPayloads('+\n', [...byAddress.keys()])]);
    const added = res.rows.filter((r) => r.inserted).length;
    return { added, updated: res.rows.length - added };
  }

  /** The writer sees its own change at once, without waiting for its notification. */
  noteAdded(addresses: readonly string[]): void {
    for (const a of addresses) this.set.add(a);
  }

  async remove(address: string): Promise<boolean> {
    const removed = await tx(this.db, async (c) => {
      const res = await c.query('DELETE FROM mta_suppression WHERE address = $1', [address]);
      if (res.rowCount === 1) await c.query('SELECT pg_notify($1, $2)', [CHANNEL, `-\n${address}`]);
      return res.rowCount === 1;
    });
    this.set.delete(address);
    return removed;
  }

  async get(address: string): Promise<SuppressionEntry | null> {
    const res = await this.db.query('SELECT * FROM mta_suppression WHERE address = $1', [address]);
    return res.rows[0] ? toEntry(res.rows[0]) : null;
  }

  /** Export in address order; `cursor` is the last address of the previous page. */
  async export(opts: { reason?: SuppressionReason; cursor?: string; limit: number }): Promise<{ items: SuppressionEntry[]; nextCursor: string | null }> {
    const values: unknown[] = [opts.cursor ?? '', opts.limit + 1];
    let where = 'address > $1';
    if (opts.reason) {
      values.push(opts.reason);
      where += ' AND reason = $3';
    }
    const res = await this.db.query(`SELECT * FROM mta_suppression WHERE ${where} ORDER BY address LIMIT $2`, values);
    const rows = res.rows.slice(0, opts.limit).map(toEntry);
    const nextCursor = res.rows.length > opts.limit ? rows[rows.length - 1]!.address : null;
    return { items: rows, nextCursor };
  }

  async stats(): Promise<{ total: number; byReason: Record<SuppressionReason, number> }> {
    const res = await this.db.query<{ reason: SuppressionReason; n: number }>(
      'SELECT reason, count(*)::bigint AS n FROM mta_suppression GROUP BY reason',
    );
    const byReason = { hard_bounce: 0, complaint: 0, manual: 0 };
    for (const r of res.rows) byReason[r.reason] = Number(r.n);
    return { total: byReason.hard_bounce + byReason.complaint + byReason.manual, byReason };
  }
}

function applyTo(set: Set<string>, payload: string): void {
  const lines = payload.split('\n');
  const op = lines[0];
  for (let i = 1; i < lines.length; i++) {
    if (op === '+') set.add(lines[i]!);
    else if (op === '-') set.delete(lines[i]!);
  }
}

function toEntry(r: { address: string; reason: SuppressionReason; source: string | null; created_at: Date }): SuppressionEntry {
  return { address: r.address, reason: r.reason, source: r.source, createdAt: r.created_at.toISOString() };
}
