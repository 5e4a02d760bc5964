/**
 * The hand-over transitions of `email_sends`, for one send or a batch (one statement each):
 * `sending` → `accepted` when the provider took the message, `sending` → `failed` when it
 * refused, and a failed or abandoned send taken back to `sending` for a retry under its
 * Idempotency-Key. The transactional API (api/sending/send.ts) and the campaign fan-out
 * (campaigns/fanout.ts) both go through here; feedback moves statuses in ./feedback.ts.
 * No other module writes `UPDATE email_sends` (test/architecture.test.ts).
 *
 * `email.sent` is written in the hand-over's own transaction (EventBus.emitIn), so a crash
 * after the commit cannot lose it and a retried hand-over cannot emit it twice.
 */
import { toIso } from '../../shared/clock.js';
import { tx, type Db, type DbClient, type Queryable } from '../../shared/db/pool.js';
import type { EventBus } from '../events.js';
import { emailRefColumns, emailSentData, type EmailRefRow } from '../webhooks/email-events.js';
import { INITIAL_SEND_STATUS } from './status.js';

export interface HandOff {
  id: string;
  /** The provider's id for the message (what its feedback names); null: our send id. */
  providerMessageId: string | null;
  /** RFC 5322 Message-ID, when the provider tells. */
  messageId?: string | null;
}

/**
 * Records accepted hand-overs and emits `email.sent` for each send's first one, in one
 * transaction. "First" is "provider_message_id was still NULL": a recorded hand-over always
 * leaves it set (the send id when the provider names none), and feedback never writes it.
 * Unlike the status, this also holds when delivery feedback overtook the hand-over's record,
 * and when a send that was accepted and later failed is attempted again. Rows are locked in id
 * order, so concurrent batches cannot deadlock. `also` runs in the same transaction (the
 * fan-out's cursor).
 */
export async function recordHandOffs(
  db: Db,
  events: Pick<EventBus, 'emitIn'> | undefined,
  items: HandOff[],
  at: number,
  also?: (c: DbClient) => Promise<void>,
): Promise<void> {
  const committed = await tx(db, async (c) => {
    let firsts: EmailRefRow[] = [];
    if (items.length > 0) {
      const r = await c.query<EmailRefRow & { first: boolean }>({
        name: 'lm_sends_handed_over',
        text: `WITH t AS (SELECT * FROM unnest($1::text[], $3::text[], $4::text[]) AS t(id, pid, mid)),
               prior AS (SELECT e.id, e.provider_message_id FROM email_sends e JOIN t ON t.id = e.id
                          WHERE e.status = '${INITIAL_SEND_STATUS}' OR e.provider_message_id IS NULL ORDER BY e.id FOR UPDATE OF e)
               UPDATE email_sends e
                  SET status = CASE WHEN e.status = '${INITIAL_SEND_STATUS}' THEN 'accepted' ELSE e.status END,
                      provider_message_id = coalesce(t.pid, e.id), message_id = coalesce(t.mid, e.message_id), updated_at = $2
                 FROM t, prior p WHERE e.id = t.id AND p.id = e.id
               RETURNING ${emailRefColumns('e')}, p.provider_message_id IS NULL AS first`,
        values: [items.map((i) => i.id), toIso(at), items.map((i) => i.providerMessageId), items.map((i) => i.messageId ?? null)],
      });
      firsts = r.rows.filter((row) => row.first);
    }
    await also?.(c);
    return events ? events.emitIn(c, firsts.map((row) => ({ name: 'email.sent' as const, data: emailSentData(row, at) })), at) : () => {};
  });
  committed();
}

/** `sending` → `failed` with the provider's reason (a send already moved on is left alone). */
export async function recordFailures(db: Queryable, items: { id: string; error: string }[], at: number): Promise<void> {
  if (items.length === 0) return;
  await db.query({
    name: 'lm_sends_failed',
    text: `UPDATE email_sends e SET status = 'failed', error = t.err, updated_at = $2
             FROM unnest($1::text[], $3::text[]) AS t(id, err) WHERE e.id = t.id AND e.status = '${INITIAL_SEND_STATUS}'`,
    values: [items.map((i) => i.id), toIso(at), items.map((i) => i.error.slice(0, 1000))],
  });
}

/**
 * Takes a failed or abandoned send back to `sending` for another attempt under its
 * Idempotency-Key; false when another request got there first (its status or updated_at moved).
 */
export async function retakeSend(db: Queryable, s: { id: string; status: string; updatedAt: Date; provider: string }, at: number): Promise<boolean> {
  const r = await db.query(
    `UPDATE email_sends SET status = '${INITIAL_SEND_STATUS}', error = NULL, provider = $3, updated_at = $4
      WHERE id = $1 AND status = $2 AND updated_at = $5`,
    [s.id, s.status, s.provider, new Date(at), s.updatedAt],
  );
  return r.rowCount === 1;
}
