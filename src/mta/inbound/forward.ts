/**
 * Forwarding by re-origination (RFC 7960 §5.1.1, docs/inbound.md → Forwarding): the copy is a
 * new message of the route's domain. Its From is an address of that domain (the original
 * display name kept, byte for byte), Reply-To is the original sender, the original
 * authentication results are recorded in a header, and our loop header marks it. Fields that
 * would break or misattribute the new signature (the old DKIM signatures, Sender, trace
 * fields, Message-ID: the MTA gives it its own) are removed. The body is untouched.
 */

/** Our loop header: mail carrying it is never forwarded, nor received for a route or mailbox. */
export const LOOP_HEADER = 'X-Lettermill-Loop';

const DROPPED = new Set([
  'from',
  'sender',
  'reply-to',
  'message-id',
  'return-path',
  'received',
  'received-spf',
  'authentication-results',
  'dkim-signature',
  'domainkey-signature',
  'x-original-from',
  'x-original-authentication-results',
  LOOP_HEADER.toLowerCase(),
]);

interface Field {
  name: string;
  /** The whole field, folded lines and final CRLF included. */
  text: string;
}

/** Bytes searched for the end of the header block (RFC 5322 has no limit; real blocks are < 64 KB). */
const HEADER_SCAN = 1024 * 1024;

/** Splits the header block into fields; the body starts at `bodyAt`. */
export function headerFields(raw: Buffer): { fields: Field[]; bodyAt: number } {
  // The header block only: a 25 MB body is never turned into a string here.
  const head = raw.subarray(0, Math.min(raw.length, HEADER_SCAN)).toString('latin1');
  // Bare LF line ends (some clients send them) are read like CRLF; fields are rewritten with CRLF.
  const m = /\r?\n\r?\n/.exec(head);
  const end = m ? m.index : head.length;
  const bodyAt = m ? m.index + m[0].length : head.length;
  const fields: Field[] = [];
  for (const line of head.slice(0, end).split(/\r?\n/)) {
    if (/^[ \t]/.test(line) && fields.length > 0) fields[fields.length - 1]!.text += `${line}\r\n`;
    else if (line.length > 0) fields.push({ name: line.slice(0, Math.max(0, line.indexOf(':'))).trim().toLowerCase(), text: `${line}\r\n` });
  }
  return { fields, bodyAt };
}

/** The unfolded value of the first field `name`, or null. */
export function fieldValue(fields: Field[], name: string): string | null {
  const f = fields.find((x) => x.name === name);
  return f ? f.text.slice(f.text.indexOf(':') + 1).replace(/\r\n/g, '').trim() : null;
}

export interface Reorigination {
  /** The new From address (an address of the route's domain). */
  fromAddress: string;
  /** The header value we prepended (our Authentication-Results of the original). */
  authResults: string;
  /** The route's domain, written in the loop header. */
  domain: string;
}

/** The forwarded copy's octets, and the From field value it carries. */
export function reoriginate(raw: Buffer, o: Reorigination): { raw: Buffer; from: string } {
  const { fields, bodyAt } = headerFields(raw);
  const originalFrom = fieldValue(fields, 'from');
  const originalReplyTo = fieldValue(fields, 'reply-to');
  const lt = originalFrom?.lastIndexOf('<') ?? -1;
  const display = originalFrom && lt > 0 ? originalFrom.slice(0, lt).trim() : '';
  const from = display ? `${display} <${o.fromAddress}>` : o.fromAddress;
  const head = [
    `From: ${from}\r\n`,
    ...(originalReplyTo || originalFrom ? [`Reply-To: ${originalReplyTo ?? originalFrom}\r\n`] : []),
    ...(originalFrom ? [`X-Original-From: ${originalFrom}\r\n`] : []),
    `X-Original-Authentication-Results: ${o.authResults}\r\n`,
    `${LOOP_HEADER}: ${o.domain}\r\n`,
    ...fields.filter((f) => !DROPPED.has(f.name) && !f.name.startsWith('arc-')).map((f) => f.text),
    '\r\n',
  ].join('');
  return { raw: Buffer.concat([Buffer.from(head, 'latin1'), raw.subarray(bodyAt)]), from };
}
