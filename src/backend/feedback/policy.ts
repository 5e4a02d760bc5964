/**
 * Feedback policy as data: how provider vocabularies map into ours, which outcomes suppress
 * an address and which emit customer events. Operators tune here. How statuses order is the
 * sends' (../sends/status.ts → STATUS_RANK).
 */
import type { BounceReason } from '../../shared/mail/bounce/types.js';
import type { WebhookEventName } from '../webhooks/catalog.js';
import { LIFECYCLE_STATUSES, type LifecycleStatus, type SuppressionReason } from './lifecycle.js';

/**
 * Customer webhook event emitted for a lifecycle status (others emit none). `sent` emits
 * nothing here: `email.sent` is emitted by the hand-over itself (transactional send, campaign
 * fan-out) when the provider accepted the message, so a provider's later "sent" report (SES
 * `Send`, relay `sent`) only moves the status. The bundled MTA's `sent` means the receiving
 * server accepted the message and is translated to `delivered`.
 */
export const CUSTOMER_EVENT: Partial<Record<LifecycleStatus, WebhookEventName>> = {
  delivered: 'email.delivered',
  bounced: 'email.bounced',
  complained: 'email.complained',
};

/** Suppression reasons that put an address on the blocklist when a provider reports them. */
export const BLOCKLIST_SUPPRESSION_REASONS: ReadonlySet<SuppressionReason> = new Set(['hard_bounce', 'complaint', 'invalid_address']);

/**
 * Relay (provider D) suppression reasons → the closed vocabulary. Keys are the provider's
 * value lower-cased with runs of non-letters turned into `_`. Anything else is `unknown`.
 */
export const RELAY_SUPPRESSION_REASONS: Record<string, SuppressionReason> = {
  hard_bounce: 'hard_bounce',
  hardbounce: 'hard_bounce',
  bounce: 'hard_bounce',
  bounced: 'hard_bounce',
  permanent_bounce: 'hard_bounce',
  complaint: 'complaint',
  spam_complaint: 'complaint',
  spam_report: 'complaint',
  complained: 'complaint',
  abuse: 'complaint',
  fbl: 'complaint',
  unsubscribe: 'unsubscribed',
  unsubscribed: 'unsubscribed',
  list_unsubscribe: 'unsubscribed',
  opt_out: 'unsubscribed',
  invalid: 'invalid_address',
  invalid_address: 'invalid_address',
  invalid_recipient: 'invalid_address',
  invalid_email: 'invalid_address',
  syntax_error: 'invalid_address',
  manual: 'manual',
  manually_added: 'manual',
  admin: 'manual',
  policy: 'policy',
  blocked: 'policy',
  spam: 'policy',
  content: 'policy',
  role_address: 'policy',
};

/**
 * SES `bounceSubType` → Sisimai reason. Suppressed and OnAccountSuppressionList name no
 * reason (as Sisimai reads them): the diagnostic text decides, and SES's Permanent type the flag.
 */
export const SES_BOUNCE_SUBTYPES: Record<string, BounceReason> = {
  NoEmail: 'userunknown',
  MailboxFull: 'mailboxfull',
  MessageTooLarge: 'mesgtoobig',
  ContentRejected: 'contenterror',
  AttachmentRejected: 'contenterror',
};

/** Mandrill `bounce_description` → Sisimai reason. */
export const MANDRILL_BOUNCE_DESCRIPTIONS: Record<string, BounceReason> = {
  bad_mailbox: 'userunknown',
  invalid_domain: 'hostunknown',
  mailbox_full: 'mailboxfull',
  spam_related: 'spamdetected',
  policy_related: 'policyviolation',
  routing_failed: 'networkerror',
  invalid_content: 'contenterror',
  message_expired: 'expired',
  no_mx_record: 'hostunknown',
};

/** Statuses recorded in the contact's activity (accepted/attempted are provider plumbing). */
export const ACTIVITY_STATUSES: ReadonlySet<LifecycleStatus> = new Set(LIFECYCLE_STATUSES.filter((s) => s !== 'accepted' && s !== 'attempted'));

/**
 * Bytes of webhook bodies the backend receives at once, all inbound routes together
 * (src/shared/body-budget.ts), at least: 64 MiB leaves room for the providers while a flood of
 * forged signatures cannot buffer more than this. inboundBodyLimits raises it so that two
 * inbound messages of the MTA's largest size fit at once.
 */
export const WEBHOOK_BODY_BUDGET_BYTES = 64 * 1024 * 1024;

/** Bytes of base64 text for `n` bytes. */
const base64Size = (n: number) => Math.ceil(n / 3) * 4;

/**
 * Body limits of the MTA's two routes that carry inbound messages, from the MTA's inbound
 * size limit (INBOUND_MAX_MESSAGE_MB, 25 by default):
 * - `/webhooks/mta`: one message in base64 (`raw`), its parsed text and HTML (together no
 *   larger than the message) and 1 MiB for the rest of the JSON: about 59 MiB at 25 MB;
 * - `/webhooks/mta-mailbox`: one message in base64 and 64 KiB of JSON: about 34 MiB.
 * Only these routes are raised; Fastify refuses a larger declared body before reading it.
 * The body budget is raised with them so that two of the largest fit in it at once.
 */
export function inboundBodyLimits(maxMessageMb: number): { mta: number; mailbox: number; budget: number } {
  const message = maxMessageMb * 1024 * 1024;
  const mta = base64Size(message) + message + 1024 * 1024;
  return { mta, mailbox: base64Size(message) + 64 * 1024, budget: Math.max(WEBHOOK_BODY_BUDGET_BYTES, 2 * mta) };
}

/** The MTA's suppression-list reasons (its delivery log's `suppressed: <reason>`) → the closed vocabulary. */
export const MTA_SUPPRESSION_REASONS: Record<string, SuppressionReason> = {
  hard_bounce: 'hard_bounce',
  complaint: 'complaint',
  manual: 'manual',
};
