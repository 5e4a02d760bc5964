/**
 * The eight customer-facing events and the shape of each one's `data` (docs/webhooks.md has
 * an example of each and the operation that emits it). Emitters are type-checked against
 * WebhookEventMap through the backend's EventBus.
 *
 * Conventions: camelCase like the REST API; ids are the API's ids; times are ISO 8601 UTC
 * with milliseconds; a field that does not apply is null, never absent.
 */

export const WEBHOOK_EVENTS = [
  'email.sent',
  'email.delivered',
  'email.opened',
  'email.clicked',
  'email.bounced',
  'email.complained',
  'contact.created',
  'topic.unsubscribed',
] as const;

export type WebhookEventName = (typeof WEBHOOK_EVENTS)[number];

export function isWebhookEvent(name: string): name is WebhookEventName {
  return (WEBHOOK_EVENTS as readonly string[]).includes(name);
}

/** Fields every email.* event carries: which email, to whom, from which campaign. */
export interface EmailRef {
  /** The email send's id (the `:emailSendId` of tracking links). */
  emailId: string;
  /** RFC 5322 Message-ID, when assigned. */
  messageId: string | null;
  to: string;
  from: string;
  subject: string;
  contactId: string | null;
  /** 'campaign' for campaign sends, 'transactional' for /api/v1/transactional. */
  type: 'campaign' | 'transactional';
  campaignId: string | null;
}

export interface EmailSentData extends EmailRef {
  sentAt: string;
}

export interface EmailDeliveredData extends EmailRef {
  deliveredAt: string;
  /** The receiving server's final SMTP reply, when known (e.g. "250 2.0.0 OK"). */
  smtpResponse: string | null;
}

export interface EmailOpenedData extends EmailRef {
  openedAt: string;
  userAgent: string | null;
}

export interface EmailClickedData extends EmailRef {
  clickedAt: string;
  /** The link's destination. */
  url: string;
  userAgent: string | null;
}

export interface EmailBouncedData extends EmailRef {
  bouncedAt: string;
  bounce: {
    /** hard: the address will not accept mail (it is suppressed); soft: a temporary refusal that exhausted retries. */
    type: 'hard' | 'soft';
    /** Sisimai vocabulary: userunknown, mailboxfull, hostunknown, filtered, rejected, blocked, expired, spamdetected, speeding, ... (src/shared/mail/bounce/types.ts) */
    reason: string;
    /** Enhanced status code (RFC 3463), e.g. "5.1.1". */
    status: string | null;
    /** The remote server's diagnostic text. */
    diagnostic: string | null;
  };
}

export interface EmailComplainedData extends EmailRef {
  complainedAt: string;
  /** ARF feedback type (abuse, fraud, virus, other, ...) when the report says. */
  feedbackType: string | null;
}

/** The contact as the REST API returns it, plus where it came from. */
export interface ContactCreatedData {
  id: string;
  email: string;
  firstName: string | null;
  lastName: string | null;
  /** `api` or `form` (decisions.md). */
  source: string;
  /** The form it signed up through (source `form`). */
  formId: string | null;
  createdAt: string;
  updatedAt: string;
}

export interface TopicUnsubscribedData {
  contactId: string;
  email: string;
  topicId: string;
  topicName: string;
  /** How: one_click (RFC 8058 POST), unsubscribe_page, preference_center, api. */
  source: 'one_click' | 'unsubscribe_page' | 'preference_center' | 'api';
  /** The email whose link was used, when there was one. */
  emailId: string | null;
  campaignId: string | null;
  unsubscribedAt: string;
}

export interface WebhookEventMap {
  'email.sent': EmailSentData;
  'email.delivered': EmailDeliveredData;
  'email.opened': EmailOpenedData;
  'email.clicked': EmailClickedData;
  'email.bounced': EmailBouncedData;
  'email.complained': EmailComplainedData;
  'contact.created': ContactCreatedData;
  'topic.unsubscribed': TopicUnsubscribedData;
}
