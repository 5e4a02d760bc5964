/**
 * Reports received by the inbound server (table mta_feedback_reports, migration 063), kept
 * 16 days with their SPF, DKIM and DMARC results and what became of them. A report's effects
 * are keyed by `dedupeKey`: the row, the report's events and its suppression commit together,
 * so a replayed report (same key) finds the row and changes nothing.
 *
 * Writes are group-committed (the shared Batcher): reports arriving together share one
 * statement. One transaction per report measured 195 reports/s with 8 senders (bench:bounce):
 * the suppression's NOTIFY takes PostgreSQL's notification lock at every commit, which
 * serialises them. The batch is one statement (data-modifying CTEs), not a transaction of
 * six round trips: the report's latency is what its sender waits for before the next one.
 */
import { Batcher } from '../../shared/batch.js';
import type { Clock } from '../../shared/clock.js';
import type { Db } from '../../shared/db/pool.js';
import { insertEventsSql, insertEventsValues, type OutboxEvent } from '../outbox/store.js';
import { suppressionUpsertCtes, type SuppressionReason, type SuppressionStore } from './suppression.js';

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

export interface ReportWrite {
  row: FeedbackReportRow;
  events: readonly OutboxEvent[];
  /** The suppression a first sighting adds. */
  suppress?: { address: string; reason: SuppressionReason; source: string };
}

export interface ReportWritten {
  /** False for a replay: its row, events and suppression were written before; nothing now. */
  fresh: boolean;
  written: OutboxEvent[];
}

const COLUMNS = ['dedupe_key', 'kind', 'outcome', 'source', 'message_id', 'organization_id', 'recipient', 'reason', 'feedback_type', 'spf', 'dkim', 'dmarc', 'remote_ip'] as const;

const p = (n: number) => `$${n}`;
const BASE = COLUMNS.length + 3;
/**
 * The batch's one statement: its text never changes (the batch is in the array parameters),
 * so it is prepared once per connection, not parsed and planned at every write.
 */
const WRITE_SQL = `WITH rep AS (
     INSERT INTO mta_feedback_reports (${COLUMNS.join(', ')}, hard, received_at)
     SELECT ${COLUMNS.map((c) => `u.${c}`).join(', ')}, h.hard, ${p(COLUMNS.length + 2)}::timestamptz
       FROM unnest(${COLUMNS.map((_, n) => `${p(n + 1)}::text[]`).join(', ')}) WITH ORDINALITY AS u(${COLUMNS.join(', ')}, n)
       JOIN unnest(${p(COLUMNS.length + 1)}::boolean[]) WITH ORDINALITY AS h(hard, n) USING (n)
     ON CONFLICT (dedupe_key) DO NOTHING RETURNING dedupe_key),
   ${suppressionUpsertCtes(
     `SELECT u.a, u.r, u.s, u.n FROM unnest(${p(BASE)}::text[], ${p(BASE + 1)}::text[], ${p(BASE + 2)}::text[], ${p(BASE + 3)}::text[]) WITH ORDINALITY AS u(a, r, s, k, n)
       WHERE u.k IS NULL OR u.k IN (SELECT dedupe_key FROM rep)`,
     `${p(COLUMNS.length + 2)}::timestamptz`,
   )},
   ev AS (${insertEventsSql(BASE + 4, 'u.k IS NULL OR u.k IN (SELECT dedupe_key FROM rep)')})
   SELECT 'rep' AS t, dedupe_key AS v FROM rep
   UNION ALL SELECT 'sup', address FROM sup
   UNION ALL SELECT 'ev', id FROM ev
   UNION ALL SELECT 'notify', NULL FROM sup_notify`;

export class FeedbackReportStore {
  private readonly writes: Batcher<ReportWrite, ReportWritten>;

  constructor(
    private readonly db: Db,
    private readonly clock: Clock,
    private readonly leaseMs: number,
    private readonly suppression: Pick<SuppressionStore, 'noteAdded'>,
  ) {
    // One write at a time: the NOTIFY lock is held through each commit's WAL flush, so a second
    // write in flight could not commit alongside the first anyway; waiting, its reports join
    // the next batch instead (fewer, larger commits: bench:bounce used less CPU and did no worse).
    this.writes = new Batcher((items) => this.writeMany(items), { maxInFlight: 1, maxItems: 200 });
  }

  record(write: ReportWrite): Promise<ReportWritten> {
    return this.writes.submit(write);
  }

  private async writeMany(items: ReportWrite[]): Promise<ReportWritten[]> {
    const now = this.clock.now();
    // A key twice in one batch: the first is the sighting, the second its replay.
    const seen = new Set<string>();
    const first = items.map((i) => {
      const k = i.row.dedupeKey;
      if (k === null) return true;
      if (seen.has(k)) return false;
      seen.add(k);
      return true;
    });
    const rows = items.filter((_, n) => first[n]).map((i) => i.row);
    // Effects of a first sighting, each tagged with its key: the statement keeps those whose
    // report row it inserted (a null key is never a replay).
    const keyed = items.filter((_, n) => first[n]);
    const sup = keyed.filter((i) => i.suppress);
    const events = keyed.flatMap((i) => i.events.map((e) => ({ e, key: i.row.dedupeKey })));
    // One statement, so one round trip and an implicit transaction: the row, the suppression
    // (and its NOTIFY) and the events commit together or not at all.
    const res = await this.db.query<{ t: string; v: string | null }>({
      name: 'mta_feedback_reports_write',
      text: WRITE_SQL,
      values: [
        rows.map((r) => r.dedupeKey),
        rows.map((r) => r.kind),
        rows.map((r) => r.outcome),
        rows.map((r) => r.source),
        rows.map((r) => r.messageId),
        rows.map((r) => r.organizationId),
        rows.map((r) => r.recipient),
        rows.map((r) => r.reason),
        rows.map((r) => r.feedbackType),
        rows.map((r) => r.spf),
        rows.map((r) => r.dkim),
        rows.map((r) => r.dmarc),
        rows.map((r) => r.remoteIp),
        rows.map((r) => r.hard),
        new Date(now),
        sup.map((i) => i.suppress!.address),
        sup.map((i) => i.suppress!.reason),
        sup.map((i) => i.suppress!.source),
        sup.map((i) => i.row.dedupeKey),
        ...insertEventsValues(
          events.map((x) => x.e),
          now + this.leaseMs,
          now,
        ),
        events.map((x) => x.key),
      ],
    });
    const inserted = new Set<string | null>();
    const ids = new Set<string>();
    const suppressed: string[] = [];
    for (const r of res.rows) {
      if (r.t === 'rep') inserted.add(r.v);
      else if (r.t === 'ev') ids.add(r.v!);
      else if (r.t === 'sup') suppressed.push(r.v!);
    }
    if (suppressed.length) this.suppression.noteAdded(suppressed);
    return items.map((i, n) => {
      const fresh = first[n]! && (i.row.dedupeKey === null || inserted.has(i.row.dedupeKey));
      return { fresh, written: fresh ? i.events.filter((e) => ids.has(e.id)) : [] };
    });
  }

  /** Writes what is pending (shutdown). */
  drain(): Promise<void> {
    return this.writes.drain();
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
