/**
 * Send provenance (table mta_send_provenance, migration 030): written before each SMTP
 * transaction so a bounce or complaint arriving any time later can be attributed, kept
 * 16 days. Records made together share one INSERT (the shared Batcher, one INSERT in flight):
 * at thousands of sends per second one round trip per message would cost more than the send.
 * No timer: the write sits on the send's path (a queue group sends one message at a time).
 */
import { Batcher } from '../../shared/batch.js';
import type { Clock } from '../../shared/clock.js';
import type { Db } from '../../shared/db/pool.js';
import { DELIVERY } from './settings.js';

export interface Provenance {
  messageId: string;
  organizationId: string;
  campaignId: string | null;
  recipient: string;
  domain: string;
  /** The sending IP bound (null: the OS chose). */
  ip: string | null;
  /** Epoch ms. */
  sentAt: number;
}

export class ProvenanceStore {
  private readonly writes: Batcher<Provenance, void>;
  private readonly lookups: Batcher<string, Provenance | null>;

  constructor(
    private readonly db: Db,
    private readonly clock: Clock,
  ) {
    // One INSERT at a time: a later record of a message id is committed after an earlier one.
    this.writes = new Batcher((rows) => this.insert(rows), { maxInFlight: 1, maxItems: DELIVERY.provenanceBatchMax });
    this.lookups = new Batcher((ids) => this.lookupMany(ids), { maxInFlight: DELIVERY.provenanceLookupsInFlight, maxItems: DELIVERY.provenanceBatchMax });
  }

  /** Resolves once the row is durable. A later record for the same message id replaces it. */
  record(row: Provenance): Promise<void> {
    return this.writes.submit(row);
  }

  private async insert(batch: Provenance[]): Promise<void[]> {
    // One INSERT may not touch a row twice: a message id recorded twice in a batch keeps its last.
    const last = new Map<string, Provenance>();
    for (const r of batch) last.set(r.messageId, r);
    const rows = [...last.values()];
    await this.db.query(
      `INSERT INTO mta_send_provenance (message_id, organization_id, campaign_id, recipient, domain, sent_at, ip)
       SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[], $7::text[])
       ON CONFLICT (message_id) DO UPDATE SET organization_id = EXCLUDED.organization_id,
         campaign_id = EXCLUDED.campaign_id, recipient = EXCLUDED.recipient, domain = EXCLUDED.domain,
         sent_at = EXCLUDED.sent_at, ip = EXCLUDED.ip`,
      [
        rows.map((r) => r.messageId),
        rows.map((r) => r.organizationId),
        rows.map((r) => r.campaignId),
        rows.map((r) => r.recipient),
        rows.map((r) => r.domain),
        rows.map((r) => new Date(r.sentAt)),
        rows.map((r) => r.ip),
      ],
    );
    return new Array<void>(batch.length);
  }

  /**
   * The provenance of a message id, or null when unknown or older than the 16-day horizon.
   * Lookups made together share one query (the shared Batcher): reports arrive in bursts.
   */
  lookup(messageId: string): Promise<Provenance | null> {
    return this.lookups.submit(messageId);
  }

  private async lookupMany(ids: string[]): Promise<(Provenance | null)[]> {
    const res = await this.db.query<{
      message_id: string;
      organization_id: string;
      campaign_id: string | null;
      recipient: string;
      domain: string;
      ip: string | null;
      sent_at: Date;
    }>({
      name: 'mta_provenance_lookup',
      text: `SELECT * FROM mta_send_provenance WHERE message_id = ANY($1::text[]) AND sent_at > $2`,
      values: [[...new Set(ids)], new Date(this.clock.now() - DELIVERY.provenanceRetentionMs)],
    });
    const found = new Map(
      res.rows.map((r) => [
        r.message_id,
        { messageId: r.message_id, organizationId: r.organization_id, campaignId: r.campaign_id, recipient: r.recipient, domain: r.domain, ip: r.ip, sentAt: r.sent_at.getTime() },
      ]),
    );
    return ids.map((id) => found.get(id) ?? null);
  }

  /** Deletes rows past the 16-day retention, in bounded batches. Returns how many went. */
  async prune(): Promise<number> {
    const cutoff = new Date(this.clock.now() - DELIVERY.provenanceRetentionMs);
    let total = 0;
    for (;;) {
      const res = await this.db.query(
        `DELETE FROM mta_send_provenance WHERE message_id IN
           (SELECT message_id FROM mta_send_provenance WHERE sent_at <= $1 LIMIT 5000)`,
        [cutoff],
      );
      total += res.rowCount ?? 0;
      if ((res.rowCount ?? 0) < 5000) return total;
    }
  }

  /** Writes what is pending. */
  async close(): Promise<void> {
    await this.writes.drain();
  }
}
