/** The one address grammar and header-name rule (src/shared/mail/), used by every door. */
import { describe, expect, it } from 'vitest';
import { domainToASCII } from 'node:url';
import { asciiDomain, domainOf, formatMailbox, normalizeAddress, parseMailbox } from '../../src/shared/mail/address.js';
import { isHeaderName } from '../../src/shared/mail/headers.js';

describe('address grammar', () => {
  it('normalizes: trimmed, domain lower-cased in A-label form, local part keeps its case', () => {
    expect(normalizeAddress('  Jane.Doe+tag@EXAMPLE.com ')).toBe('Jane.Doe+tag@example.com');
    expect(normalizeAddress('hans@Bücher.example')).toBe('hans@xn--bcher-kva.example');
    expect(normalizeAddress('hans@XN--BCHER-KVA.example')).toBe('hans@xn--bcher-kva.example');
    expect(normalizeAddress(`${'a'.repeat(64)}@example.com`)).toBe(`${'a'.repeat(64)}@example.com`);
  });

  it('refuses non-ASCII local parts, quoted strings, bad dots, bad labels, numeric top labels and address literals', () => {
    for (const s of [
      'jörg@example.com', 'ü@bücher.example', '"a b"@example.com', 'a..b@example.com', '.a@example.com', 'a.@example.com',
      'a@b', 'a@-x.com', 'a@exa_mple.com', 'a@example.123', 'a@[127.0.0.1]', 'a@xn--zz.com', `${'a'.repeat(65)}@example.com`,
      `a@${'b'.repeat(250)}.com`, 'a@example.com\r\nBcc: x@evil.test', '', '@example.com', 'a@',
    ]) {
      expect(normalizeAddress(s), s).toBeNull();
    }
  });

  it('parses one mailbox: bare, Name <a@b>, "Quoted, Name" <a@b>; nothing else', () => {
    expect(parseMailbox('a@Example.com')).toEqual({ name: null, address: 'a@example.com' });
    expect(parseMailbox('Acme <hello@Bücher.test>')).toEqual({ name: 'Acme', address: 'hello@xn--bcher-kva.test' });
    expect(parseMailbox('"Doe, \\"J\\"" <j@example.com>')).toEqual({ name: 'Doe, "J"', address: 'j@example.com' });
    for (const s of ['a@x.example, b@x.example', 'Acme hello@acme.test', 'Acme <hello@acme.test>\r\nBcc: x@evil.test', 'G: a@x.example;', 'Jörg <jörg@x.example>']) {
      expect(parseMailbox(s), s).toBeNull();
    }
  });

  it('formats a mailbox for a JSON API, quoting a name that needs it', () => {
    expect(formatMailbox({ name: 'Acme', address: 'a@b.example' })).toBe('Acme <a@b.example>');
    expect(formatMailbox({ name: 'Doe, "J"', address: 'a@b.example' })).toBe('"Doe, \\"J\\"" <a@b.example>');
    expect(formatMailbox({ name: null, address: 'a@b.example' })).toBe('a@b.example');
  });

  it('domainOf reads an address or a mailbox field, lower-cased in A-label form', () => {
    expect(domainOf('Shop <Sales@Sender.Example>')).toBe('sender.example');
    expect(domainOf('sales@Bücher.example')).toBe('xn--bcher-kva.example');
    expect(domainOf('no address')).toBe('');
  });
});

describe('A-label domains (remembered answers)', () => {
  it('answers as domainToASCII of the lower-cased input, the first time and every time after, past the bound', () => {
    const inputs = ['Example.COM', 'bücher.DE', 'xn--bcher-kva.de', 'xn--zz.com', '0x7f.1', 'a..b', 'MÜNCHEN.de', 'münchen.de'];
    const expected = inputs.map((d) => domainToASCII(d.toLowerCase()));
    expect(expected).toEqual(['example.com', 'xn--bcher-kva.de', 'xn--bcher-kva.de', '', '127.0.0.1', 'a..b', 'xn--mnchen-3ya.de', 'xn--mnchen-3ya.de']);
    for (let round = 0; round < 3; round++) {
      expect(inputs.map(asciiDomain)).toEqual(expected);
      // More distinct domains than the memo holds: it is emptied and refilled, never wrong.
      for (let i = 0; i < 6_000; i++) expect(asciiDomain(`Host${round}-${i}.Example.org`)).toBe(`host${round}-${i}.example.org`);
    }
    expect(normalizeAddress('Ann@Bücher.DE')).toBe('Ann@xn--bcher-kva.de');
  });
});

describe('header names', () => {
  it('printable ASCII without colon or space, 1 to 76 characters', () => {
    expect(isHeaderName('X-Campaign-Tag')).toBe(true);
    expect(isHeaderName('X'.repeat(76))).toBe(true);
    for (const n of ['', 'X'.repeat(77), 'Bad Name', 'X:Y', 'X-Ünï', 'X\r\nBcc']) expect(isHeaderName(n), n).toBe(false);
  });
});
