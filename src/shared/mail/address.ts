/**
 * The one address grammar. Every door uses it: the backend's /api/v1 (contacts, topics,
 * events, transactional), forms, campaigns and system mail; the MTA's /send, suppression
 * routes and the delivery's MIME builder. An address one door accepts is never refused by the
 * next.
 *
 * Accepted: `local@domain`. The local part is ASCII from the characters HTML's email input
 * allows (no quoted strings), 1–64 characters, no leading, trailing or doubled dot. The domain
 * has at least two labels of letters, digits and inner hyphens and a non-numeric top label,
 * at most 253 characters; an internationalized domain (U-labels) is accepted and becomes its
 * A-label form, the one DNS and SMTP use. 254 characters in all.
 *
 * Refused everywhere: a non-ASCII local part. It needs SMTPUTF8 end to end, which Amazon SES
 * does not offer at all and many receiving servers do not, and it has no ASCII fallback; the
 * provider is chosen at send time, long after a contact is stored, so such an address is
 * refused at the door instead of failing later.
 *
 * Normalized: surrounding white space removed, domain lower-cased in A-label form; the local
 * part keeps its case (lookups and suppression compare the whole address lower-cased).
 */
import { domainToASCII } from 'node:url';

const LOCAL = /^[A-Za-z0-9!#$%&'*+/=?^_`{|}~.-]{1,64}$/;
const LABEL = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;
// eslint-disable-next-line no-control-regex -- the whole ASCII range, NUL included
const NON_ASCII = /[^\x00-\x7f]/;

/**
 * Answers of asciiDomain by input. Node's domainToASCII costs ~0.6 µs (ICU), and a message's
 * few domains are normalized several times on its way (intake, MIME, delivery), mostly the same
 * few thousand. The function is pure, so a remembered answer is exact; the map is emptied when
 * full rather than kept in LRU order, which costs a miss per domain after each refill.
 */
const ASCII_DOMAINS = new Map<string, string>();
const ASCII_DOMAINS_MAX = 10_000;

/** A domain lower-cased in A-label form; '' when it cannot be (a broken `xn--` label, say). */
export function asciiDomain(domain: string): string {
  let out = ASCII_DOMAINS.get(domain);
  if (out === undefined) {
    out = domainToASCII(domain.toLowerCase());
    if (domain.length <= 255) {
      if (ASCII_DOMAINS.size >= ASCII_DOMAINS_MAX) ASCII_DOMAINS.clear();
      ASCII_DOMAINS.set(domain, out);
    }
  }
  return out;
}

/** The normalized address, or null when `input` is not one address of the grammar above. */
export function normalizeAddress(input: string): string | null {
  const s = input.trim();
  if (s.length === 0 || s.length > 320) return null;
  const at = s.lastIndexOf('@');
  if (at <= 0 || at === s.length - 1) return null;
  const local = s.slice(0, at);
  const rawDomain = s.slice(at + 1);
  if (!LOCAL.test(local) || local.startsWith('.') || local.endsWith('.') || local.includes('..')) return null;
  if (/[\s@]/.test(rawDomain)) return null;
  const domain = asciiDomain(rawDomain);
  if (!domain || domain.length > 253) return null;
  const labels = domain.split('.');
  if (labels.length < 2 || !labels.every((l) => LABEL.test(l)) || /^\d+$/.test(labels[labels.length - 1]!)) return null;
  const out = `${local}@${domain}`;
  return out.length <= 254 ? out : null;
}

const IN_TEXT = /[^\s<>"'(),;:[\]]+@[^\s<>"'(),;:[\]]+/g;

/**
 * The first address-shaped token of free text (bounce prose, report fields), lower-cased:
 * normalized when it is one of our grammar, else as written when it still has a local part and
 * a dotted domain (reports name addresses we would not send to, SMTPUTF8 local parts say); null
 * when there is none.
 */
export function addressInText(text: string): string | null {
  for (const m of text.matchAll(IN_TEXT)) {
    const token = m[0].replace(/[.>]+$/, '');
    const n = normalizeAddress(token);
    if (n) return n.toLowerCase();
    const at = token.lastIndexOf('@');
    if (at > 0 && /^[^@]+\.[^@.]{2,}$/.test(token.slice(at + 1)) && !token.slice(0, at).includes('@')) return token.toLowerCase();
  }
  return null;
}

export function isAddress(input: string): boolean {
  return normalizeAddress(input) !== null;
}

export interface Mailbox {
  /** Display name, when given. */
  name: string | null;
  /** Normalized (normalizeAddress). */
  address: string;
}

/**
 * `addr@example.com`, `Name <addr@example.com>` or `"Name" <addr@example.com>`. Returns null
 * for anything else: several addresses, groups, comments, and line breaks or NUL anywhere
 * (header injection).
 */
export function parseMailbox(input: string): Mailbox | null {
  if (/[\r\n\0]/.test(input) || input.length > 512) return null;
  const s = input.trim();
  const m = /^(?:"((?:[^"\\]|\\.)*)"|([^<>"]*?))\s*<([^<>\s]+)>$/.exec(s);
  if (m) {
    const address = normalizeAddress(m[3]!);
    if (!address) return null;
    const name = (m[1] !== undefined ? m[1].replace(/\\(.)/g, '$1') : m[2]!).trim();
    return { name: name || null, address };
  }
  const address = normalizeAddress(s);
  return address ? { name: null, address } : null;
}

/** RFC 5322 form of a mailbox for a JSON API (the MIME builder encodes non-ASCII names). */
export function formatMailbox(m: Mailbox): string {
  if (!m.name) return m.address;
  const name = /^[A-Za-z0-9!#$%&'*+/=?^_`{|}~ -]+$/.test(m.name) ? m.name : `"${m.name.replace(/["\\]/g, '\\$&')}"`;
  return `${name} <${m.address}>`;
}

/**
 * The domain of an address or of the last `<…>` of a mailbox field, lower-cased in A-label
 * form; '' when there is none. Hot path (a check per queued job): no parsing.
 */
export function domainOf(field: string): string {
  const lt = field.lastIndexOf('<');
  const gt = lt >= 0 ? field.indexOf('>', lt) : -1;
  const addr = lt >= 0 ? field.slice(lt + 1, gt >= 0 ? gt : undefined) : field;
  const at = addr.lastIndexOf('@');
  if (at < 0) return '';
  const domain = addr.slice(at + 1).trim().toLowerCase();
  // domainToASCII costs ~0.6 µs; an ASCII domain needs no conversion here.
  return NON_ASCII.test(domain) ? domainToASCII(domain) : domain;
}
