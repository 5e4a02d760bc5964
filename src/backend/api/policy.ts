/**
 * Operator-tunable limits of the REST API, in one place. Values fixed by the spec are marked.
 */
export const API_RATE_LIMIT = {
  /** Spec: burst of up to 15 requests before throttling. */
  capacity: 15,
  /** Spec: 10 requests per second sustained (also the X-RateLimit-Limit value). */
  refillPerSecond: 10,
} as const;

export const CONTACT_LIST = {
  /** Spec: default 25, max 100. A larger limit is refused with 400, never clamped silently. */
  defaultLimit: 25,
  maxLimit: 100,
  /** A cursor walks a result now; it is not a bookmark. After this it answers 400. */
  cursorTtlMs: 24 * 60 * 60 * 1000,
  /** Longest `search` accepted (characters, after trimming). */
  searchMaxLength: 200,
  /** Substring (trigram) matching needs at least this many characters; shorter terms match words only. */
  substringMinLength: 3,
  /** At most this many words of a search term are used. */
  searchMaxWords: 8,
} as const;

export const DOUBLE_OPT_IN = {
  /** How long a confirmation link stays valid. */
  tokenTtlMs: 7 * 24 * 60 * 60 * 1000,
  /** Adding a pending member again re-sends the confirmation at most this often. */
  resendAfterMs: 10 * 60 * 1000,
} as const;

export const API_KEYS = {
  /** last_used_at is written at most this often per key (it is a hint, not an audit log). */
  lastUsedResolutionMs: 60_000,
} as const;

export const EVENTS = {
  maxProperties: 100,
  maxPropertyKeyLength: 100,
  maxStringValueLength: 2_000,
  maxNameLength: 100,
} as const;

export const TRANSACTIONAL = {
  maxSubjectLength: 998,
  /** Same bound as the MTA's content screening default (CONTENT_MAX_SIZE_KB = 500). */
  maxHtmlBytes: 500 * 1024,
  maxTextBytes: 500 * 1024,
  maxHeaders: 50,
  maxVariables: 100,
  /** A request still `sending` after this long is taken as crashed and may be retried. */
  staleSendingMs: 60_000,
  /** Time allowed for a provider API call. */
  providerTimeoutMs: 15_000,
} as const;

/**
 * Calls to the providers' HTTP APIs (SES, Resend, Mandrill). 429 and 5xx answers are tried
 * again, after the provider's Retry-After when it gives one, else after a doubling pause; the
 * whole call, pauses included, stays within the caller's timeout.
 */
export const PROVIDER_API = {
  /** Tries per message, the first included. */
  attempts: 4,
  firstBackoffMs: 200,
  maxBackoffMs: 5_000,
  /** A Retry-After longer than this is not waited for: the send fails as retryable. */
  maxRetryAfterMs: 10_000,
  /** Characters of a provider's answer kept in an error message. */
  reasonChars: 300,
  /** Mandrill answers every error with HTTP 500; these names are refusals, not outages. */
  mandrillPermanentErrors: ['Invalid_Key', 'ValidationError', 'PaymentRequired', 'Unknown_Subaccount', 'Unknown_Template', 'Invalid_Reject'],
} as const;

/** Idempotency-Key header: length and characters (same as Stripe/Resend practice). */
export const IDEMPOTENCY_KEY = /^[\x21-\x7e]{1,255}$/;

/** CSV contact import and export (admin API, docs/dashboard.md "CSV import"). */
export const CONTACT_IMPORT = {
  /** Largest upload accepted (bytes); beyond it the upload is refused with 413. */
  maxBytes: 200 * 1024 * 1024,
  /** Rows per INSERT statement (one round trip each; measured: 5,000 is past the knee). */
  batchRows: 5_000,
  /** Rejected rows listed in the import's report; the count goes on beyond. */
  maxErrors: 1_000,
  /** Longest field accepted (characters): a name or an address, not a document. */
  maxFieldLength: 1_000,
  /** Rows per page of the streamed export. */
  exportPage: 5_000,
  /**
   * A running import whose progress has not moved for this long belongs to a process that is
   * gone (progress is written every batchRows rows, well under a second apart): it is marked
   * failed. Another instance's import in progress is left alone.
   */
  staleAfterMs: 5 * 60_000,
} as const;
