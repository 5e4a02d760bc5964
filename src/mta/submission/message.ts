/**
 * What submission reads from a submitted message's octets: the header fields that matter
 * (From, the idempotency and deduplication headers) and the Bcc field it removes. Only the
 * header block is read, as latin1 (one char per octet), so a 25 MB message is not decoded;
 * a full MIME parser would parse the body we never look at.
 */
import { headerFieldRanges, withoutFields } from '../../shared/mail/headers.js';

/** decisions.md: the header and MAIL FROM parameter names. */
export const IDEMPOTENCY_HEADER = 'X-Lettermill-Idempotency-Key';
export const DEDUP_HEADER = 'X-Lettermill-Deduplication';
export const ID_PARAM = 'XLETTERMILLID';
export const DEDUP_PARAM = 'XLETTERMILLDEDUP';

/** mta.md rule 1: 1 to 200 characters from `A-Z a-z 0-9 . _ ~ : + -`. */
export const isIdempotencyKey = (k: string): boolean => /^[A-Za-z0-9._~:+-]{1,200}$/.test(k);

export interface SubmittedHeaders {
  from: string[];
  idempotencyKey: string[];
  dedup: string[];
  /** The Bcc fields' byte ranges (stripBcc). */
  bcc: { start: number; end: number }[];
}

/** One pass over the header block: what submission reads and the Bcc fields it removes. */
export function readHeaders(raw: Buffer): SubmittedHeaders {
  const f = headerFieldRanges(raw);
  const all = (name: string) => f.filter((x) => x.name === name.toLowerCase()).map((x) => x.value);
  return { from: all('from'), idempotencyKey: all(IDEMPOTENCY_HEADER), dedup: all(DEDUP_HEADER), bcc: f.filter((x) => x.name === 'bcc') };
}

/**
 * The message without its Bcc fields (RFC 6409 §8.1 lets the submission server remove them);
 * `headers`: readHeaders of the same bytes, read already.
 */
export function stripBcc(raw: Buffer, headers: Pick<SubmittedHeaders, 'bcc'> = readHeaders(raw)): Buffer {
  return withoutFields(raw, headers.bcc);
}
