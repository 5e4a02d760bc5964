import { execFileSync } from 'node:child_process';
import fc from 'fast-check';
import { simpleParser } from 'mailparser';
import { describe, expect, it } from 'vitest';
import { buildMessage } from '../../../src/mta/delivery/mime.js';
import { encodeQuotedPrintable, qpEscapes } from '../../../src/mta/delivery/qp.js';

const crlf = (b: Buffer) => Buffer.from(b.toString('latin1').replace(/\r\n|\r|\n/g, '\r\n'), 'latin1');

/** Encoded text is well-formed QP: ASCII printable, space and tab, CRLF; lines ≤ 76; no whitespace before a line break or at the end. */
function wellFormed(enc: string): void {
  expect(/^[\x20-\x7e\t\r\n]*$/.test(enc)).toBe(true);
  expect(/\r(?!\n)|(?<!\r)\n/.test(enc)).toBe(false);
  for (const line of enc.split('\r\n')) {
    expect(line.length).toBeLessThanOrEqual(76);
    expect(/[ \t]$/.test(line)).toBe(false);
    expect(/=(?![0-9A-F]{2}|$)/.test(line)).toBe(false); // `=` only as =XX or a soft break
  }
}

/** mailparser's decoding of a QP attachment: the bytes, exactly. */
async function decoded(enc: string): Promise<Buffer> {
  const msg = `Content-Type: application/octet-stream\r\nContent-Disposition: attachment; filename=x.bin\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n${enc}`;
  return (await simpleParser(Buffer.from(msg, 'latin1'))).attachments[0]?.content ?? Buffer.alloc(0);
}

describe('quoted-printable encoder', () => {
  it('any bytes: well-formed, and mailparser decodes them back with CRLF line breaks', async () => {
    const piece = fc.oneof(
      fc.string({ maxLength: 90 }),
      fc.constantFrom(' ', '\t', '=', '\r\n', '\n', '\r', ' \r\n', '\t\n', '.', '=\r\n', 'x'.repeat(75), 'y'.repeat(76), 'z'.repeat(77)),
      fc.uint8Array({ maxLength: 20 }).map((a) => Buffer.from(a).toString('latin1')),
    );
    await fc.assert(
      fc.asyncProperty(fc.array(piece, { maxLength: 30 }), async (pieces) => {
        const input = Buffer.from(pieces.join(''), 'latin1');
        const enc = encodeQuotedPrintable(input);
        wellFormed(enc);
        expect((await decoded(enc)).equals(crlf(input))).toBe(true);
      }),
      { numRuns: 1500 },
    );
  });

  it('the exact forms: =, trailing space and tab, the 76th column, a soft break never inside =XX', () => {
    expect(encodeQuotedPrintable(Buffer.from('a=b'))).toBe('a=3Db');
    expect(encodeQuotedPrintable(Buffer.from('end \r\nnext\t'))).toBe('end=20\r\nnext=09');
    expect(encodeQuotedPrintable(Buffer.from('x'.repeat(76)))).toBe('x'.repeat(76));
    expect(encodeQuotedPrintable(Buffer.from('x'.repeat(77)))).toBe(`${'x'.repeat(75)}=\r\nxx`);
    expect(encodeQuotedPrintable(Buffer.from(`${'x'.repeat(74)}é`))).toBe(`${'x'.repeat(74)}=\r\n=C3=A9`);
    expect(qpEscapes(Buffer.from('a=é\t \r\n'))).toBe(3);
  });

  it("Python's quopri decodes it to the same bytes (a second, independent decoder)", () => {
    const input = Buffer.from(`<p style="color:#333">Grüße = €42 \t\n${'<td>'.repeat(300)}</p>\r\n.\r\ntrailing \t`, 'utf8');
    const decoded = execFileSync('/usr/bin/python3', ['-c', 'import sys, quopri; sys.stdout.buffer.write(quopri.decodestring(sys.stdin.buffer.read()))'], { input: encodeQuotedPrintable(input) });
    expect(decoded.equals(crlf(input))).toBe(true);
  });

  it('a 12 KB HTML part with a long line goes out as QP (smaller than base64, read back exactly); 100 KB as base64', async () => {
    const html = (n: number) => `<html><body>${Array.from({ length: n }, (_, i) => `<a href="https://t.example.test/c/${i}" style="color:#1a73e8">Grüße ${i}</a>`).join('')}</body></html>`;
    const build = (h: string) =>
      buildMessage(
        { messageId: 'm', organizationId: 'o', from: 'News <news@sender.test>', to: 'r@dest.test', subject: 'QP', html: h, dkimDomain: 'sender.test' },
        { messageIdHeader: '<qp@sender.test>', date: Date.UTC(2026, 0, 2), eightBit: true },
      );
    const small = html(150);
    const b = build(small);
    expect(b.raw.toString('latin1')).toMatch(/Content-Transfer-Encoding: quoted-printable/);
    expect(b.raw.length).toBeLessThan(Buffer.byteLength(small) * 1.3); // base64: ×1.37 with its line breaks
    // The part's closing line break is the format's (message.test.ts reads single parts the same way).
    expect(((await simpleParser(b.raw)).html || '').replace(/\n$/, '') === small).toBe(true);
    const big = build(html(1200));
    expect(big.raw.toString('latin1')).toMatch(/Content-Transfer-Encoding: base64/);
    expect(((await simpleParser(big.raw)).html || '').replace(/\n$/, '') === html(1200)).toBe(true);
  });

  it('a small part that is mostly not ASCII goes out as base64, the smaller form', () => {
    const b = buildMessage(
      { messageId: 'm', organizationId: 'o', from: 'a@sender.test', to: 'r@dest.test', subject: 'CJK', html: `<p>${'日本語のテキスト'.repeat(200)}</p>`, dkimDomain: 'sender.test' },
      { messageIdHeader: '<cjk@sender.test>', date: Date.UTC(2026, 0, 2), eightBit: false },
    );
    expect(b.raw.toString('latin1')).toMatch(/Content-Transfer-Encoding: base64/);
  });
});
