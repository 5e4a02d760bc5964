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
 * own tracking (X-Lettermill-Send-Id). One list, so a header is refused with a 400 at the
 * first door instead of vanishing at the last. CFBL-* is ours too, but removed rather than
 * refused (isCfblHeader).
 */
const RESERVED = new Set([
  'from', 'to', 'cc', 'bcc', 'subject', 'date', 'message-id', 'reply-to', 'sender', 'mime-version',
  'received', 'return-path', 'authentication-results', 'x-lettermill-send-id',
]);
const RESERVED_PREFIXES = ['content-', 'dkim-', 'arc-'];

export function isReservedHeader(name: string): boolean {
  const lower = name.toLowerCase();
  return RESERVED.has(lower) || RESERVED_PREFIXES.some((p) => lower.startsWith(p));
}

/**
 * CFBL-Address and CFBL-Feedback-ID (RFC 9477), and any other CFBL-* field: the MTA writes its
 * own pair when it signs, so a caller's copy, in any letter case, is removed at every door
 * (mta.md: "stripped regardless of case") rather than refused.
 */
export function isCfblHeader(name: string): boolean {
  return name.toLowerCase().startsWith('cfbl-');
}

/** A header's fields without the CFBL ones (the transactional API and /send). */
export function withoutCfbl<T extends Record<string, string> | undefined>(headers: T): T {
  if (!headers || !Object.keys(headers).some(isCfblHeader)) return headers;
  return Object.fromEntries(Object.entries(headers).filter(([name]) => !isCfblHeader(name))) as T;
}

/** Bytes searched for the end of the header block (RFC 5322 has no limit; real blocks are < 64 KB). */
const HEADER_LIMIT = 1024 * 1024;

/**
 * The header block of a message's octets as latin1, up to just after its last CRLF (the blank
 * line follows), within the first MB; found in the bytes, so the body is never decoded.
 */
function headerBlock(raw: Buffer): string {
  const limit = Math.min(raw.length, HEADER_LIMIT);
  if (limit >= 2 && raw[0] === 0x0d && raw[1] === 0x0a) return '';
  const head = raw.subarray(0, limit);
  const i = head.indexOf('\r\n\r\n');
  return head.toString('latin1', 0, i < 0 ? limit : i + 2);
}

export interface HeaderFieldRange {
  /** Lower case. */
  name: string;
  /** Unfolded, trimmed. */
  value: string;
  /** Byte range of the whole field, continuation lines and final CRLF included. */
  start: number;
  end: number;
}

/** The fields of a message's header block, each with its byte range and unfolded value. */
export function headerFieldRanges(raw: Buffer): HeaderFieldRange[] {
  const text = headerBlock(raw);
  const end = text.length;
  const out: HeaderFieldRange[] = [];
  let pos = 0;
  while (pos < end) {
    let next = text.indexOf('\r\n', pos);
    if (next < 0 || next >= end) next = end - 2;
    // Continuation lines belong to the field.
    while (next + 2 < end && (text[next + 2] === ' ' || text[next + 2] === '\t')) {
      const n = text.indexOf('\r\n', next + 2);
      if (n < 0 || n >= end) break;
      next = n;
    }
    const line = text.slice(pos, next);
    const colon = line.indexOf(':');
    if (colon > 0) out.push({ name: line.slice(0, colon).trim().toLowerCase(), value: line.slice(colon + 1).replace(/\r\n[ \t]/g, ' ').trim(), start: pos, end: next + 2 });
    pos = next + 2;
  }
  return out;
}

/** The octets without the given fields (ranges of headerFieldRanges of the same bytes, in order). */
export function withoutFields(raw: Buffer, fields: readonly { start: number; end: number }[]): Buffer {
  if (fields.length === 0) return raw;
  const parts: Buffer[] = [];
  let at = 0;
  for (const f of fields) {
    parts.push(raw.subarray(at, f.start));
    at = f.end;
  }
  parts.push(raw.subarray(at));
  return Buffer.concat(parts);
}
