/**
 * Reports received by the inbound server (table mta_feedback_reports, migration 063), kept
 * 16 days with their SPF, DKIM and DMARC results and what became of them. A report's effects
 * are keyed by `dedupeKey`: the row and the report's events commit together, so a replayed
 * report (same key) finds the row and changes nothing.
 */
import type { Clock } from '../../shared/clock.js';
import { tx, type Db, type DbClient } from '../../shared/db/pool.js';
import { insertEventsSql, insertEventsValues, type OutboxEvent } from '../outbox/store.js';

export interface FeedbackReportRow {
  /** Null for reports that have no effect to guard (rejected, ignored). */
  dedupeKey: string | null;
  kind: string;
  outcome: string;
  source: string | null;
  messageId: string | null;
  organizationId: string | null;
  recipient: string | null;
  reason: string | null;
  hard: boolean | null;
  feedbackType: string | null;
  spf: string | null;
  dkim: string | null;
  dmarc: string | null;
  remoteIp: string | null;
}

export class FeedbackReportStore {
  constructor(
    private readonly db: Db,
    private readonly clock: Clock,
    private readonly leaseMs: number,
  ) {}

  /**
   * Records a report and, when its key is new, its events. `fresh` is false for a replay:
   * its row and events were written before, and nothing is written now.
   */
  async record(
    row: FeedbackReportRow,
    events: readonly OutboxEvent[],
    /** Further writes of a first sighting, in the same transaction (suppression). */
    within?: (c: DbClient) => Promise<unknown>,
  ): Promise<{ fresh: boolean; written: OutboxEvent[] }> {
    const now = this.clock.now();
    return tx(this.db, async (c) => {
      const res = await c.query(
        `INSERT INTO mta_feedback_reports (dedupe_key, received_at, kind, outcome, source, message_id, organization_id,
           recipient, reason, hard, feedback_type, spf, dkim, dmarc, remote_ip)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)
         ON CONFLICT (dedupe_key) DO NOTHING`,
        [row.dedupeKey, new Date(now), row.kind, row.outcome, row.source, row.messageId, row.organizationId, row.recipient, row.reason, row.hard, row.feedbackType, row.spf, row.dkim, row.dmarc, row.remoteIp],
      );
      if (res.rowCount !== 1) return { fresh: false, written: [] };
      await within?.(c);
      if (events.length === 0) return { fresh: true, written: [] };
      const ins = await c.query<{ id: string }>(insertEventsSql(1), insertEventsValues(events, now + this.leaseMs, now));
      const ids = new Set(ins.rows.map((r) => r.id));
      return { fresh: true, written: events.filter((e) => ids.has(e.id)) };
    });
  }

  /** Recent rows, newest first (operators and tests). */
  async recent(limit = 100): Promise<(FeedbackReportRow & { receivedAt: string })[]> {
    const res = await this.db.query(`SELECT * FROM mta_feedback_reports ORDER BY id DESC LIMIT $1`, [limit]);
    return res.rows.map((r) => ({
      dedupeKey: r.dedupe_key,
      kind: r.kind,
      outcome: r.outcome,
      source: r.source,
      messageId: r.message_id,
      organizationId: r.organization_id,
      recipient: r.recipient,
      reason: r.reason,
      hard: r.hard,
      feedbackType: r.feedback_type,
      spf: r.spf,
      dkim: r.dkim,
      dmarc: r.dmarc,
      remoteIp: r.remote_ip,
      receivedAt: (r.received_at as Date).toISOString(),
    }));
  }

  /** Deletes rows past the horizon in bounded batches (replays older than that are refused as expired anyway). */
  async prune(horizonMs: number): Promise<number> {
    const cutoff = new Date(this.clock.now() - horizonMs);
    let total = 0;
    for (;;) {
      const res = await this.db.query(
        `DELETE FROM mta_feedback_reports WHERE id IN (SELECT id FROM mta_feedback_reports WHERE received_at <= $1 LIMIT 5000)`,
        [cutoff],
      );
      total += res.rowCount ?? 0;
      if ((res.rowCount ?? 0) < 5000) return total;
    }
  }
}
