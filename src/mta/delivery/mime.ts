/**
 * Builds the wire form of an outbound message (RFC 5322 + MIME) from a job.
 *
 * Addresses follow the one grammar (src/shared/mail/address.ts); header encoding and folding
 * come from nodemailer's helpers; the assembly is ours because MailComposer's stream pipeline
 * measured ~0.4 ms for a 5 KB and ~2.3 ms for a 100 KB message here, more than the whole
 * per-message budget of the delivery engine.
 * Body parts use 7bit when they already are, 8bit when the receiving server offers 8BITMIME,
 * otherwise quoted-printable (small mostly-ASCII parts, ./qp.ts) or base64 (the rest, encoded natively).
 */
import * as mimeFuncs from 'nodemailer/lib/mime-funcs';
import { randomToken } from '../../shared/crypto.js';
import { domainOf, parseMailbox, type Mailbox } from '../../shared/mail/address.js';
import { headerFieldRanges, isCfblHeader, isHeaderName, isReservedHeader, withoutFields } from '../../shared/mail/headers.js';
import { encodeQuotedPrintable, qpEscapes } from './qp.js';
import type { OutboundMessage } from './types.js';

/** What a message is built from (the send's id is not part of its bytes: the tokens come in ownHeaders). */
type MessageContent = Omit<OutboundMessage, 'sendId'>;

/** A job that cannot become a valid message (a bad address): permanent, not the remote's fault. */
export class MessageBuildError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'MessageBuildError';
  }
}

export interface ParsedAddress extends Mailbox {
  /** The address's domain (A-labels, lower case). */
  domain: string;
}

const MAX_EXTRA_HEADERS = 50;
const MAX_HEADER_VALUE = 4_000;
/** Above this size a part that needs encoding is sent as base64 (native). */
const QP_MAX_BYTES = 16 * 1024;

/**
 * One mailbox (`Name <a@b>` or `a@b`) in the grammar of every door (shared/mail/address.ts);
 * throws MessageBuildError for anything else, e.g. a job queued before the grammar was one.
 */
export function requireMailbox(value: string, field: string): ParsedAddress {
  const m = parseMailbox(value);
  if (!m) throw new MessageBuildError(`${field} is not one valid address: ${JSON.stringify(value.slice(0, 100))}`);
  return { ...m, domain: domainOf(m.address) };
}

/** The header form: a non-ASCII display name becomes an encoded word. */
function headerMailbox(a: Mailbox): string {
  if (!a.name) return a.address;
  const name = mimeFuncs.isPlainText(a.name) ? mimeFuncs.quoteString(a.name) : mimeFuncs.encodeWord(a.name, 'Q', 52);
  return `${name} <${a.address}>`;
}

// eslint-disable-next-line no-control-regex
const CONTROL = /[\x00-\x08\x0a-\x1f\x7f]/g;

/** An unstructured header value: control characters (CR/LF included) become spaces, non-ASCII is encoded. */
function headerValue(value: string): string {
  const clean = value.replace(CONTROL, ' ').trim();
  return mimeFuncs.isPlainText(clean) ? clean : mimeFuncs.encodeWords(clean, 'Q', 52);
}

const fold = (line: string) => `${mimeFuncs.foldLines(line, 76).replace(/\r?\n/g, '\r\n').replace(/\s+$/, '')}\r\n`;

function field(name: string, value: string): string {
  const out = fold(`${name}: ${value}`);
  if (out.length <= 1000 || !out.split('\r\n').some((l) => l.length > 998)) return out;
  // A word too long to fold would break RFC 5322's 998-octet line limit (found by npm run fuzz):
  // as encoded words it folds, and readers join them back into the same text.
  return fold(`${name}: ${mimeFuncs.encodeWord(value, 'Q', 52)}`);
}

const CRLF_NORMALIZE = /\r\n|\r|\n/g;

interface EncodedPart {
  cte: '7bit' | '8bit' | 'quoted-printable' | 'base64';
  body: string;
}

/** Longest line in bytes is what counts; for ASCII, chars equal bytes. */
function maxLineLength(s: string): number {
  let max = 0;
  let start = 0;
  for (;;) {
    const i = s.indexOf('\n', start);
    const end = i < 0 ? s.length : i;
    const len = end - start - (end > start && s.charCodeAt(end - 1) === 13 ? 1 : 0);
    if (len > max) max = len;
    if (i < 0) return max;
    start = i + 1;
  }
}

