import type { Clock } from '../../shared/clock.js';
import type { Db } from '../../shared/db/pool.js';

/** A webhook event to the backend that failed after every retry. */
export interface DlqEntry {
  id: string;
  event: string;
  /** The `{ event, timestamp, data }` body as it was posted. */
  body: { event: string; timestamp: string; data: unknown };
  error: string;
  attempts: number;
  createdAt: string;
  failedAt: string;
}

/** Dead-letter queue of webhook events (PostgreSQL). */
export class DlqStore {
  constructor(
    private readonly db: Db,
    private readonly clock: Clock,
  ) {}

  /** Stores (or, for an entry retried from the DLQ, re-stores under its id) a failed event. */
  async put(e: { id: string; body: DlqEntry['body']; error: string; attempts: number; createdAt: number }): Promise<void> {
    await this.db.query(
      `INSERT INTO mta_dlq (id, event, body, error, attempts, created_at, failed_at) VALUES ($1, $2, $3, $4, $5, $6, $7)
       ON CONFLICT (id) DO UPDATE SET error = EXCLUDED.error, attempts = mta_dlq.attempts + EXCLUDED.attempts, failed_at = EXCLUDED.failed_at`,
      [e.id, e.body.event, JSON.stringify(e.body), e.error.slice(0, 2000), e.attempts, new Date(e.createdAt), new Date(this.clock.now())],
    );
  }

  async list(limit: number, offset: number): Promise<{ items: DlqEntry[]; total: number }> {
    const [rows, total] = await Promise.all([
      this.db.query('SELECT * FROM mta_dlq ORDER BY created_at, id LIMIT $1 OFFSET $2', [limit, offset]),
      this.db.query<{ n: number }>('SELECT count(*)::bigint AS n FROM mta_dlq'),
    ]);
    return { items: rows.rows.map(toEntry), total: Number(total.rows[0]!.n) };
  }

  async get(id: string): Promise<DlqEntry | null> {
    const res = await this.db.query('SELECT * FROM mta_dlq WHERE id = $1', [id]);
    return res.rows[0] ? toEntry(res.rows[0]) : null;
  }

  async stats(): Promise<{ total: number; oldestAgeMs: number | null; oldestCreatedAt: string | null }> {
    const res = await this.db.query<{ n: number; oldest: Date | null }>('SELECT count(*)::bigint AS n, min(created_at) AS oldest FROM mta_dlq');
    const { n, oldest } = res.rows[0]!;
    return {
      total: Number(n),
      oldestAgeMs: oldest ? Math.max(0, this.clock.now() - oldest.getTime()) : null,
      oldestCreatedAt: oldest ? oldest.toISOString() : null,
    };
  }

  /** Removes and returns entries (for retry); `ids` undefined takes up to `limit` oldest. */
  async take(ids: string[] | undefined, limit = 1000): Promise<DlqEntry[]> {
    const res = ids
      ? await this.db.query('DELETE FROM mta_dlq WHERE id = ANY ($1::text[]) RETURNING *', [ids])
      : await this.db.query(
          'DELETE FROM mta_dlq WHERE id IN (SELECT id FROM mta_dlq ORDER BY created_at, id LIMIT $1 FOR UPDATE SKIP LOCKED) RETURNING *',
          [limit],
        );
    return res.rows.map(toEntry);
  }

  async remove(id: string): Promise<boolean> {
    const res = await this.db.query('DELETE FROM mta_dlq WHERE id = $1', [id]);
    return res.rowCount === 1;
  }
}

function toEntry(r: Record<string, any>): DlqEntry {
  return {
    id: r.id,
    event: r.event,
    body: r.body,
    error: r.error,
    attempts: r.attempts,
    createdAt: r.created_at.toISOString(),
    failedAt: r.failed_at.toISOString(),
  };
}
