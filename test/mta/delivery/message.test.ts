import { simpleParser } from 'mailparser';
import { describe, expect, it } from 'vitest';
import { buildMessage, MessageBuildError, stableMessageId } from '../../../src/mta/delivery/mime.js';
import { parseVerpAddress, signToken, verifyToken, verpAddress } from '../../../src/mta/delivery/verp.js';
import { hmacSha256 } from '../../../src/shared/crypto.js';

const base = { messageId: 'm-1', organizationId: 'org', from: 'News <news@sender.test>', to: 'rcpt@dest.test', subject: 'Hello', dkimDomain: 'sender.test' };
const opts = { messageIdHeader: '<id1@sender.test>', date: Date.UTC(2026, 2, 3, 4, 5, 6), eightBit: false };

describe('message building', () => {
  it('html + text → multipart/alternative that a MIME parser reads back exactly', async () => {
    const html = '<p>Grüße — ' + 'x'.repeat(2000) + '</p>';
    const text = 'Grüße\r\nline two\n.dot line';
    const b = buildMessage({ ...base, html, text }, opts);
    const parsed = await simpleParser(b.raw);
    expect(parsed.html).toBe(html);
    expect(parsed.text).toBe('Grüße\nline two\n.dot line');
    expect(b.raw.toString('latin1')).toMatch(/^Content-Type: multipart\/alternative;/m);
    expect(parsed.messageId).toBe('<id1@sender.test>');
    expect(parsed.date?.toISOString()).toBe('2026-03-03T04:05:06.000Z');
    // eslint-disable-next-line no-control-regex
    expect(/[^\x00-\x7f]/.test(b.raw.toString('latin1'))).toBe(false); // 7-bit clean without 8BITMIME
    expect(b.eightBit).toBe(false);
  });

  it('uses 8bit when the server offers 8BITMIME, QP/base64 otherwise; lines stay under 998 octets', async () => {
    const html = `<p>${'é'.repeat(400)}</p>`; // 807 octets on one line
    const eight = buildMessage({ ...base, html }, { ...opts, eightBit: true });
    expect(eight.eightBit).toBe(true);
    // 1,207 octets on one line: too long for 8bit even when offered.
    expect(buildMessage({ ...base, html: `<p>${'é'.repeat(600)}</p>` }, { ...opts, eightBit: true }).eightBit).toBe(false);
    expect(eight.raw.toString('latin1')).toMatch(/Content-Transfer-Encoding: 8bit/);
    const big = buildMessage({ ...base, html: `<p>${'é'.repeat(20_000)}</p>` }, opts);
    expect(big.raw.toString('latin1')).toMatch(/Content-Transfer-Encoding: base64/);
    for (const b of [eight, big]) {
      expect(Math.max(...b.raw.toString('latin1').split('\r\n').map((l) => l.length))).toBeLessThanOrEqual(998);
      // A single 7bit/8bit part ends with the line break the format needs.
      expect(((await simpleParser(b.raw)).html || '').replace(/\n$/, '')).toBe(b === eight ? html : `<p>${'é'.repeat(20_000)}</p>`);
    }
  });

  it('a Subject or header of 998 characters without a space stays within 998-octet lines and reads back (found by npm run fuzz)', async () => {
    const subject = 'x'.repeat(998);
    const value = `!${'v'.repeat(997)}`;
    const b = buildMessage({ ...base, subject, html: '<p>x</p>', headers: { 'X-Long': value } }, opts);
    expect(Math.max(...b.wire.split('\r\n').map((l) => l.length))).toBeLessThanOrEqual(998);
    const parsed = await simpleParser(b.raw);
    expect(parsed.subject).toBe(subject);
    // mailparser leaves an unknown header's encoded words as they are: join and Q-decode them.
    const words = String(parsed.headers.get('x-long')).match(/=\?UTF-8\?Q\?(.*?)\?=/g)!;
    expect(words.map((w) => w.slice(10, -2).replace(/_/g, ' ').replace(/=([0-9A-F]{2})/g, (_m, h: string) => String.fromCharCode(parseInt(h, 16)))).join('')).toBe(value);
  });

  it('html only → single text/html part; text only → text/plain', () => {
    expect(buildMessage({ ...base, html: '<b>x</b>' }, opts).raw.toString()).toMatch(/^Content-Type: text\/html; charset=utf-8$/m);
    expect(buildMessage({ ...base, text: 'x' }, opts).raw.toString()).toMatch(/^Content-Type: text\/plain; charset=utf-8$/m);
  });

  it('extra headers cannot inject headers, and caller copies of MTA-owned headers are stripped in any case', async () => {
    const b = buildMessage(
      {
        ...base,
        subject: 'Hi\r\nBcc: victim@evil.test',
        html: '<p>x</p>',
        headers: {
          'X-Tag': 'v\r\nBcc: victim@evil.test\nX-Injected: 1',
          BCC: 'victim@evil.test',
          'message-ID': '<forged@evil.test>',
          'DKIM-Signature': 'v=1; forged',
          'Cfbl-Address': 'x@evil.test',
          'Bad Name': 'x',
          'List-Unsubscribe': '<https://sender.test/u/1>',
        },
      },
      opts,
    );
    const raw = b.raw.toString('latin1');
    const headerBlock = raw.slice(0, raw.indexOf('\r\n\r\n'));
    expect(headerBlock).not.toMatch(/^Bcc:/im);
    expect(headerBlock).not.toMatch(/^X-Injected:/im);
    expect(headerBlock).not.toMatch(/forged/);
    expect(headerBlock).not.toMatch(/^cfbl-address:/im);
    expect(headerBlock.match(/^Message-ID:/gim)).toHaveLength(1);
    expect(headerBlock).toMatch(/^List-Unsubscribe: <https:\/\/sender\.test\/u\/1>$/m);
    expect(b.droppedHeaders.sort()).toEqual(['BCC', 'Bad Name', 'Cfbl-Address', 'DKIM-Signature', 'message-ID'].sort());
    const parsed = await simpleParser(b.raw);
    expect(parsed.headers.get('x-tag')).toContain('Bcc: victim@evil.test'); // folded into the value, harmless
    expect(parsed.bcc).toBeUndefined();
  });

  it('rejects a recipient that is not exactly one address', () => {
    expect(() => buildMessage({ ...base, to: 'a@x.test, b@y.test', html: 'x' }, opts)).toThrow(MessageBuildError);
    expect(() => buildMessage({ ...base, to: 'no-domain', html: 'x' }, opts)).toThrow(MessageBuildError);
  });

  it('IDN domains become A-labels in the envelope and the headers; a non-ASCII local part is refused (no SMTPUTF8)', () => {
    const b = buildMessage({ ...base, from: 'Jörg <news@Bücher.test>', to: 'rcpt@bücher.test', html: 'x' }, opts);
    expect(b.to).toEqual({ name: null, address: 'rcpt@xn--bcher-kva.test', domain: 'xn--bcher-kva.test' });
    const headerBlock = b.wire.slice(0, b.wire.indexOf('\r\n\r\n'));
    expect(headerBlock).toMatch(/^To: rcpt@xn--bcher-kva\.test$/m);
    expect(headerBlock).toMatch(/^From: =\?UTF-8\?Q\?J=C3=B6rg\?= <news@xn--bcher-kva\.test>$/m);
    expect(headerBlock).toMatch(/^[\x20-\x7e\r\n]*$/); // all ASCII
    for (const to of ['jörg@bücher.test', 'jörg@example.test']) {
      expect(() => buildMessage({ ...base, to, html: 'x' }, opts)).toThrow(MessageBuildError);
    }
    expect(() => buildMessage({ ...base, from: 'Jörg <jörg@sender.test>', html: 'x' }, opts)).toThrow(MessageBuildError);
  });

  it('Message-ID is stable per job and differs between jobs', () => {
    expect(stableMessageId('o', 'm1', 'Sender.test')).toBe(stableMessageId('o', 'm1', 'sender.test'));
    expect(stableMessageId('o', 'm1', 'sender.test')).not.toBe(stableMessageId('o', 'm2', 'sender.test'));
    expect(stableMessageId('o', 'm1', 'sender.test')).toMatch(/^<[A-Za-z0-9_-]{26}@sender\.test>$/);
  });
});

