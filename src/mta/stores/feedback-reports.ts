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
import { toIso, type Clock } from '../../shared/clock.js';
import type { MtaEventName } from '../../shared/contracts/mta.js';
import type { Db } from '../../shared/db/pool.js';
import { DELIVERY } from '../delivery/settings.js';
import type { Provenance } from '../delivery/provenance.js';
import { reportEventId, reportEventIdSql, type OutboxEvent } from '../outbox/store.js';
import { suppressionUpsertCtes, type SuppressionReason, type SuppressionStore } from './suppression.js';

export interface FeedbackReportRow {
  /** Null for reports that have no effect to guard (rejected, ignored). */
  dedupeKey: string | null;
  kind: string;
  outcome: string;
  source: string | null;
  /** The send id a token named (null for a legacy token's, or none). */
  sendId: string | null;
  /** A legacy token's message id; otherwise filled from the provenance by the write. */
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

/** The provenance fields an event's data takes from the send (never from the report). */
export type ProvenanceField = 'messageId' | 'organizationId' | 'campaignId' | 'recipient' | 'domain' | 'ip';

/**
 * What a report attributed by token to `row.sendId` (a legacy token: `row.messageId`) does,
 * resolved against that send's provenance inside the write's own statement (one round trip,
 * no lookup before it).
 */
export interface ReportEffect {
  /**
   * `bounce` or `complaint`: the dedupe key is `<kind>/<sendId><keySuffix>` (a legacy token's:
   * `<kind>:<organization>:<messageId><keySuffix>`, as before), the suppression's source `<kind>:<messageId>`.
   */
  kind: 'bounce' | 'complaint';
  /** Null: nothing to guard (a bounce about nobody: recorded as ignored). */
  keySuffix: string | null;
  /** The event; `fill` names the data fields taken from the provenance. */
  event: { name: MtaEventName; data: object; fill: readonly ProvenanceField[]; at: number } | null;
  /** The suppression a first sighting adds to the recipient we sent to. */
  suppress: SuppressionReason | null;
}

export interface ReportWrite {
  /** With `effect`, organizationId, recipient and dedupeKey come from the provenance instead. */
  row: FeedbackReportRow;
  effect?: ReportEffect;
}

export interface ReportWritten {
  /**
   * The provenance an attributed report was resolved to; null when there is none within the
   * horizon (then the row was written as `rejected:expired`, without effect) or no `effect`.
   */
  provenance: Provenance | null;
  /** False for a replay: its row, events and suppression were written before; nothing now. */
  fresh: boolean;
  written: OutboxEvent[];
}

const TEXT = ['kind', 'outcome', 'source', 'send_id', 'message_id', 'organization_id', 'recipient', 'reason', 'feedback_type', 'spf', 'dkim', 'dmarc', 'remote_ip', 'fx_kind', 'key_suffix', 'ev_name', 'ev_body', 'ev_fill', 'sup_reason'] as const;
const COLUMNS = ['dedupe_key', 'kind', 'outcome', 'source', 'send_id', 'message_id', 'organization_id', 'recipient', 'reason', 'hard', 'feedback_type', 'spf', 'dkim', 'dmarc', 'remote_ip'] as const;

const p = (n: number) => `$${n}`;
/** Each provenance field an event may take, and its column in the statement. */
const FILL: Record<ProvenanceField, string> = { messageId: 'fx.msg', organizationId: 'fx.org', campaignId: 'fx.p_campaign', recipient: 'fx.rcpt', domain: 'fx.p_domain', ip: 'fx.p_ip' };
/** The fields an event names, appended to its data as JSON (text, not jsonb: the template's bytes stay as JSON.stringify wrote them). */
const FILL_SQL = Object.entries(FILL)
  .map(([k, col]) => `CASE WHEN '${k}' = ANY (string_to_array(fx.ev_fill, ',')) THEN ',"${k}":' || COALESCE(to_json(${col})::text, 'null') END`)
  .join(', ');
const HARD = TEXT.length + 1;
const NOW = TEXT.length + 2;
const LEASE = TEXT.length + 3;
const HORIZON = TEXT.length + 4;
/**
 * The batch's one statement: its text never changes (the batch is in the array parameters),
 * so it is prepared once per connection, not parsed and planned at every write. An attributed
 * report's provenance is joined here, not looked up first: each report costs its sender one
 * round trip. A key twice in one batch: the first is the sighting, the later ones its replays
 * (no row, no effect). Effects follow a row only when its key was inserted now.
 */
const WRITE_SQL = `WITH u AS (
     SELECT * FROM unnest(${TEXT.map((_, n) => `${p(n + 1)}::text[]`).join(', ')}, ${p(HARD)}::boolean[])
       WITH ORDINALITY AS u(${TEXT.join(', ')}, hard, n)),
   r AS (
     SELECT u.*, pv.send_id AS p_send, pv.campaign_id AS p_campaign, pv.domain AS p_domain, pv.ip AS p_ip, pv.sent_at AS p_sent_at, pv.breaker_epoch AS p_breaker,
            pv.message_id IS NULL AND u.fx_kind IS NOT NULL AS expired,
            COALESCE(pv.message_id, u.message_id) AS msg,
            CASE WHEN u.fx_kind IS NULL THEN u.organization_id ELSE pv.organization_id END AS org,
            CASE WHEN u.fx_kind IS NULL THEN u.recipient ELSE pv.recipient END AS rcpt,
            CASE WHEN pv.message_id IS NOT NULL AND u.key_suffix IS NOT NULL
                 THEN CASE WHEN pv.send_id IS NOT NULL THEN u.fx_kind || '/' || pv.send_id
                           ELSE u.fx_kind || ':' || pv.organization_id || ':' || pv.message_id END || u.key_suffix END AS dedupe_key
       FROM u LEFT JOIN LATERAL (
              SELECT p.send_id, p.message_id, p.organization_id, p.campaign_id, p.recipient, p.domain, p.ip, p.sent_at, p.breaker_epoch
                FROM mta_send_provenance p WHERE u.send_id IS NOT NULL AND p.send_id = u.send_id AND p.sent_at > ${p(HORIZON)}::timestamptz
              UNION ALL
              SELECT NULL, l.message_id, l.organization_id, l.campaign_id, l.recipient, l.domain, l.ip, l.sent_at, NULL::integer
                FROM mta_send_provenance_legacy l WHERE u.send_id IS NULL AND l.message_id = u.message_id AND l.sent_at > ${p(HORIZON)}::timestamptz
            ) pv ON u.fx_kind IS NOT NULL),
   f AS (
     SELECT r.*, r.dedupe_key IS NULL OR row_number() OVER (PARTITION BY r.dedupe_key ORDER BY r.n) = 1 AS first FROM r),
   rep AS (
     INSERT INTO mta_feedback_reports (${COLUMNS.join(', ')}, received_at)
     SELECT f.dedupe_key, f.kind, CASE WHEN f.expired THEN 'rejected:expired' ELSE f.outcome END, f.source, f.send_id, f.msg, f.org, f.rcpt,
            CASE WHEN f.expired THEN NULL ELSE f.reason END, CASE WHEN f.expired THEN NULL ELSE f.hard END,
            f.feedback_type, f.spf, f.dkim, f.dmarc, f.remote_ip, ${p(NOW)}::timestamptz
       FROM f WHERE f.first ORDER BY f.n
     ON CONFLICT (dedupe_key) DO NOTHING RETURNING dedupe_key),
   fx AS (SELECT f.* FROM f WHERE f.first AND f.dedupe_key IN (SELECT dedupe_key FROM rep)),
   ${suppressionUpsertCtes(`SELECT fx.rcpt AS a, fx.sup_reason AS r, fx.fx_kind || ':' || fx.msg AS s, fx.n FROM fx WHERE fx.sup_reason IS NOT NULL`, `${p(NOW)}::timestamptz`)},
   ev AS (
     INSERT INTO mta_outbox (id, event, body, next_at, created_at)
     SELECT e.id, fx.ev_name, '{"id":' || to_json(e.id)::text || ',' || substr(fx.ev_body, 2, length(fx.ev_body) - 3) || concat(${FILL_SQL}) || '}}',
            ${p(LEASE)}::timestamptz, ${p(NOW)}::timestamptz
       FROM fx CROSS JOIN LATERAL (SELECT ${reportEventIdSql('fx.dedupe_key')} AS id) e
      WHERE fx.ev_name IS NOT NULL ORDER BY fx.n
     ON CONFLICT (id) DO NOTHING RETURNING id, event, body)
   SELECT 'prov' AS t, r.n, r.dedupe_key AS k,
          json_build_object('sendId', r.p_send, 'messageId', r.msg, 'organizationId', r.org, 'campaignId', r.p_campaign, 'recipient', r.rcpt, 'domain', r.p_domain, 'ip', r.p_ip,
                            'sentAt', (extract(epoch FROM r.p_sent_at) * 1000)::float8, 'breakerEpoch', r.p_breaker)::text AS v
     FROM r WHERE r.fx_kind IS NOT NULL AND NOT r.expired
   UNION ALL SELECT 'rep', NULL, dedupe_key, NULL FROM rep
   UNION ALL SELECT 'sup', NULL, NULL, address FROM sup
   UNION ALL SELECT 'ev', NULL, id, body FROM ev
   UNION ALL SELECT 'notify', NULL, NULL, NULL FROM sup_notify`;

/** An event's `{ event, timestamp, data }` without what the statement adds: its id and the provenance's fields. */
function eventTemplate(effect: ReportEffect | undefined): string | null {
  const e = effect?.event;
  if (!e) return null;
  // The statement appends `,"field":…` inside data: an empty data would give `{,`.
  if (Object.keys(e.data).length === 0) throw new Error(`report event ${e.name} needs at least one data field`);
  return JSON.stringify({ event: e.name, timestamp: toIso(e.at), data: e.data });
}

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

