/**
 * Reports received by the inbound server (table mta_feedback_reports, migration 063), kept
 * 16 days with their SPF, DKIM and DMARC results and what became of them. A report's effects
 * are keyed by `dedupeKey`: the row, the report's events and its suppression commit together,
 * so a replayed report (same key) finds the row and changes nothing.
 *
 * Writes are group-committed (the shared Batcher): reports arriving together share one
 * statement. One transaction per report measured 195 reports/s with 8 senders (bench:bounce):
 * the suppression's NOTIFY takes PostgreSQL's notification lock at every commit, which
 * serialises them. A batch is one statement (data-modifying CTEs), not a transaction of six
 * round trips: the report's latency is what its sender waits for before the next one. Its
 * provenance is looked up before (batched lookups, which run while the previous batch is
 * written): the event is built from it in TypeScript by outboxEvent, like every outbox row.
 */
import { Batcher } from '../../shared/batch.js';
import type { Clock } from '../../shared/clock.js';
import type { MtaEventData, MtaEventName } from '../../shared/contracts/mta.js';
import type { Db } from '../../shared/db/pool.js';
import { ProvenanceStore, type Provenance, type ProvenanceRef } from '../delivery/provenance.js';
import { insertEventsSql, insertEventsValues, outboxEvent, reportEventId, type OutboxEvent } from '../outbox/store.js';
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
 * resolved against that send's provenance, which the store looks up just before the write.
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

const TEXT = ['dedupe_key', 'kind', 'outcome', 'source', 'send_id', 'message_id', 'organization_id', 'recipient', 'reason', 'feedback_type', 'spf', 'dkim', 'dmarc', 'remote_ip', 'sup_reason', 'sup_source'] as const;
const COLUMNS = ['dedupe_key', 'kind', 'outcome', 'source', 'send_id', 'message_id', 'organization_id', 'recipient', 'reason', 'hard', 'feedback_type', 'spf', 'dkim', 'dmarc', 'remote_ip'] as const;

const p = (n: number) => `$${n}`;
const HARD = TEXT.length + 1;
const NOW = TEXT.length + 2;
/** The events' parameters (insertEventsSql): ids, names, bodies, lease end, now, keys. */
const EVENTS = TEXT.length + 3;
/**
 * The batch's one statement: its text never changes (the batch is in the array parameters),
 * so it is prepared once per connection, not parsed and planned at every write. The rows come
 * resolved (provenance, dedupe key, event); effects follow a row only when its key was
 * inserted now, so a replay's suppression and event are not written again.
 */
const WRITE_SQL = `WITH w AS (
     SELECT * FROM unnest(${TEXT.map((_, n) => `${p(n + 1)}::text[]`).join(', ')}, ${p(HARD)}::boolean[])
       WITH ORDINALITY AS w(${TEXT.join(', ')}, hard, n)),
   rep AS (
     INSERT INTO mta_feedback_reports (${COLUMNS.join(', ')}, received_at)
     SELECT ${COLUMNS.map((c) => `w.${c}`).join(', ')}, ${p(NOW)}::timestamptz FROM w ORDER BY w.n
     ON CONFLICT (dedupe_key) DO NOTHING RETURNING dedupe_key),
   fx AS (SELECT w.* FROM w WHERE w.dedupe_key IN (SELECT dedupe_key FROM rep)),
   ${suppressionUpsertCtes(`SELECT fx.recipient AS a, fx.sup_reason AS r, fx.sup_source AS s, fx.n FROM fx WHERE fx.sup_reason IS NOT NULL`, `${p(NOW)}::timestamptz`)},
   ev AS (${insertEventsSql(EVENTS, 'u.k IN (SELECT dedupe_key FROM rep)')})
   SELECT 'rep' AS t, dedupe_key AS v FROM rep
   UNION ALL SELECT 'sup', address FROM sup
   UNION ALL SELECT 'ev', id FROM ev
   UNION ALL SELECT 'notify', NULL FROM sup_notify`;

/** A report resolved against its provenance: the row as written, and the effects a first sighting has. */
interface Resolved {
  provenance: Provenance | null;
  /** The row's dedupe key (null: nothing to guard). */
  key: string | null;
  row: FeedbackReportRow;
  /** The suppression a first sighting adds to the recipient we sent to, and its source `<kind>:<messageId>`. */
  suppress: { reason: SuppressionReason; source: string } | null;
  event: OutboxEvent | null;
}

/** What a report's token names: a send id, or (legacy token) a message id; null for neither. */
function refOf(row: FeedbackReportRow): ProvenanceRef | null {
  if (row.sendId !== null) return { id: row.sendId, legacy: false };
  return row.messageId !== null ? { id: row.messageId, legacy: true } : null;
}