function encodePart(content: string, eightBit: boolean): EncodedPart {
  // One UTF-8 byte per character means pure ASCII (a native length count, no regex scan).
  const ascii = Buffer.byteLength(content, 'utf8') === content.length;
  const normalized = content.includes('\r') ? content.replace(CRLF_NORMALIZE, '\r\n') : content.replaceAll('\n', '\r\n');
  // Non-ASCII text as its UTF-8 octets (one latin1 char each), computed once: line lengths are
  // counted in octets and the 8bit body is exactly these octets.
  const octets = ascii ? normalized : Buffer.from(normalized, 'utf8').toString('latin1');
  const longest = octets.length > 998 ? maxLineLength(octets) : 0;
  const hasNul = normalized.includes('\x00');
  if (longest <= 998 && !hasNul) {
    if (ascii) return { cte: '7bit', body: normalized };
    if (eightBit) return { cte: '8bit', body: octets };
  }
  const buf = Buffer.from(content, 'utf8');
  // QP grows the part by 2 octets per escaped one, base64 by a third: QP for small parts that are
  // mostly ASCII, base64 for the rest. Above QP_MAX_BYTES base64 even when larger: measured end to
  // end with 100 KB of real HTML, QP's 25 % fewer octets did not pay for its encoding in JS and the
  // DKIM hash of its white space (×0.94, docs/performance-history.md, "Quoted-printable and base64").
  if (buf.length <= QP_MAX_BYTES && qpEscapes(buf) * 6 < buf.length) return { cte: 'quoted-printable', body: encodeQuotedPrintable(buf) };
  return { cte: 'base64', body: base64Lines(buf) };
}

function base64Lines(buf: Buffer): string {
  const b64 = buf.toString('base64');
  const lines: string[] = [];
  for (let i = 0; i < b64.length; i += 76) lines.push(b64.slice(i, i + 76));
  return lines.join('\r\n');
}

function ensureFinalCrlf(body: string): string {
  return body.endsWith('\r\n') ? body : `${body}\r\n`;
}

export interface BuildOptions {
  /** Header Message-ID value with angle brackets. */
  messageIdHeader: string;
  /** Epoch ms for the Date header. */
  date: number;
  /** The receiving server offered 8BITMIME: UTF-8 parts may go unencoded. */
  eightBit: boolean;
  /** Header fields the MTA adds itself (CFBL), ASCII, written after the caller's. */
  ownHeaders?: readonly [string, string][];
}

export interface BuiltMessage {
  /**
   * The message as it goes on the wire before dot-stuffing (CRLF line endings), as a latin1
   * string: one char per octet. Signing and dot-stuffing work on this one string, so a 100 KB
   * message is not copied between Buffer and string at every step.
   */
  wire: string;
  /** `wire` as bytes. */
  readonly raw: Buffer;
  from: ParsedAddress;
  to: ParsedAddress;
  /** Uses 8bit parts: MAIL FROM must say BODY=8BITMIME. */
  eightBit: boolean;
  /** Caller headers dropped (owned by the MTA or unsafe names), for the delivery log. */
  droppedHeaders: string[];
}

/** RFC 5322 date with a numeric zone. */
export function rfc5322Date(ms: number): string {
  return new Date(ms).toUTCString().replace(/GMT$/, '+0000');
}

/** The Message-ID of a job, shared with the backend (it records it for reply linking). */
export { stableMessageId } from '../../shared/mail/message-id.js';

