import { generateKeyPairSync } from 'node:crypto';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dkimTxtRecord, parseSigningKey } from '../../../src/mta/delivery/dkim/keys.js';
import { relaxedBody, relaxedHeader } from '../../../src/mta/delivery/dkim/canonicalize.js';
import { dkimSign, type ParsedDkimKey } from '../../../src/mta/delivery/dkim/sign.js';
import { buildMessage } from '../../../src/mta/delivery/mime.js';
import { startDnsServer, type DnsServer } from '../../harness/dns.js';
import { dkimpyVerify } from './dkimpy.js';

const rsaPem = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
const edPem = generateKeyPairSync('ed25519').privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();

function key(pem: string, selector: string): ParsedDkimKey {
  const { key, algorithm } = parseSigningKey(pem);
  return { domain: 'sender.test', selector, algorithm, key };
}

let dns: DnsServer;
beforeAll(async () => {
  dns = await startDnsServer({
    zones: {
      'sender.test': [
        { name: 'rsa1._domainkey', type: 'TXT', value: dkimTxtRecord(rsaPem) },
        { name: 'ed1._domainkey', type: 'TXT', value: dkimTxtRecord(edPem) },
      ],
    },
  });
});
afterAll(async () => {
  await dns?.stop();
});

const job = {
  messageId: 'm-1',
  organizationId: 'org-1',
  from: 'Sender Ünïcode <news@sender.test>',
  to: 'rcpt@dest.test',
  subject: 'Grüße — a subject long enough that it has to be folded over more than one line in the header',
  html: '<p>Hello  wörld,\ttabs and  double spaces   </p>\n<p>second line</p>\n\n\n',
  text: 'Hello  wörld \nplain\t\ttext  \n',
  dkimDomain: 'sender.test',
  headers: {
    'List-Unsubscribe': '<https://sender.test/u/abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnop>, <mailto:unsub@sender.test?subject=unsubscribe>',
    'List-Unsubscribe-Post': 'List-Unsubscribe=One-Click',
    'X-Campaign': 'c-42',
  },
};

describe('DKIM signing verified by dkimpy', () => {
  for (const eightBit of [false, true]) {
    it(`RSA and Ed25519 signatures verify (${eightBit ? '8bit' : '7bit/QP'} body) and fail after one body byte changes`, async () => {
      const built = buildMessage(job, { messageIdHeader: '<x1@sender.test>', date: Date.UTC(2026, 0, 2), eightBit });
      const sig = await dkimSign(built.raw, [key(rsaPem, 'rsa1'), key(edPem, 'ed1')], 1767312000);
      const signed = Buffer.concat([Buffer.from(sig, 'latin1'), built.raw]);
      expect(sig).toMatch(/a=rsa-sha256; c=relaxed\/relaxed; d=sender\.test; s=rsa1;/);
      expect(sig).toMatch(/a=ed25519-sha256;/);
      const h = /h=([^;]+);/.exec(sig)![1].split(':');
      expect(h).toEqual(expect.arrayContaining(['from', 'to', 'subject', 'date', 'message-id', 'mime-version', 'content-type', 'list-unsubscribe', 'list-unsubscribe-post']));
      expect(h.filter((n) => n === 'from')).toHaveLength(2); // oversigned
      expect(h).not.toContain('x-campaign');
      expect(await dkimpyVerify(signed, dns)).toEqual(['pass', 'pass']);

      // One body byte changed: both fail.
      const text = signed.toString('latin1');
      const i = text.indexOf('second line');
      const tampered = Buffer.from(text.slice(0, i) + 'Second line' + text.slice(i + 'second line'.length), 'latin1');
      expect(await dkimpyVerify(tampered, dns)).toEqual(['fail', 'fail']);
    });
  }

  it('signatures made at once with one key all verify, each its own', async () => {
    const k = key(rsaPem, 'rsa1');
    const built = Array.from({ length: 10 }, (_, i) => buildMessage({ ...job, messageId: `m-${i}`, html: `<p>message ${i}</p>` }, { messageIdHeader: `<c${i}@sender.test>`, date: Date.UTC(2026, 0, 2), eightBit: false }));
    const sigs = await Promise.all(built.map((b) => dkimSign(b.raw, [k], 1767312000)));
    const signed = sigs.map((sig, i) => Buffer.concat([Buffer.from(sig, 'latin1'), built[i]!.raw]));
    for (const m of signed) expect(await dkimpyVerify(m, dns)).toEqual(['pass']);
    expect(new Set(sigs).size).toBe(10);
  });

  it('a signature survives relaxed-equivalent changes in transit (refolded header, trailing blank lines)', async () => {
    const built = buildMessage({ ...job, html: '<p>x</p>', text: undefined }, { messageIdHeader: '<x2@sender.test>', date: Date.UTC(2026, 0, 2), eightBit: false });
    const sig = await dkimSign(built.raw, [key(rsaPem, 'rsa1')], 1767312000);
    const text = Buffer.concat([Buffer.from(sig, 'latin1'), built.raw]).toString('latin1');
    const changed = text.replace('X-Campaign: c-42', 'X-Campaign:   c-42').replace(/Date: /, 'Date:  ') + '\r\n\r\n';
    expect(await dkimpyVerify(Buffer.from(changed, 'latin1'), dns)).toEqual(['pass']);
    // A second From header added in transit breaks the oversigned signature.
    const added = text.replace('MIME-Version: 1.0\r\n', 'MIME-Version: 1.0\r\nFrom: evil@attacker.test\r\n');
    expect(await dkimpyVerify(Buffer.from(added, 'latin1'), dns)).toEqual(['fail']);
  });
});

