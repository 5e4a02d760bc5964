/**
 * A caller-supplied header name: RFC 5322 `ftext` (printable ASCII except the colon), at most
 * 76 characters. One rule for the backend's /api/v1/transactional, the MTA's /send and its
 * MIME builder, so a header one door accepts is not dropped by the next.
 */
const HEADER_NAME = /^[!-9;-~]{1,76}$/;

export function isHeaderName(name: string): boolean {
  return HEADER_NAME.test(name);
}

/**
 * Headers a caller may not set, at every door (the backend's transactional API, the MTA's
 * /send, and its MIME builder for jobs queued before): the message's structure (From, To, Cc,
 * Bcc, Subject, Date, Message-ID, Reply-To, Sender, MIME and Content-*), what the path and
 * the receivers write (Received, Return-Path, Authentication-Results, DKIM-*, ARC-*) and our
 * own tracking (CFBL-*, X-Lettermill-Send-Id). One list, so a header is refused with a 400
 * at the first door instead of vanishing at the last.
 */
const RESERVED = new Set([
  'from', 'to', 'cc', 'bcc', 'subject', 'date', 'message-id', 'reply-to', 'sender', 'mime-version',
  'received', 'return-path', 'authentication-results', 'x-lettermill-send-id',
]);
const RESERVED_PREFIXES = ['content-', 'dkim-', 'arc-', 'cfbl-'];

export function isReservedHeader(name: string): boolean {
  const lower = name.toLowerCase();
  return RESERVED.has(lower) || RESERVED_PREFIXES.some((p) => lower.startsWith(p));
}
