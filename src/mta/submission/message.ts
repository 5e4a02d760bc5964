/**
 * What submission reads from a submitted message's octets: the header fields that matter
 * (From, the idempotency and deduplication headers) and the Bcc field it removes. Only the
 * header block is read, as latin1 (one char per octet), so a 25 MB message is not decoded;
 * a full MIME parser would parse the body we never look at.
 */

/** decisions.md: the header and MAIL FROM parameter names. */
export const IDEMPOTENCY_HEADER = 'X-Lettermill-Idempotency-Key';
export const DEDUP_HEADER = 'X-Lettermill-Deduplication';
export const ID_PARAM = 'XLETTERMILLID';
export const DEDUP_PARAM = 'XLETTERMILLDEDUP';

/** mta.md rule 1: 1 to 200 characters from `A-Z a-z 0-9 . _ ~ : + -`. */
export const isIdempotencyKey = (k: string): boolean => /^[A-Za-z0-9._~:+-]{1,200}$/.test(k);

const HEADER_LIMIT = 1024 * 1024;

/**
 * The header block as latin1, up to just after its last CRLF (the blank line follows), within
 * the first MB; found in the bytes, so the body is never decoded.
 */
function headerBlock(raw: Buffer): string {
  const limit = Math.min(raw.length, HEADER_LIMIT);
  if (limit >= 2 && raw[0] === 0x0d && raw[1] === 0x0a) return '';
  const head = raw.subarray(0, limit);
  const i = head.indexOf('\r\n\r\n');
  return head.toString('latin1', 0, i < 0 ? limit : i + 2);
}

interface Field {
  name: string;
  value: string;
  start: number;
  end: number;
}

/** The header block's fields, each with its byte range and unfolded value. */
function fields(raw: Buffer): Field[] {
  const text = headerBlock(raw);
  const end = text.length;
  const out: Field[] = [];
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

export interface SubmittedHeaders {
  from: string[];
  idempotencyKey: string[];
  dedup: string[];
  /** The Bcc fields' byte ranges (stripBcc). */
  bcc: { start: number; end: number }[];
}

/** One pass over the header block: what submission reads and the Bcc fields it removes. */
export function readHeaders(raw: Buffer): SubmittedHeaders {
  const f = fields(raw);
  const all = (name: string) => f.filter((x) => x.name === name.toLowerCase()).map((x) => x.value);
  return { from: all('from'), idempotencyKey: all(IDEMPOTENCY_HEADER), dedup: all(DEDUP_HEADER), bcc: f.filter((x) => x.name === 'bcc') };
}

/**
 * The message without its Bcc fields (RFC 6409 §8.1 lets the submission server remove them);
 * `headers`: readHeaders of the same bytes, read already.
 */
export function stripBcc(raw: Buffer, headers: Pick<SubmittedHeaders, 'bcc'> = readHeaders(raw)): Buffer {
  const { bcc } = headers;
  if (bcc.length === 0) return raw;
  const parts: Buffer[] = [];
  let at = 0;
  for (const b of bcc) {
    parts.push(raw.subarray(at, b.start));
    at = b.end;
  }
  parts.push(raw.subarray(at));
  return Buffer.concat(parts);
}
