/**
 * The narrow link between feedback and the REST API's tables (issue 3): which send an
 * event concerns, moving its status, and a contact's id by address. Everything the
 * pipeline knows about those tables' columns is in this file.
 */
import type { DbClient } from '../../shared/db/pool.js';
import type { EmailRef } from '../webhooks/catalog.js';
import { EMAIL_REF_COLUMNS, emailRef } from '../webhooks/email-events.js';
import type { LifecycleEvent, LifecycleStatus } from './lifecycle.js';
import { STATUS_RANK } from './policy.js';

export interface SendRef {
  id: string;
  to: string;
  contactId: string | null;
  status: string;
  /** How customer events name this email. */
  ref: EmailRef;
}

const SEND_COLUMNS = `${EMAIL_REF_COLUMNS}, status`;

function toRef(r: any): SendRef {
  return { id: r.id, to: r.to_email, contactId: r.contact_id, status: r.status, ref: emailRef(r) };
}

/**
 * The send by our id when the provider echoed it, otherwise by the provider's message id
 * (and the recipient, when one provider message went to several), otherwise by our id equal
 * to the provider message id (a caller may hand the MTA its send id as the job's messageId).
 * Locked for the update.
 */
export async function findSend(c: DbClient, ev: LifecycleEvent): Promise<SendRef | null> {
  // Named (prepared once per connection): one event per delivered message runs these.
  const byId = async (id: string) =>
    (await c.query({ name: 'lm_fb_send_by_id', text: `SELECT ${SEND_COLUMNS} FROM email_sends WHERE id = $1 FOR UPDATE`, values: [id] })).rows[0];
  if (ev.sendId) {
    const row = await byId(ev.sendId);
    if (row) return toRef(row);
  }
  if (ev.providerMessageId) {
    const r = await c.query({
      name: 'lm_fb_send_by_provider_id',
      text: `SELECT ${SEND_COLUMNS} FROM email_sends
              WHERE provider_message_id = $1 AND ($2::text IS NULL OR lower(to_email) = $2)
              ORDER BY id LIMIT 1 FOR UPDATE`,
      values: [ev.providerMessageId, ev.recipient],
    });
    if (r.rows[0]) return toRef(r.rows[0]);
    const row = await byId(ev.providerMessageId);
    if (row && (ev.recipient === null || row.to_email.toLowerCase() === ev.recipient)) return toRef(row);
  }
  return null;
}

/**
 * Moves the status forward only (STATUS_RANK): late or reordered feedback never regresses it.
 * True when the status changed.
 */
export async function moveSendStatus(c: DbClient, send: SendRef, status: LifecycleStatus, nowMs: number): Promise<boolean> {
  const current = STATUS_RANK[send.status as LifecycleStatus] ?? 0;
  if (send.status === status || STATUS_RANK[status] < current) return false;
  await c.query({ name: 'lm_fb_send_status', text: `UPDATE email_sends SET status = $2, updated_at = $3 WHERE id = $1`, values: [send.id, status, new Date(nowMs).toISOString()] });
  send.status = status;
  return true;
}

export async function findContactId(c: DbClient, email: string): Promise<string | null> {
  const r = await c.query<{ id: string }>({ name: 'lm_fb_contact_by_email', text: `SELECT id FROM contacts WHERE lower(email) = $1 LIMIT 1`, values: [email] });
  return r.rows[0]?.id ?? null;
}