describe('VERP', () => {
  const key = 'k'.repeat(32);
  it('round-trips a send id through a signed return path', () => {
    const addr = verpAddress('msg/ü+1', key, 'Bounce.Example.test');
    expect(addr).toMatch(/^bounce\+[A-Za-z0-9_-]+\+[A-Za-z0-9_-]{16}@bounce\.example\.test$/);
    expect(parseVerpAddress(addr, { key, bounceHost: 'bounce.example.test' })).toEqual({ id: 'msg/ü+1', legacy: false, verified: true });
    expect(parseVerpAddress(`<${addr.replace('bounce+', 'BOUNCE+')}>`, { key, bounceHost: 'bounce.example.test' })?.id).toBe('msg/ü+1');
  });
  it('a queue job id makes a short local part; a token of the old form (message id) verifies as legacy, never as a send id', () => {
    const addr = verpAddress('9007199254740993', key, 'b.example.test');
    // RFC 5321 §4.5.3.1.1 allows 64; a 16-digit job id takes 46 (a long caller message id could pass 64).
    expect(addr.split('@')[0]!.length).toBe(46);
    // The old form: HMAC over the encoded id without the `send:` prefix (cfbl: with `cfbl:` only).
    const enc = Buffer.from('m-1').toString('base64url');
    const old = (input: string) => hmacSha256(key, input).subarray(0, 12).toString('base64url');
    expect(verifyToken(`${enc}+${old(enc)}`, key)).toEqual({ id: 'm-1', legacy: true, verified: true });
    expect(verifyToken(`${enc}+${old(`cfbl:${enc}`)}`, key, 'cfbl')).toEqual({ id: 'm-1', legacy: true, verified: true });
    expect(verifyToken(`${enc}+${old(enc)}`, key, 'cfbl')).toBeNull();
    expect(verifyToken(signToken('m-1', key), key)).toEqual({ id: 'm-1', legacy: false, verified: true });
    expect(signToken('m-1', key)).not.toBe(`${enc}+${old(enc)}`);
  });
  it('rejects forged, altered, foreign-host, wrong-key and cross-purpose tokens', () => {
    const token = signToken('m-1', key);
    const [id, mac] = token.split('+');
    expect(verifyToken(`${id}+${mac.slice(0, -1)}${mac.endsWith('A') ? 'B' : 'A'}`, key)).toBeNull();
    expect(verifyToken(`${Buffer.from('m-2').toString('base64url')}+${mac}`, key)).toBeNull();
    expect(verifyToken(token, 'other-key-other-key-other')).toBeNull();
    expect(verifyToken(token, key, 'cfbl')).toBeNull();
    expect(verifyToken(signToken('m-1', key, 'cfbl'), key, 'cfbl')?.verified).toBe(true);
    expect(parseVerpAddress(`bounce+${token}@elsewhere.test`, { key, bounceHost: 'bounce.example.test' })).toBeNull();
  });
  it('accepts the unsigned form only when allowed (isolated tests)', () => {
    const unsigned = `bounce+${Buffer.from('m-1').toString('base64url')}@b.test`;
    expect(parseVerpAddress(unsigned, { key, bounceHost: 'b.test' })).toBeNull();
    expect(parseVerpAddress(unsigned, { key, bounceHost: 'b.test', allowUnsigned: true })).toEqual({ id: 'm-1', legacy: false, verified: false });
  });
});