describe('relaxed canonicalization (RFC 6376 §3.4.5 example)', () => {
  it('headers', () => {
    expect(relaxedHeader('A: X')).toBe('a:X\r\n');
    expect(relaxedHeader('B : Y\t\r\n\tZ  ')).toBe('b:Y Z\r\n');
  });
  it('body', () => {
    expect(relaxedBody(' C \r\nD \t E\r\n\r\n\r\n')).toBe(' C\r\nD E\r\n');
    expect(relaxedBody('')).toBe('');
    expect(relaxedBody('\r\n\r\n')).toBe('');
    expect(relaxedBody('abc')).toBe('abc\r\n');
    // Each trigger on its own (the fast path must not skip any of them).
    expect(relaxedBody('a  b\r\n')).toBe('a b\r\n');
    expect(relaxedBody('a\tb\r\n')).toBe('a b\r\n');
    expect(relaxedBody('a \r\nb\r\n')).toBe('a\r\nb\r\n');
    expect(relaxedBody('a \t \r\n')).toBe('a\r\n');
    expect(relaxedBody('a b c\r\nd e\r\n')).toBe('a b c\r\nd e\r\n');
    expect(relaxedBody('a \rb\r\n')).toBe('a \rb\r\n'); // a lone CR is not a line break
    expect(relaxedBody('end ')).toBe('end\r\n');
  });
  it('body: any CRLF text gives what RFC 6376 §3.4.4 says, line by line', () => {
    // The RFC's two rules and its end-of-body rule, read literally.
    const reference = (body: string) => {
      const lines = body.split('\r\n').map((l) => l.replace(/[ \t]+/g, ' ').replace(/ $/, ''));
      while (lines.length > 0 && lines[lines.length - 1] === '') lines.pop();
      return lines.length === 0 ? '' : `${lines.join('\r\n')}\r\n`;
    };
    fc.assert(
      fc.property(fc.array(fc.constantFrom('a', 'b', ' ', '  ', '\t', ' \t ', '\r\n', '\r', '='), { maxLength: 40 }), (parts) => {
        const body = parts.join('');
        expect(relaxedBody(body)).toBe(reference(body));
      }),
      { numRuns: 5000 },
    );
  });
});
