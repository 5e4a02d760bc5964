/**
 * Feedback's transitions of email_sends (the sends module; hand-overs are ./handoff.ts): which sends a batch
 * of events concerns, moving their status, and contacts' ids by address. Everything the
 * pipeline knows about those tables' columns is in this file. Every function takes a whole
 * batch and runs one statement, whatever its size: the MTA reports every delivered message.
 */
import type { DbClient } from '../../shared/db/pool.js';
import type { EmailRef } from '../webhooks/catalog.js';
import { EMAIL_REF_COLUMNS, emailRef } from '../webhooks/email-events.js';
import { STATUS_RANK, type LifecycleStatus, type SendStatus } from './status.js';

/** What a feedback event tells of the send it concerns (feedback/lifecycle.ts → LifecycleEvent has these). */
export interface SendClue {
  sendId: string | null;
  providerMessageId: string | null;
  recipient: string | null;
  organizationId?: string | null;
}

export interface SendRef {
  id: string;
  to: string;
  contactId: string | null;
  /** The status as this batch has moved it so far. */
  status: string;
  /** The status the row holds in the database. */
  stored: string;
  /** How customer events name this email. */
  ref: EmailRef;
}

const SEND_COLUMNS = `${EMAIL_REF_COLUMNS}, provider_message_id, status`;

/**
 * For each event, the send it concerns (same position; null when unknown): by our id when the
 * provider echoed it, otherwise by the provider's message id (and the recipient, when one
 * provider message went to several; the lowest id wins), otherwise by our id equal to the
 * provider message id (a caller may hand the MTA its send id as the job's messageId).
 * An event naming an organization other than `organizationId` (this backend's) concerns none:
 * another organization sending through the same MTA may use the same message id.
 * Candidates are read and locked in one statement, in id order, so two batches touching the
 * same sends cannot deadlock. Events naming the same send share one SendRef, so the batch
 * moves its status in event order.
 */
export async function findSends(c: DbClient, events: SendClue[], organizationId?: string): Promise<(SendRef | null)[]> {
  const ids = new Set<string>();
  const providerIds = new Set<string>();
  const foreign = (ev: SendClue) => organizationId !== undefined && ev.organizationId != null && ev.organizationId !== organizationId;
  for (const ev of events) {
    if (foreign(ev)) continue;
    if (ev.sendId) ids.add(ev.sendId);
    if (ev.providerMessageId) {
      ids.add(ev.providerMessageId);
      providerIds.add(ev.providerMessageId);
    }
  }
  if (ids.size === 0) return events.map(() => null);
  const r = await c.query({
    // Named (prepared once per connection): every MTA event batch runs it.
    name: 'lm_fb_sends_for_events',
    text: `SELECT ${SEND_COLUMNS} FROM email_sends
            WHERE id = ANY ($1::text[]) OR (provider_message_id = ANY ($2::text[]) AND provider_message_id IS NOT NULL)
            ORDER BY id FOR UPDATE`,
    values: [[...ids], [...providerIds]],
  });
  const byId = new Map<string, SendRef>();
  const byProvider = new Map<string, SendRef[]>();
  for (const row of r.rows) {
    const ref: SendRef = { id: row.id, to: row.to_email, contactId: row.contact_id, status: row.status, stored: row.status, ref: emailRef(row) };
    byId.set(ref.id, ref);
    if (row.provider_message_id !== null) {
      const list = byProvider.get(row.provider_message_id) ?? [];
      list.push(ref); // rows come in id order: the first match is the lowest id
      byProvider.set(row.provider_message_id, list);
    }
  }
  const forRecipient = (s: SendRef | undefined, recipient: string | null) => (s && (recipient === null || s.to.toLowerCase() === recipient) ? s : null);
  return events.map((ev) => {
    if (foreign(ev)) return null;
    if (ev.sendId && byId.has(ev.sendId)) return byId.get(ev.sendId)!;
    if (!ev.providerMessageId) return null;
    const viaProvider = byProvider.get(ev.providerMessageId)?.find((s) => forRecipient(s, ev.recipient));
    return viaProvider ?? forRecipient(byId.get(ev.providerMessageId), ev.recipient);
  });
}

/**
 * Moves the send's in-memory status forward only (STATUS_RANK): late or reordered feedback
 * never regresses it. True when the status changed; saveSendStatuses writes the results.
 */
export function moveSendStatus(send: SendRef, status: LifecycleStatus): boolean {
  const current = STATUS_RANK[send.status as SendStatus] ?? 0;
  if (send.status === status || STATUS_RANK[status] < current) return false;
  send.status = status;
  return true;
}

/** Writes the statuses of the sends whose status the batch moved (one statement). */
export async function saveSendStatuses(c: DbClient, sends: Iterable<SendRef>, nowMs: number): Promise<void> {
  const moved = [...sends].filter((s) => s.status !== s.stored);
  if (moved.length === 0) return;
  await c.query({
    name: 'lm_fb_send_statuses',
    text: `UPDATE email_sends e SET status = u.status, updated_at = $3
             FROM unnest($1::text[], $2::text[]) AS u(id, status) WHERE e.id = u.id`,
    values: [moved.map((s) => s.id), moved.map((s) => s.status), new Date(nowMs).toISOString()],
  });
  for (const s of moved) s.stored = s.status;
}

/** Contact ids by lower-cased address (one statement; `lower(email)` is unique). */
export async function findContactIds(c: DbClient, emails: Iterable<string>): Promise<Map<string, string>> {
  const list = [...new Set(emails)];
  const out = new Map<string, string>();
  if (list.length === 0) return out;
  const r = await c.query<{ email: string; id: string }>({
    name: 'lm_fb_contacts_by_email',
    text: `SELECT lower(email) AS email, id FROM contacts WHERE lower(email) = ANY ($1::text[])`,
    values: [list],
  });
  for (const row of r.rows) out.set(row.email, row.id);
  return out;
}

export interface RepliedSend {
  id: string;
  contactId: string | null;
  campaignId: string | null;
  /** The msg-id (lower-cased) that matched. */
  messageId: string;
}

/**
 * The send a reply answers: the first of `messageIds` (in the caller's order of preference)
 * that is one of our recorded Message-IDs (email_sends.message_id, written at hand-over).
 */
export async function findRepliedSend(c: DbClient, messageIds: string[]): Promise<RepliedSend | null> {
  const keys = [...new Set(messageIds.map((m) => m.toLowerCase()))];
  if (keys.length === 0) return null;
  const r = await c.query<{ id: string; contact_id: string | null; campaign_id: string | null; mid: string }>({
    name: 'lm_sends_by_message_id',
    text: `SELECT id, contact_id, campaign_id, lower(message_id) AS mid FROM email_sends
            WHERE lower(message_id) = ANY ($1::text[]) AND message_id IS NOT NULL ORDER BY id`,
    values: [keys],
  });
  for (const k of keys) {
    const row = r.rows.find((x) => x.mid === k);
    if (row) return { id: row.id, contactId: row.contact_id, campaignId: row.campaign_id, messageId: k };
  }
  return null;
}
