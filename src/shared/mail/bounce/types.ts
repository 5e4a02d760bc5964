/**
 * What the bounce and complaint parser gives the inbound SMTP server, `lettermill bounce
 * parse`, the delivery engine and the provider-webhook translations: one shape, one
 * vocabulary (Sisimai's reason names in lower case, decisions.md).
 */

export const BOUNCE_REASONS = [
  'userunknown', 'mailboxfull', 'expired', 'filtered', 'rejected', 'blocked', 'hostunknown', 'feedback',
  'authfailure', 'networkerror', 'suspend', 'policyviolation', 'requireptr', 'spamdetected', 'systemerror',
  'notaccept', 'securityerror', 'onhold', 'mailererror', 'notcompliantrfc', 'norelaying', 'hasmoved',
  'toomanyconn', 'vacation', 'delivered', 'exceedlimit', 'mesgtoobig', 'badreputation', 'contenterror',
  'virusdetected', 'syntaxerror', 'speeding', 'undefined', 'failedstarttls', 'systemfull',
] as const;

export type BounceReason = (typeof BOUNCE_REASONS)[number];

/** The verdict on one SMTP reply or one diagnostic text. */
export interface Classification {
  reason: BounceReason;
  /** True only for reasons after which the address itself can never receive mail. */
  hardBounce: boolean;
}

/** One recipient of a delivery-status report, a plain-text bounce, an auto-reply or an ARF report. */
export interface ReportRecipient {
  /** Final-Recipient (or Original-Recipient, or the address read from the text), lower-cased; null when none. */
  recipient: string | null;
  /** Enhanced status code, e.g. "5.1.1"; null when none. */
  status: string | null;
  /** Basic SMTP reply code, e.g. 550; null when none. */
  replyCode: number | null;
  /** RFC 3464 Action (failed, delayed, delivered, relayed, expanded), lower case; null when none. */
  action: string | null;
  remoteMta: string | null;
  /** Diagnostic text (Diagnostic-Code without its type, or the prose of a plain-text bounce). */
  diagnostic: string | null;
  reason: BounceReason;
  hardBounce: boolean;
}

export type ReportKind = 'dsn' | 'arf' | 'autoreply' | 'unknown';

export interface ParsedReport {
  kind: ReportKind;
  /** ARF Feedback-Type (abuse, fraud, virus, other, not-spam, …), lower case; null for non-ARF. */
  feedbackType: string | null;
  /** ARF fields (RFC 5965); all null for non-ARF. */
  feedback: {
    userAgent: string | null;
    originalMailFrom: string | null;
    originalRcptTo: string | null;
    arrivalDate: string | null;
    reportedDomain: string | null;
  };
  /**
   * The returned original message's envelope sender as far as the report shows it: ARF
   * Original-Mail-From, else the Return-Path of the returned headers. Used for the VERP scrape.
   */
  originalMailFrom: string | null;
  /** `CFBL-Feedback-ID` of the returned original headers (RFC 9477), unfolded; null when absent. */
  cfblFeedbackId: string | null;
  /** Message-ID of the returned original, without angle brackets; null when absent. */
  originalMessageId: string | null;
  /** One entry per recipient; a report with no readable recipient still gives one entry with recipient null. */
  recipients: ReportRecipient[];
}
