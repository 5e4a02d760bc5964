/**
 * The per-recipient record of a campaign: each recipient's latest send (a retry adds one),
 * its state in operator words (policy RECIPIENT_STATE_OF), the reason and the last SMTP reply
 * from feedback. Paged by recipient (contact id) with an opaque cursor; the CSV export walks
 * the same pages. Also: which recipients a retry resends (policy RECIPIENTS).
 */
import type { Db } from '../../shared/db/pool.js';
import { toIso } from '../../shared/clock.js';
import { badInput } from '../../shared/errors.js';
export { csvField } from '../../shared/csv.js';
import type { SendStatus } from '../sends/status.js';
import { RECIPIENT_STATE_OF, RECIPIENTS, type RecipientState } from './policy.js';

export interface RecipientRecord {
  contactId: string | null;
  email: string;
  status: RecipientState;
  reason: string | null;
  smtpResponse: string | null;
  updatedAt: string;
}

interface Row {
  rkey: string;
  id: string;
  contact_id: string | null;
  to_email: string;
  // The database holds only these (CHECK email_sends_status_check).
  status: SendStatus;
  error: string | null;
  updated_at: Date;
  detail: { bounce?: { type?: string; reason?: string; diagnostic?: string; status?: string }; suppression?: { reason?: string }; rejection?: { reason?: string }; complaint?: { feedbackType?: string | null }; delivery?: { smtpResponse?: string | null } } | null;
}

/** Send statuses shown as `state`. */
export const statusesOf = (state: RecipientState): string[] => Object.entries(RECIPIENT_STATE_OF).filter(([, s]) => s === state).map(([k]) => k);

/** The latest send per recipient of campaign $1 after cursor $2, with its latest lifecycle feedback. */
const LATEST = `
  WITH latest AS (
    SELECT DISTINCT ON (coalesce(e.contact_id, e.id)) coalesce(e.contact_id, e.id) AS rkey, e.id, e.contact_id, e.to_email, e.status, e.error, e.updated_at
      FROM email_sends e
     WHERE e.campaign_id = $1 AND coalesce(e.contact_id, e.id) > $2
     ORDER BY coalesce(e.contact_id, e.id), e.created_at DESC, e.id DESC
  )
  SELECT l.*, f.detail FROM latest l
  LEFT JOIN LATERAL (
    SELECT detail FROM feedback_events WHERE send_id = l.id AND kind = 'lifecycle' ORDER BY occurred_at DESC, id DESC LIMIT 1
  ) f ON true`;

function toRecord(r: Row): RecipientRecord {
  const status = RECIPIENT_STATE_OF[r.status];
  const d = r.detail ?? {};
  let reason: string | null = null;
  if (status === 'bounced' && d.bounce) reason = [d.bounce.type ? `${d.bounce.type} bounce` : null, d.bounce.reason].filter(Boolean).join(': ') || null;
  else if (status === 'failed') reason = r.error ?? d.rejection?.reason ?? null;
  else if (status === 'suppressed') reason = d.suppression?.reason ?? null;
  else if (r.status === 'complained') reason = 'complained';
  const smtpResponse = d.bounce?.diagnostic ?? d.delivery?.smtpResponse ?? null;
  return { contactId: r.contact_id, email: r.to_email, status, reason, smtpResponse, updatedAt: toIso(r.updated_at) };
}

export function encodeCursor(rkey: string): string {
  return Buffer.from(rkey).toString('base64url');
}

export function decodeCursor(cursor: string | undefined): string {
  if (cursor === undefined) return '';
  const v = Buffer.from(cursor, 'base64url').toString('utf8');
  if (!/^[a-z]{2,4}_[0-9a-z]{1,64}$/.test(v)) throw badInput('Invalid cursor', 'invalid_cursor');
  return v;
}

/** One page of the record; `next` is the cursor of the following page, null at the end. */
export async function recipientPage(
  db: Db,
  campaignId: string,
  opts: { status?: RecipientState; after: string; limit: number },
): Promise<{ rows: RecipientRecord[]; next: string | null }> {
  const args: unknown[] = [campaignId, opts.after, opts.limit + 1];
  let where = '';
  if (opts.status) {
    args.push(statusesOf(opts.status));
    where = `WHERE status = ANY ($4::text[])`;
  }
  const r = await db.query<Row>(`SELECT * FROM (${LATEST}) x ${where} ORDER BY rkey LIMIT $3`, args);
  const rows = r.rows.slice(0, opts.limit);
  const next = r.rows.length > opts.limit ? encodeCursor(rows[rows.length - 1]!.rkey) : null;
  return { rows: rows.map(toRecord), next };
}

/**
 * The sends a retry resends: each recipient's latest send when its status is in
 * RECIPIENTS.retryStatuses, or a soft bounce; only recipients still eligible now (member,
 * not unsubscribed, not suppressed). Runs inside the caller's transaction.
 */
export const RETRYABLE = `
  WITH latest AS (
    SELECT DISTINCT ON (coalesce(e.contact_id, e.id)) e.id, e.contact_id, e.to_email, e.status
      FROM email_sends e WHERE e.campaign_id = $1
     ORDER BY coalesce(e.contact_id, e.id), e.created_at DESC, e.id DESC
  )
  SELECT l.id, l.contact_id, l.to_email FROM latest l
   WHERE l.contact_id IS NOT NULL
     AND (l.status = ANY ($2::text[])
          OR ($3 AND l.status = 'bounced' AND (
                SELECT f.detail #>> '{bounce,type}' FROM feedback_events f
                 WHERE f.send_id = l.id AND f.kind = 'lifecycle' AND f.type = 'bounced' ORDER BY f.occurred_at DESC, f.id DESC LIMIT 1) = 'soft'))
     AND EXISTS (SELECT 1 FROM topic_memberships m WHERE m.topic_id = $4 AND m.contact_id = l.contact_id
                    AND m.unsubscribed_at IS NULL AND m.doi_status IN ('confirmed', 'not_required'))
     AND NOT EXISTS (SELECT 1 FROM suppressions s WHERE s.email = lower(l.to_email))
   ORDER BY l.contact_id`;

export const retryArgs = (campaignId: string, topicId: string) => [campaignId, [...RECIPIENTS.retryStatuses], RECIPIENTS.retrySoftBounces, topicId];
