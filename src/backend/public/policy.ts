/**
 * Operator-tunable policy of the public endpoints, in one place: rate limits, token
 * lifetimes, form limits, machine-traffic heuristics. Documented in docs/public-endpoints.md.
 */

/** A token bucket: up to `burst` requests at once, refilled at `perMinute`. */
export interface RateRule {
  burst: number;
  perMinute: number;
}

/**
 * Public rate limits. `ip` rules are keyed on the client address, `token` rules on address
 * plus (a hash of) the token in the path, as the spec asks for archive, share and unsubscribe.
 * Token routes pass both their `token` rule and the `publicIp` rule, so trying many tokens
 * from one address is bounded too.
 */
export const RATE_LIMITS = {
  /** Open pixel and click redirect, per IP. High: image proxies and office NATs put many readers on one address. */
  tracking: { burst: 2_000, perMinute: 60_000 },
  /** Every other public route and page, per IP (token lookups, pages, DOI, preferences). */
  publicIp: { burst: 60, perMinute: 300 },
  /** `/archive/:token`, per IP + token (a reader may reload; the response is cacheable). */
  archive: { burst: 20, perMinute: 60 },
  /** `/share/:token`, per IP + token. */
  share: { burst: 20, perMinute: 60 },
  /** `/unsub/...`, per IP + token (verify, one-click POST, page). */
  unsubscribe: { burst: 10, perMinute: 30 },
  /** `GET /api/v1/health`, per IP: a load balancer or monitor polls every second or so. */
  health: { burst: 60, perMinute: 600 },
  /** `POST /forms/:formId`, per IP: a sign-up form needs a handful per minute, a bot needs thousands. */
  forms: { burst: 10, perMinute: 20 },
} as const satisfies Record<string, RateRule>;

export type RateRuleName = keyof typeof RATE_LIMITS;

/** Lifetimes of the signed tokens in emails (ms). */
export const TOKEN_TTL = {
  /** Unsubscribe links keep working long after the send (CAN-SPAM asks for 30 days; old mail gets read). */
  unsubscribe: 400 * 24 * 3600_000,
  /** Preference-center links: as long as unsubscribe links. */
  preferences: 400 * 24 * 3600_000,
  /** Double opt-in confirmation links. */
  doubleOptIn: 7 * 24 * 3600_000,
} as const;

/** Share links expire this long after creation (spec: 48 hours). */
export const SHARE_LINK_TTL_MS = 48 * 3600_000;

/** Form endpoint limits. */
export const FORM_LIMITS = {
  /** Spec: a body over 100 KB is refused with 400. */
  maxBodyBytes: 100 * 1024,
  maxFields: 50,
  maxFieldNameLength: 64,
  maxFieldValueLength: 2_000,
  /** Honeypot field name when a form does not configure one. */
  defaultHoneypotField: '_hp',
} as const;

/** Tracking recorder: how writes are batched. */
export const TRACKING_FLUSH = {
  /** Buffered hits are written at least this often. */
  intervalMs: 1_000,
  /** ...or as soon as this many distinct sends/clicks are buffered. */
  maxBuffered: 50_000,
} as const;

/** Timing heuristics for machine clicks (link scanners follow every link within seconds). */
export const MACHINE_TIMING = {
  /** A click this soon after the message was handed to the provider is a scanner. */
  clickAfterSendMs: 10_000,
  /** A click on a different link of the same message this soon after the previous click. */
  clickBurstMs: 2_000,
} as const;

/**
 * Machine traffic, by User-Agent. Matches are recorded and flagged, never dropped.
 * - Apple Mail Privacy Protection fetches every image at delivery with the bare `Mozilla/5.0`.
 * - Image proxies (Gmail, Yahoo) fetch when the reader opens the message: a real open whose
 *   reader and device are hidden; flagged as `proxy`, still counted for engagement.
 * - Security scanners and link previewers follow links nobody clicked.
 */
export const MACHINE_UA = {
  appleMpp: /^Mozilla\/5\.0$/,
  imageProxy: /GoogleImageProxy|ggpht\.com|YahooMailProxy|\bFront\/|Superhuman/i,
  scanner:
    /barracuda|mimecast|proofpoint|symantec|messagelabs|trend ?micro|fortiguard|ironport|cisco|forcepoint|sophos|zscaler|safelinks|microsoft url|mcafee|kaspersky|bitdefender|checkpoint|appriver|spamtitan|vade|cloudmark|hornetsecurity|agari/i,
  bot: /bot\b|bot\/|crawler|spider|scanner|preview|python-requests|python-urllib|aiohttp|curl\/|wget|go-http-client|java\/|okhttp|libwww|httpclient|headless|phantomjs|node-fetch|axios|facebookexternalhit|slackbot|whatsapp|skypeuripreview|discordbot|linkexpanding/i,
} as const;