/** The key of an effect on `prov` (ReportEffect.kind): `<kind>/<sendId><suffix>`, a legacy send's `<kind>:<org>:<messageId><suffix>`. */
function effectKey(effect: ReportEffect, prov: Provenance): string | null {
  if (effect.keySuffix === null) return null;
  const send = prov.sendId !== null ? `${effect.kind}/${prov.sendId}` : `${effect.kind}:${prov.organizationId}:${prov.messageId}`;
  return send + effect.keySuffix;
}

/** The write of one report: its provenance's fields in the row and the event (built like every outbox event, by outboxEvent). */
function resolve(w: ReportWrite, prov: Provenance | null): Resolved {
  const { row, effect } = w;
  if (!effect) return { provenance: null, key: null, row: { ...row, dedupeKey: null }, suppress: null, event: null };
  if (!prov) {
    const expired = { ...row, dedupeKey: null, outcome: 'rejected:expired', organizationId: null, recipient: null, reason: null, hard: null };
    return { provenance: null, key: null, row: expired, suppress: null, event: null };
  }
  const key = effectKey(effect, prov);
  const resolved = { ...row, dedupeKey: key, messageId: prov.messageId, organizationId: prov.organizationId, recipient: prov.recipient };
  const e = effect.event;
  let event: OutboxEvent | null = null;
  if (e && key !== null) {
    // The provenance's fields, never the report's (the organization, recipient, campaign, domain, IP we sent with).
    const data: Record<string, unknown> = { ...e.data };
    for (const f of e.fill) data[f] = prov[f];
    event = outboxEvent(e.name, data as MtaEventData[typeof e.name], e.at, reportEventId(key));
  }
  const suppress = effect.suppress ? { reason: effect.suppress, source: `${effect.kind}:${prov.messageId}` } : null;
  return { provenance: prov, key, row: resolved, suppress, event };
}

export class FeedbackReportStore {
  private readonly writes: Batcher<Resolved, ReportWritten>;
  /** The sends' provenance, looked up before the write (batched, several in flight): the write's one statement then needs no join. */
  private readonly provenance: ProvenanceStore;

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
    this.provenance = new ProvenanceStore(db, clock);
  }

  /**
   * Writes a report: a row alone, or with `effect` its provenance's effects, once per dedupe key.
   * The provenance is looked up first (lookups run while the previous batch is written), as the
   * event's data and the key are built from it here, in TypeScript.
   */
  async record(write: ReportWrite): Promise<ReportWritten> {
    const ref = write.effect ? refOf(write.row) : null;
    return this.writes.submit(resolve(write, ref ? await this.provenance.lookup(ref) : null));
  }

  private async writeMany(resolved: Resolved[]): Promise<ReportWritten[]> {
    const now = this.clock.now();
    // A key twice in one batch: the first is the sighting, the later ones its replays (no row, no effect).
    const seen = new Set<string>();
    const rows = resolved.filter((r) => {
      if (r.key === null) return true;
      if (seen.has(r.key)) return false;
      seen.add(r.key);
      return true;
    });
    const withEvent = rows.filter((r) => r.event !== null);
    const col = <T>(f: (r: Resolved) => T) => rows.map(f);
    // One statement, so an implicit transaction: the rows, the suppressions
    // (and their NOTIFY) and the events commit together or not at all.
    const res = await this.db.query<{ t: string; v: string | null }>({
      name: 'mta_feedback_reports_write',
      text: WRITE_SQL,
      values: [
        col((r) => r.key),
        col((r) => r.row.kind),
        col((r) => r.row.outcome),
        col((r) => r.row.source),
        col((r) => r.row.sendId),
        col((r) => r.row.messageId),
        col((r) => r.row.organizationId),
        col((r) => r.row.recipient),
        col((r) => r.row.reason),
        col((r) => r.row.feedbackType),
        col((r) => r.row.spf),
        col((r) => r.row.dkim),
        col((r) => r.row.dmarc),
        col((r) => r.row.remoteIp),
        col((r) => r.suppress?.reason ?? null),
        col((r) => r.suppress?.source ?? null),
        col((r) => r.row.hard),
        new Date(now),
        ...insertEventsValues(
          withEvent.map((r) => r.event!),
          now + this.leaseMs,
          now,
        ),
        withEvent.map((r) => r.key),
      ],
    });
    const inserted = new Set<string>();
    const written = new Set<string>();
    const suppressed: string[] = [];
    for (const r of res.rows) {
      if (r.t === 'rep' && r.v !== null) inserted.add(r.v);
      else if (r.t === 'ev') written.add(r.v!);
      else if (r.t === 'sup') suppressed.push(r.v!);
    }
    if (suppressed.length) this.suppression.noteAdded(suppressed);
    // The first item of a key is its sighting (fresh when its row went in now); the rest replays.
    const sighted = new Set<string>();
    return resolved.map(({ provenance, key, event }) => {
      if (key === null) return { provenance, fresh: true, written: [] };
      const fresh = !sighted.has(key) && inserted.has(key);
      sighted.add(key);
      return { provenance, fresh, written: fresh && event && written.has(event.id) ? [event] : [] };
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
