/**
 * Reads an SMTP reply into a DeliveryResult: 2xx sent, 4xx deferred, 5xx bounced; the reason
 * uses Sisimai's vocabulary, and `hard` (suppression) is set only for reasons that say the
 * address itself can never receive mail. The rules are data (REASON_RULES), tried in order:
 * the first whose enhanced code and/or text matches wins; a reply no rule matches falls back
 * to its enhanced code's subject class.
 */
import type { DeliveryResult } from './types.js';

/** Reasons after which the address is suppressed. */
export const HARD_REASONS: ReadonlySet<string> = new Set(['userunknown', 'hostunknown', 'hasmoved', 'notaccept']);

interface ReasonRule {
  reason: string;
  /** Enhanced status codes (without class digit: "1.1" matches 4.1.1 and 5.1.1) or prefixes ending in ".". */
  codes?: string[];
  text?: RegExp;
}

/**
 * Text beats code where receivers are known to overload one code (5.7.1 means relay denied,
 * blocklisted IP, spam content or policy depending on the server).
 */
export const REASON_RULES: readonly ReasonRule[] = [
  { reason: 'ratelimited', codes: ['7.28'], text: /rate limit|too many (messages|emails|mails|recipients)|sending rate|try again later.{0,40}volume|throttl|unusual rate|TS03|TSS04|RP-00[0-9]|exceeded (the )?(message|sending|hourly|daily) (rate|limit|quota)/i },
  { reason: 'toomanyconn', text: /too many (connections|concurrent|sessions)|connection (rate|limit)|concurrency limit/i },
  { reason: 'spamdetected', text: /\bspam\b|\bjunk\b|unsolicited|bulk mail|content (rejected|filter)|message (content )?(was )?(rejected|blocked) (due to|as) (content|spam)|UCE\b/i },
  { reason: 'virusdetected', text: /virus|malware|infected/i },
  { reason: 'blocked', text: /block ?list|blacklist|listed (at|on|in|by)|spamhaus|barracuda|spamcop|\brbl\b|dnsbl|poor reputation|bad reputation|ip (address )?(is )?(blocked|banned|denied|rejected)|client host .* blocked|reverse dns|ptr record|no rdns|not have a reverse|connection refused by policy/i },
  { reason: 'authfailure', codes: ['7.23', '7.24', '7.25', '7.26', '7.27'], text: /\bdmarc\b|\bspf\b|dkim.{0,20}(fail|invalid)|not (properly )?authenticated|unauthenticated/i },
  { reason: 'norelaying', text: /relay(ing)? (access )?(denied|not permitted|prohibited)|not permitted to relay|unable to relay/i },
  { reason: 'hasmoved', codes: ['1.6'], text: /has moved|no longer (at|with) this address/i },
  { reason: 'notaccept', codes: ['1.10'], text: /null mx|does not accept (any )?mail|accepts no mail/i },
  { reason: 'hostunknown', codes: ['1.2'], text: /host (or domain name )?(not found|unknown)|domain (not found|does not exist)|unrouteable address|no such domain|unknown host|nxdomain/i },
  { reason: 'mailboxfull', codes: ['2.2'], text: /mailbox (is )?full|over ?quota|quota exceeded|insufficient (storage|space)|mailbox size limit|exceeded storage/i },
  { reason: 'emailtoolarge', codes: ['3.4', '2.3'], text: /message (size )?(is )?too (big|large)|size (limit )?exceeded|exceeds (the )?(maximum|size)/i },
  { reason: 'userunknown', codes: ['1.1', '1.0', '1.3'], text: /user unknown|unknown user|no such (user|mailbox|recipient|address)|(user|mailbox|recipient|address|account) (does not|doesn't) exist|(mailbox|recipient|address) (not found|unavailable|invalid)|invalid (mailbox|recipient)|unknown (recipient|mailbox|local part)|recipient (rejected|address rejected)|undeliverable address|not a valid (mailbox|recipient)/i },
  { reason: 'suspend', codes: ['2.1'], text: /(mailbox|account) (is )?(disabled|suspended|inactive|not active|deactivated|locked)/i },
  { reason: 'rejected', codes: ['1.7', '1.8'], text: /sender (address )?(rejected|denied|unknown|verify failed)|domain of sender|sender domain/i },
  { reason: 'securityerror', codes: ['7.0', '7.8', '7.9', '7.11', '7.13', '7.14'], text: /authentication required|must (issue a )?starttls|tls required|encryption required/i },
  { reason: 'policyviolation', codes: ['7.'], text: /policy|prohibited|not allowed|denied/i },
  { reason: 'contenterror', codes: ['6.'], text: /content|header|mime|8bit|smtputf8/i },
  { reason: 'syntaxerror', codes: ['5.'], text: /syntax|command unrecognized|bad sequence/i },
  { reason: 'systemerror', codes: ['3.', '4.'], text: /system|local error|internal error|temporary failure|resources/i },
];

const ENHANCED = /^[245]\d\d[ -]([245])\.(\d{1,3})\.(\d{1,3})\b/;

export interface SmtpReply {
  code: number;
  /** e.g. 5.1.1 */
  enhancedCode?: string;
  /** Full reply text, multi-line joined with newlines. */
  text: string;
}

/** Parses a raw reply (possibly multi-line) into code, enhanced code and text. */
export function parseReply(raw: string): SmtpReply {
  const first = raw.trim();
  const code = Number(/^(\d{3})/.exec(first)?.[1] ?? 0);
  const m = ENHANCED.exec(first);
  return { code, enhancedCode: m ? `${m[1]}.${m[2]}.${m[3]}` : undefined, text: first };
}

function matchesCode(rule: ReasonRule, detail: string, prefix: boolean): boolean {
  return !!rule.codes?.some((c) => (c.endsWith('.') ? prefix && detail.startsWith(c) : !prefix && detail === c));
}

/**
 * The reason for a reply. Specific text wins first; otherwise an exact enhanced code;
 * otherwise a class prefix (codes ending in "."), otherwise `onhold` (no evidence).
 */
export function reasonFor(reply: SmtpReply): string {
  const text = reply.text.replace(/^\d{3}[ -](\d\.\d{1,3}\.\d{1,3} )?/gm, ' ');
  for (const r of REASON_RULES) if (r.text && r.text.test(text)) return r.reason;
  if (!reply.enhancedCode) return 'onhold';
  const detail = reply.enhancedCode.slice(2); // "1.1" of "5.1.1"
  for (const prefix of [false, true]) {
    for (const r of REASON_RULES) if (matchesCode(r, detail, prefix)) return r.reason;
  }
  return 'onhold';
}

/** Classifies a final (non-2xx) reply, or a 2xx after DATA, for the MX host it came from. */
export function classifyReply(raw: string, mxHost: string, tls: boolean): DeliveryResult {
  const reply = parseReply(raw);
  if (reply.code >= 200 && reply.code < 300) return { status: 'sent', code: reply.code, response: reply.text, mxHost, tls };
  if (reply.code >= 500 && reply.code < 600) {
    const reason = reasonFor(reply);
    // An enhanced 4.x.x inside a 5xx (or the reverse) is nonsense; the basic code decides.
    return { status: 'bounced', hard: HARD_REASONS.has(reason), code: reply.code, enhancedCode: reply.enhancedCode, reason, response: reply.text, mxHost };
  }
  const reason = reasonFor(reply);
  return {
    status: 'deferred',
    code: reply.code || undefined,
    enhancedCode: reply.enhancedCode,
    response: reply.text,
    mxHost,
    connectionFailure: false,
    reason: reason === 'onhold' ? undefined : reason,
  };
}
