/**
 * Send provenance (table mta_send_provenance, migrations 030 and 076): written before each SMTP
 * transaction so a bounce or complaint arriving any time later can be attributed, kept
 * 16 days. Keyed by the send id the VERP and CFBL tokens carry (./verp.ts), never by the
 * caller's message id, which two organizations may share. Records made together share one
 * INSERT (the shared Batcher, one INSERT in flight): at thousands of sends per second one
 * round trip per message would cost more than the send. No timer: the write sits on the
 * send's path (a queue group sends one message at a time).
 */
import { Batcher } from '../../shared/batch.js';
import type { Clock } from '../../shared/clock.js';
import type { Db } from '../../shared/db/pool.js';
import { DELIVERY } from './settings.js';

export interface Provenance {
  /** The send's id (the queue job's); null for a row written before send ids (a legacy token's). */
  sendId: string | null;
  messageId: string;
  organizationId: string;
  campaignId: string | null;
  recipient: string;
  domain: string;
  /** The sending IP bound (null: the OS chose). */
  ip: string | null;
  /** Epoch ms. */
  sentAt: number;
  /** A half-open breaker's test send: the breaker epoch it tests (its late bounce or complaint reopens). */
  breakerEpoch?: number | null;
}

/** What a verified token names: a send id, or (legacy form) a message id. */
export interface ProvenanceRef {
  id: string;
  legacy: boolean;
}

/** Each table and its key: the rows written before send ids (migration 076) are read for legacy tokens and pruned alike. */
const TABLES = [
  ['mta_send_provenance', 'send_id'],
  ['mta_send_provenance_legacy', 'message_id'],
] as const;

export class ProvenanceStore {
  private readonly writes: Batcher<Provenance & { sendId: string }, void>;
  private readonly lookups: Batcher<ProvenanceRef, Provenance | null>;

  constructor(
    private readonly db: Db,
    private readonly clock: Clock,
  ) {
    // One INSERT at a time: a later record of a send (its retry) is committed after an earlier one.
    this.writes = new Batcher((rows) => this.insert(rows), { maxInFlight: 1, maxItems: DELIVERY.provenanceBatchMax });
    this.lookups = new Batcher((ids) => this.lookupMany(ids), { maxInFlight: DELIVERY.provenanceLookupsInFlight, maxItems: DELIVERY.provenanceBatchMax });
  }

  /** Resolves once the row is durable. A later record of the same send (a retry) replaces it. */
  record(row: Provenance & { sendId: string }): Promise<void> {
    return this.writes.submit(row);
  }

  private async insert(batch: (Provenance & { sendId: string })[]): Promise<void[]> {
    // One INSERT may not touch a row twice: a send recorded twice in a batch keeps its last.
    const last = new Map<string, Provenance & { sendId: string }>();
    for (const r of batch) last.set(r.sendId, r);
    const rows = [...last.values()];
    await this.db.query(
      `INSERT INTO mta_send_provenance (send_id, message_id, organization_id, campaign_id, recipient, domain, sent_at, ip, breaker_epoch)
       SELECT * FROM unnest($8::text[], $1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[], $7::text[], $9::int[])
       ON CONFLICT (send_id) DO UPDATE SET message_id = EXCLUDED.message_id, organization_id = EXCLUDED.organization_id,
         campaign_id = EXCLUDED.campaign_id, recipient = EXCLUDED.recipient, domain = EXCLUDED.domain,
         sent_at = EXCLUDED.sent_at, ip = EXCLUDED.ip, breaker_epoch = EXCLUDED.breaker_epoch`,
      [
        rows.map((r) => r.messageId),
        rows.map((r) => r.organizationId),
        rows.map((r) => r.campaignId),
        rows.map((r) => r.recipient),
        rows.map((r) => r.domain),
        rows.map((r) => new Date(r.sentAt)),
        rows.map((r) => r.ip),
        rows.map((r) => r.sendId),
        rows.map((r) => r.breakerEpoch ?? null),
      ],
    );
    return new Array<void>(batch.length);
  }

  /**
   * The provenance a verified token names, or null when unknown or older than the 16-day
   * horizon. Lookups made together share one query (the shared Batcher): reports arrive in bursts.
   */
  lookup(ref: ProvenanceRef): Promise<Provenance | null> {
    return this.lookups.submit(ref);
  }

  private async lookupMany(refs: ProvenanceRef[]): Promise<(Provenance | null)[]> {
    const ids = (legacy: boolean) => [...new Set(refs.filter((r) => r.legacy === legacy).map((r) => r.id))];
    const res = await this.db.query<{
      send_id: string | null;
      message_id: string;
      organization_id: string;
      campaign_id: string | null;
      recipient: string;
      domain: string;
      ip: string | null;
      sent_at: Date;
      breaker_epoch: number | null;
    }>({
      name: 'mta_provenance_lookup',
      text: `SELECT send_id, message_id, organization_id, campaign_id, recipient, domain, ip, sent_at, breaker_epoch
               FROM mta_send_provenance WHERE send_id = ANY($1::text[]) AND sent_at > $3
             UNION ALL
             SELECT NULL, message_id, organization_id, campaign_id, recipient, domain, ip, sent_at, NULL::integer
               FROM mta_send_provenance_legacy WHERE message_id = ANY($2::text[]) AND sent_at > $3`,
      values: [ids(false), ids(true), new Date(this.clock.now() - DELIVERY.provenanceRetentionMs)],
    });
    const key = (id: string, legacy: boolean) => `${legacy ? 'm' : 's'}:${id}`;
    const found = new Map(
      res.rows.map((r) => [
        r.send_id === null ? key(r.message_id, true) : key(r.send_id, false),
        { sendId: r.send_id, messageId: r.message_id, organizationId: r.organization_id, campaignId: r.campaign_id, recipient: r.recipient, domain: r.domain, ip: r.ip, sentAt: r.sent_at.getTime(), breakerEpoch: r.breaker_epoch },
      ]),
    );
    return refs.map((r) => found.get(key(r.id, r.legacy)) ?? null);
  }

  /** Deletes rows past the 16-day retention (both tables), in bounded batches. Returns how many went. */
  async prune(): Promise<number> {
    const cutoff = new Date(this.clock.now() - DELIVERY.provenanceRetentionMs);
    let total = 0;
    for (const [table, key] of TABLES) {
      for (;;) {
        const res = await this.db.query(`DELETE FROM ${table} WHERE ${key} IN (SELECT ${key} FROM ${table} WHERE sent_at <= $1 LIMIT 5000)`, [cutoff]);
        total += res.rowCount ?? 0;
        if ((res.rowCount ?? 0) < 5000) break;
      }
    }
    return total;
  }

  /** Writes what is pending. */
  async close(): Promise<void> {
    await this.writes.drain();
  }
}
