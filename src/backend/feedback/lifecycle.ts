/**
 * The one normalized delivery lifecycle every feedback source is translated into. Routes
 * verify and translate; only the pipeline (pipeline.ts) applies effects.
 */

export const FEEDBACK_SOURCES = ['mta', 'ses', 'resend', 'mandrill', 'relay'] as const;
export type FeedbackSource = (typeof FEEDBACK_SOURCES)[number];

// The statuses are the sends' (email_sends holds them); their one list is there.
export { LIFECYCLE_STATUSES, type LifecycleStatus } from '../sends/status.js';
import type { LifecycleStatus } from '../sends/status.js';

/**
 * Closed, recipient-safe vocabulary of suppression reasons: words that may be shown to a
 * customer or the recipient (preference page, API) without leaking a provider's internals,
 * another sender's data or raw SMTP text. Provider strings map into it in policy.ts.
 */
export const SUPPRESSION_REASONS = [
  'hard_bounce',
  'complaint',
  'unsubscribed',
  'invalid_address',
  'manual',
  'policy',
  'unknown',
] as const;
export type SuppressionReason = (typeof SUPPRESSION_REASONS)[number];

export interface BounceInfo {
  type: 'hard' | 'soft';
  /** Sisimai vocabulary, lower case (userunknown, mailboxfull, ...); `undefined` when unknown. */
  reason: string;
  /** Provider or SMTP text, truncated; for operators, never sent to recipients. */
  diagnostic?: string;
  /** Enhanced status code (RFC 3463) when the source states it. */
  status?: string;
}

export interface LifecycleEvent {
  kind: 'lifecycle';
  source: FeedbackSource;
  /** Provider event id: the de-duplication key together with `source`. */
  eventId: string;
  status: LifecycleStatus;
  /** Lower-cased address, when the event concerns one recipient. */
  recipient: string | null;
  /** The provider's id of the message (what the send recorded when it was handed over). */
  providerMessageId: string | null;
  /** Our send id when the provider echoes it back (metadata, tags, headers). */
  sendId: string | null;
  /**
   * The organization the message was sent for, when the source says (the bundled MTA, which
   * serves several): message ids are unique only within one, so an event naming another
   * organization than this backend's is about none of its sends.
   */
  organizationId?: string | null;
  /** When the provider says it happened (ms). */
  occurredAt: number;
  bounce?: BounceInfo;
  complaint?: { feedbackType: string | null };
  /** A delivery's final SMTP reply from the receiving server (e.g. "250 2.0.0 OK"), when the source passes it on. */
  delivery?: { smtpResponse: string | null };
  suppression?: { reason: SuppressionReason };
  /** Why the sender's side refused the message (e.g. the MTA's content screening), for operators. */
  rejection?: { reason: string };
}

import type { MtaOperationalEventName } from '../../shared/contracts/mta.js';
export { MTA_OPERATIONAL_EVENTS, type MtaOperationalEventName } from '../../shared/contracts/mta.js';

export interface InboundMessage {
  messageId: string | null;
  from: string;
  to: string[];
  subject: string;
  text: string | null;
  html: string | null;
  inReplyTo: string | null;
  references: string[];
  receivedAt: number;
  /** The route that took it (`{ domain, address }`), when the MTA names it. */
  route: Record<string, unknown> | null;
  /** Attachments as the MTA described them (filename, contentType, size, contentId); bytes stay in `raw`. */
  attachments: Record<string, unknown>[];
  /** The MTA's SPF, DKIM and DMARC results and the Authentication-Results header it wrote. */
  authentication: Record<string, unknown> | null;
  /** Size of the message as received (bytes). */
  rawSize: number | null;
  /** The message as received, when the MTA sent it. */
  raw: Buffer | null;
  /** Everything else the MTA sent (fields this backend does not know yet). */
  extra: Record<string, unknown>;
}

export interface InboundEvent {
  kind: 'inbound';
  source: 'mta';
  eventId: string;
  occurredAt: number;
  message: InboundMessage;
}

export interface OperationalEvent {
  kind: 'operational';
  source: 'mta';
  eventId: string;
  event: MtaOperationalEventName;
  severity: 'info' | 'warning' | 'critical';
  occurredAt: number;
  organizationId: string | null;
  ip: string | null;
  data: Record<string, unknown>;
}

export type FeedbackEvent = LifecycleEvent | InboundEvent | OperationalEvent;

/**
 * What a translator returns: events to apply, or a reason the request was acknowledged
 * without effect (Resend's ignored types, Mandrill's validation ping).
 */
export type Translation = { events: FeedbackEvent[]; ignored?: undefined } | { events: []; ignored: string };

/** A verified request whose content is unusable: 400 in the envelope, nothing applied. */
export class FeedbackFormatError extends Error {
  override name = 'FeedbackFormatError';
}
