/**
 * Reads an SMTP reply into a DeliveryResult: 2xx sent, 4xx deferred, 5xx bounced. The reason
 * and the hard flag come from the one bounce classifier (src/shared/mail/bounce/), whose rules
 * are data; this module only splits the reply into its codes.
 */
import { classify } from '../../shared/mail/bounce/classify.js';
import type { DeliveryResult } from './types.js';

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

/** The reason for a reply (the command it answered helps: "mailbox unavailable" at RCPT is an unknown user). */
export function reasonFor(reply: SmtpReply, command?: string) {
  return classify({ status: reply.enhancedCode, replyCode: reply.code || null, text: reply.text, command }).reason;
}

/** Classifies a final (non-2xx) reply, or a 2xx after DATA, for the MX host it came from. */
export function classifyReply(raw: string, mxHost: string, tls: boolean, command?: string): DeliveryResult {
  const reply = parseReply(raw);
  if (reply.code >= 200 && reply.code < 300) return { status: 'sent', code: reply.code, response: reply.text, mxHost, tls };
  const verdict = classify({ status: reply.enhancedCode, replyCode: reply.code || null, text: reply.text, command, remoteHost: mxHost });
  if (reply.code >= 500 && reply.code < 600) {
    // An enhanced 4.x.x inside a 5xx (or the reverse) is nonsense; the basic code decides.
    return { status: 'bounced', hard: verdict.hardBounce, code: reply.code, enhancedCode: reply.enhancedCode, reason: verdict.reason, response: reply.text, mxHost };
  }
  return {
    status: 'deferred',
    code: reply.code || undefined,
    enhancedCode: reply.enhancedCode,
    response: reply.text,
    mxHost,
    connectionFailure: false,
    reason: verdict.reason === 'onhold' || verdict.reason === 'undefined' ? undefined : verdict.reason,
  };
}
