/**
 * Send provenance (table mta_send_provenance, migration 030): written before each SMTP
 * transaction so a bounce or complaint arriving any time later can be attributed, kept
 * 16 days. Rows are batched into one INSERT per few milliseconds: at thousands of sends per
 * second one round trip per message would cost more than the send.
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

interface Pending {
  row: Provenance;
  done: { resolve: () => void; reject: (err: Error) => void }[];
}

export class ProvenanceStore {
  private pending = new Map<string, Pending>();
  private timer: NodeJS.Timeout | undefined;
  private flushing: Promise<void> = Promise.resolve();
  private readonly lookups: Batcher<string, Provenance | null>;

  constructor(
    private readonly db: Db,
    private readonly clock: Clock,
  ) {
    this.lookups = new Batcher((ids) => this.lookupMany(ids), { maxInFlight: DELIVERY.provenanceLookupsInFlight, maxItems: DELIVERY.provenanceBatchMax });
  }

  /** Resolves once the row is durable. A later record for the same message id replaces it. */
  record(row: Provenance): Promise<void> {
    return new Promise((resolve, reject) => {
      const p = this.pending.get(row.messageId);
      if (p) {
        p.row = row;
        p.done.push({ resolve, reject });
      } else this.pending.set(row.messageId, { row, done: [{ resolve, reject }] });
      if (this.pending.size >= DELIVERY.provenanceBatchMax) this.flushSoon(0);
      else this.flushSoon(DELIVERY.provenanceFlushMs);
    });
  }

  private flushSoon(ms: number): void {
    if (this.timer && ms > 0) return;
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.flushing = this.flushing.then(() => this.flush());
    }, ms);
  }

  private async flush(): Promise<void> {
    if (this.pending.size === 0) return;
    const batch = [...this.pending.values()];
    this.pending = new Map();
    const rows = batch.map((b) => b.row);
    try {
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
      for (const b of batch) for (const d of b.done) d.resolve();
    } catch (err) {
      for (const b of batch) for (const d of b.done) d.reject(err as Error);
    }
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
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
    this.flushing = this.flushing.then(() => this.flush());
    await this.flushing;
  }
}