describe('SMTP DATA block', () => {
  it('dot-stuffs line-leading dots, ends with the terminator, and turns lone CR/LF into CRLF (no smuggling)', async () => {
    const { dataBlock } = await import('../../../src/mta/delivery/smtp.js');
    expect(dataBlock(Buffer.from('.a\r\nb\r\n.\r\n..c')).toString()).toBe('..a\r\nb\r\n..\r\n...c\r\n.\r\n');
    // "\n.\n" or "\r.\r" must never reach the wire as a terminator a lenient server would honour.
    const out = dataBlock(Buffer.from('x\n.\ny\r.\rz')).toString();
    expect(out).toBe('x\r\n..\r\ny\r\n..\r\nz\r\n.\r\n');
    expect(dataBlock(Buffer.from('ok\r\n')).toString()).toBe('ok\r\n.\r\n');
  });

  it('from pieces (signature fields + message) gives exactly the block of the joined text, written directly or through the general path', async () => {
    const { dataBlock } = await import('../../../src/mta/delivery/smtp.js');
    const sig = 'DKIM-Signature: v=1; a=rsa-sha256;\r\n\tb=abc\r\n';
    const cases: string[][] = [
      [sig, 'From: a@b\r\n\r\n<p>caf\xe9</p>\r\n'], // direct: nothing to change
      [sig, 'From: a@b\r\n\r\nno final line break'], // direct, CRLF appended
      [sig, 'From: a@b\r\n\r\n.leading dot\r\n'], // a dot inside a part
      [sig, '.first line of a part is a dot\r\n'], // a dot at a part's start
      [sig, 'lone\nLF and lone\rCR\r\n.\n'], // line breaks to repair
      ['no CRLF at the end of a non-final part', '\r\n.x\r\n'], // a CRLF and a dot across the boundary
      ['', 'x\r\n'],
      [sig, ''],
    ];
    for (const parts of cases) {
      expect(dataBlock(parts).toString('latin1'), JSON.stringify(parts)).toBe(dataBlock(parts.join('')).toString('latin1'));
    }
    expect(dataBlock(cases[1]!).toString('latin1')).toBe(`${sig}From: a@b\r\n\r\nno final line break\r\n.\r\n`);
    expect(dataBlock(cases[5]!).toString('latin1')).toBe('no CRLF at the end of a non-final part\r\n..x\r\n.\r\n');
  });
});
