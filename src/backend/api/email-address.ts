/**
 * Email address validation and normalization for contacts and sends.
 *
 * Accepted: `local@domain` with an ASCII local part of the characters HTML's email input
 * allows (no quoted strings, no SMTPUTF8 local parts), at most 64 characters, no leading,
 * trailing or doubled dot; a domain with at least two labels (internationalized names are
 * converted to their ASCII form), at most 253 characters; 254 characters in all.
 * Normalized: surrounding whitespace removed, domain lower-cased (and punycoded); the local
 * part keeps its case. Uniqueness and lookups are case-insensitive over the whole address.
 */
import { domainToASCII } from 'node:url';

const LOCAL = /^[A-Za-z0-9!#$%&'*+/=?^_`{|}~.-]{1,64}$/;
const LABEL = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;

export function normalizeEmail(input: string): string | null {
  const s = input.trim();
  if (s.length === 0 || s.length > 320) return null;
  const at = s.lastIndexOf('@');
  if (at <= 0 || at === s.length - 1) return null;
  const local = s.slice(0, at);
  const rawDomain = s.slice(at + 1);
  if (!LOCAL.test(local) || local.startsWith('.') || local.endsWith('.') || local.includes('..')) return null;
  if (/[\s@]/.test(rawDomain)) return null;
  const domain = domainToASCII(rawDomain.toLowerCase());
  if (!domain || domain.length > 253) return null;
  const labels = domain.split('.');
  if (labels.length < 2 || !labels.every((l) => LABEL.test(l)) || /^\d+$/.test(labels[labels.length - 1])) return null;
  const out = `${local}@${domain}`;
  return out.length <= 254 ? out : null;
}

export interface Mailbox {
  /** Display name, when given. */
  name: string | null;
  address: string;
}

/**
 * `addr@example.com`, `Name <addr@example.com>` or `"Name" <addr@example.com>`. Returns null
 * for anything else, including line breaks anywhere (header injection).
 */
export function parseMailbox(input: string): Mailbox | null {
  if (/[\r\n\0]/.test(input) || input.length > 512) return null;
  const s = input.trim();
  const m = /^(?:"((?:[^"\\]|\\.)*)"|([^<>"]*?))\s*<([^<>\s]+)>$/.exec(s);
  if (m) {
    const address = normalizeEmail(m[3]);
    if (!address) return null;
    const name = (m[1] !== undefined ? m[1].replace(/\\(.)/g, '$1') : m[2]).trim();
    return { name: name || null, address };
  }
  const address = normalizeEmail(s);
  return address ? { name: null, address } : null;
}

/** RFC 5322 form of a mailbox; the display name is quoted when it needs to be. */
export function formatMailbox(m: Mailbox): string {
  if (!m.name) return m.address;
  const name = /^[A-Za-z0-9!#$%&'*+/=?^_`{|}~ -]+$/.test(m.name) ? m.name : `"${m.name.replace(/["\\]/g, '\\$&')}"`;
  return `${name} <${m.address}>`;
}

export function domainOf(address: string): string {
  return address.slice(address.lastIndexOf('@') + 1);
}