export function buildMessage(msg: MessageContent, opts: BuildOptions): BuiltMessage {
  const from = requireMailbox(msg.from, 'from');
  const to = requireMailbox(msg.to, 'to');
  const replyTo = msg.replyTo ? requireMailbox(msg.replyTo, 'replyTo') : undefined;

  let head =
    field('From', headerMailbox(from)) +
    field('To', headerMailbox(to)) +
    field('Subject', headerValue(msg.subject ?? '')) +
    field('Date', rfc5322Date(opts.date)) +
    field('Message-ID', opts.messageIdHeader);
  if (replyTo) head += field('Reply-To', headerMailbox(replyTo));

  const dropped: string[] = [];
  let extra = 0;
  for (const [name, value] of Object.entries(msg.headers ?? {})) {
    if (!isHeaderName(name) || isReservedHeader(name) || isCfblHeader(name) || typeof value !== 'string' || extra >= MAX_EXTRA_HEADERS) {
      dropped.push(name);
      continue;
    }
    extra++;
    head += field(name, headerValue(value.slice(0, MAX_HEADER_VALUE)));
  }
  for (const [name, value] of opts.ownHeaders ?? []) head += field(name, value);
  head += 'MIME-Version: 1.0\r\n';

  const text = msg.text ?? undefined;
  const html = msg.html ?? undefined;
  if (msg.entity !== undefined) {
    // The MTA's own report: the entity carries its Content-Type and is already encoded.
    const wire = head + msg.entity;
    return { wire, get raw() { return Buffer.from(wire, 'latin1'); }, from, to, eightBit: false, droppedHeaders: dropped };
  }
  let body: string;
  let usedEightBit = false;
  const part = (type: string, content: string): { headers: string; body: string } => {
    const e = encodePart(content, opts.eightBit);
    if (e.cte === '8bit') usedEightBit = true;
    return {
      headers: `Content-Type: ${type}; charset=utf-8\r\nContent-Transfer-Encoding: ${e.cte}\r\n`,
      body: ensureFinalCrlf(e.body),
    };
  };
  if (text !== undefined && html !== undefined && text !== '' && html !== '') {
    const boundary = `=_lm_${randomToken(18)}`;
    const t = part('text/plain', text);
    const h = part('text/html', html);
    head += `Content-Type: multipart/alternative;\r\n boundary="${boundary}"\r\n`;
    body =
      `--${boundary}\r\n${t.headers}\r\n${t.body}` +
      `--${boundary}\r\n${h.headers}\r\n${h.body}` +
      `--${boundary}--\r\n`;
  } else {
    const only = html !== undefined && html !== '' ? part('text/html', html) : part('text/plain', text ?? '');
    head += only.headers;
    body = only.body;
  }
  // Headers are ASCII (addresses by grammar, the rest encoded above); only 8bit bodies carry
  // raw UTF-8, already as latin1 chars.
  const wire = `${head}\r\n${body}`;
  return {
    wire,
    get raw() {
      return Buffer.from(wire, 'latin1');
    },
    from,
    to,
    eightBit: usedEightBit,
    droppedHeaders: dropped,
  };
}

/**
 * The wire form of an already-built message (SMTP submission, forwarding): its octets unchanged
 * but for the author's CFBL-* fields, which are removed (any case, folded, repeated: the pair is
 * ours, mta.md), with Message-ID and Date prepended only when the author left them out (RFC 5322
 * requires both; RFC 6409 §8 lets a submission server add them) and our own CFBL pair when
 * given. Nothing else is touched, so the author's structure survives; the DKIM-Signature goes
 * in front of it all.
 */
export function buildRawMessage(msg: MessageContent, opts: Pick<BuildOptions, 'messageIdHeader' | 'date' | 'ownHeaders'>): BuiltMessage {
  const from = requireMailbox(msg.from, 'from');
  const to = requireMailbox(msg.to, 'to');
  const bytes = Buffer.from(msg.raw ?? '', 'base64');
  const fields = headerFieldRanges(bytes);
  const callers = fields.filter((f) => isCfblHeader(f.name));
  const octets = withoutFields(bytes, callers).toString('latin1');
  const has = (name: string) => fields.some((f) => f.name === name);
  let added = '';
  if (!has('message-id')) added += field('Message-ID', opts.messageIdHeader);
  if (!has('date')) added += field('Date', rfc5322Date(opts.date));
  for (const [name, value] of opts.ownHeaders ?? []) added += field(name, value);
  const wire = added + octets;
  return {
    wire,
    get raw() {
      return Buffer.from(wire, 'latin1');
    },
    from,
    to,
    // eslint-disable-next-line no-control-regex
    eightBit: /[^\x00-\x7f]/.test(octets),
    droppedHeaders: callers.map((f) => f.name),
  };
}

/** Base64 characters of a raw job that hold its header block (headerFieldRanges reads the first MB). */
const RAW_HEAD_B64 = Math.ceil((1024 * 1024) / 3) * 4;

/**
 * Already-built MIME its author signed (a DKIM-Signature or ARC-Seal of their own): the MTA adds
 * no CFBL pair to it (outcome sealed_raw), since an author's signature may cover those names.
 */
export function isSealedRaw(rawBase64: string): boolean {
  const head = Buffer.from(rawBase64.slice(0, RAW_HEAD_B64), 'base64');
  return headerFieldRanges(head).some((f) => f.name === 'dkim-signature' || f.name === 'arc-seal');
}