  /** Writes a report: a row alone, or with `effect` its provenance's effects, once per dedupe key. */
  record(write: ReportWrite): Promise<ReportWritten> {
    return this.writes.submit(write);
  }

  private async writeMany(items: ReportWrite[]): Promise<ReportWritten[]> {
    const now = this.clock.now();
    const col = <T>(f: (w: ReportWrite) => T) => items.map(f);
    const fx = (w: ReportWrite) => w.effect;
    // One statement, so one round trip and an implicit transaction: the rows, the suppressions
    // (and their NOTIFY) and the events commit together or not at all.
    const res = await this.db.query<{ t: string; n: string | null; k: string | null; v: string | null }>({
      name: 'mta_feedback_reports_write',
      text: WRITE_SQL,
      values: [
        col((w) => w.row.kind),
        col((w) => w.row.outcome),
        col((w) => w.row.source),
        col((w) => w.row.sendId),
        col((w) => w.row.messageId),
        col((w) => (fx(w) ? null : w.row.organizationId)),
        col((w) => (fx(w) ? null : w.row.recipient)),
        col((w) => w.row.reason),
        col((w) => w.row.feedbackType),
        col((w) => w.row.spf),
        col((w) => w.row.dkim),
        col((w) => w.row.dmarc),
        col((w) => w.row.remoteIp),
        col((w) => fx(w)?.kind ?? null),
        col((w) => fx(w)?.keySuffix ?? null),
        col((w) => fx(w)?.event?.name ?? null),
        col((w) => eventTemplate(fx(w))),
        col((w) => fx(w)?.event?.fill.join(',') ?? null),
        col((w) => fx(w)?.suppress ?? null),
        col((w) => w.row.hard),
        new Date(now),
        new Date(now + this.leaseMs),
        new Date(now - DELIVERY.provenanceRetentionMs),
      ],
    });
    const found = new Map<number, { key: string | null; prov: Provenance }>();
    const inserted = new Set<string>();
    const events = new Map<string, string>();
    const suppressed: string[] = [];
    for (const r of res.rows) {
      if (r.t === 'prov') found.set(Number(r.n) - 1, { key: r.k, prov: JSON.parse(r.v!) });
      else if (r.t === 'rep' && r.k !== null) inserted.add(r.k);
      else if (r.t === 'ev') events.set(r.k!, r.v!);
      else if (r.t === 'sup') suppressed.push(r.v!);
    }
    if (suppressed.length) this.suppression.noteAdded(suppressed);
    // The first item of a key is its sighting (fresh when its row went in now); the rest replays.
    const sighted = new Set<string>();
    return items.map((w, n) => {
      const hit = found.get(n);
      const provenance = hit?.prov ?? null;
      const key = hit?.key ?? null;
      if (key === null) return { provenance, fresh: true, written: [] };
      const fresh = !sighted.has(key) && inserted.has(key);
      sighted.add(key);
      const id = reportEventId(key);
      const body = fresh ? events.get(id) : undefined;
      return { provenance, fresh, written: body === undefined ? [] : [{ id, event: w.effect!.event!.name, body }] };
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
      sendId: r.send_id,
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
