/**
 * The statuses of `email_sends`, their order, and the one INSERT of new sends. A send is born
 * `sending` (its row is written before the provider answers); the hand-over moves it to
 * `accepted` or `failed` (./handoff.ts), feedback moves it forward by STATUS_RANK
 * (./feedback.ts). The database refuses any other status (migrations 078/079, a CHECK whose
 * list test/backend/sends/status.test.ts compares with SEND_STATUSES). No other module
 * writes `INSERT INTO email_sends` or lists these statuses (test/architecture.test.ts).
 */
import { toIso } from '../../shared/clock.js';
import type { Queryable } from '../../shared/db/pool.js';

/** Every send's first status: the row is written, the provider has not answered yet. */
export const INITIAL_SEND_STATUS = 'sending';

/** The statuses hand-over and feedback move a send to: the normalized lifecycle (feedback/lifecycle.ts). */
export const LIFECYCLE_STATUSES = ['accepted', 'attempted', 'sent', 'delivered', 'bounced', 'complained', 'failed', 'rejected', 'suppressed'] as const;
export type LifecycleStatus = (typeof LIFECYCLE_STATUSES)[number];

/** Every status an `email_sends` row may hold (the CHECK constraint lists exactly these). */
export const SEND_STATUSES = [INITIAL_SEND_STATUS, ...LIFECYCLE_STATUSES] as const;
export type SendStatus = (typeof SEND_STATUSES)[number];

/**
 * Order of a send's status. A status only replaces one of lower or equal rank, so late or
 * out-of-order feedback (a `sent` after `delivered`) never moves a send backwards, and a
 * complaint after delivery still shows.
 */
export const STATUS_RANK: Record<SendStatus, number> = {
  sending: 0,
  accepted: 10,
  attempted: 20,
  sent: 30,
  delivered: 40,
  failed: 50,
  rejected: 50,
  suppressed: 50,
  bounced: 50,
  complained: 60,
};

/** Sends written together: one type, campaign, sender, subject and provider; one row per recipient. */
export interface NewSends {
  type: 'transactional' | 'campaign';
  campaignId: string | null;
  fromEmail: string;
  subject: string;
  provider: string;
  rows: { id: string; contactId: string | null; toEmail: string; metadata?: object; idempotencyKey?: string | null; requestHash?: string | null }[];
  /**
   * Which existing row makes a new one a no-op: the same id (a campaign batch written again
   * after a crash) or the same Idempotency-Key (a transactional request repeated).
   */
  onConflict: 'id' | 'idempotency_key';
}

export interface InsertedSend {
  id: string;
  status: string;
  request_hash: string | null;
  updated_at: Date;
}

const CONFLICT_TARGET = { id: '(id)', idempotency_key: '(type, idempotency_key) WHERE idempotency_key IS NOT NULL' } as const;

/**
 * Writes new sends, status INITIAL_SEND_STATUS, in one statement whatever their number.
 * Returns the rows written (a row skipped by `onConflict` is not returned).
 */
export async function insertSends(db: Queryable, s: NewSends, at: number): Promise<InsertedSend[]> {
  if (s.rows.length === 0) return [];
  const r = await db.query<InsertedSend>({
    // Named (prepared once per connection): the fan-out runs it for every batch.
    name: `lm_sends_insert_${s.onConflict}`,
    text: `INSERT INTO email_sends (id, type, contact_id, campaign_id, to_email, from_email, subject, provider, status,
                                    idempotency_key, request_hash, metadata, created_at, updated_at)
           SELECT t.id, $1, t.contact_id, $2, t.to_email, $3, $4, $5, $6, t.idempotency_key, t.request_hash, t.metadata::jsonb, $7, $7
             FROM unnest($8::text[], $9::text[], $10::text[], $11::text[], $12::text[], $13::text[])
                  AS t(id, contact_id, to_email, idempotency_key, request_hash, metadata)
           ON CONFLICT ${CONFLICT_TARGET[s.onConflict]} DO NOTHING
           RETURNING id, status, request_hash, updated_at`,
    values: [
      s.type, s.campaignId, s.fromEmail, s.subject, s.provider, INITIAL_SEND_STATUS, toIso(at),
      s.rows.map((x) => x.id), s.rows.map((x) => x.contactId), s.rows.map((x) => x.toEmail),
      s.rows.map((x) => x.idempotencyKey ?? null), s.rows.map((x) => x.requestHash ?? null), s.rows.map((x) => JSON.stringify(x.metadata ?? {})),
    ],
  });
  return r.rows;
}
