/**
 * The data of `email.*` events built from an `email_sends` row (REST API migration 010), in
 * one place for every emitter: the transactional send, the campaign fan-out and delivery
 * feedback all name an email the same way.
 */
import { toIso } from '../../shared/clock.js';
import type { EmailRef, EmailSentData } from './catalog.js';

const COLUMNS = ['id', 'message_id', 'to_email', 'from_email', 'subject', 'contact_id', 'type', 'campaign_id'] as const;

/** The email_sends columns an EmailRef is made of (SELECT or RETURNING list). */
export const EMAIL_REF_COLUMNS = COLUMNS.join(', ');

/** The same list qualified with a table alias (`e.id, e.message_id, ...`). */
export const emailRefColumns = (alias: string): string => COLUMNS.map((c) => `${alias}.${c}`).join(', ');

export interface EmailRefRow {
  id: string;
  message_id: string | null;
  to_email: string;
  from_email: string;
  subject: string;
  contact_id: string | null;
  type: 'campaign' | 'transactional';
  campaign_id: string | null;
}

export function emailRef(row: EmailRefRow): EmailRef {
  return {
    emailId: row.id,
    messageId: row.message_id,
    to: row.to_email,
    from: row.from_email,
    subject: row.subject,
    contactId: row.contact_id,
    type: row.type,
    campaignId: row.campaign_id,
  };
}

/** `email.sent`: the message was handed to the sending provider, which accepted it, at `sentAtMs`. */
export function emailSentData(row: EmailRefRow, sentAtMs: number): EmailSentData {
  return { ...emailRef(row), sentAt: toIso(sentAtMs) };
}
