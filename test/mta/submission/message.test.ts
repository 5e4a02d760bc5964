/** The header reading of submitted octets: one pass, the body never read, Bcc removed byte for byte. */
import { describe, expect, it } from 'vitest';
import { readHeaders, stripBcc } from '../../../src/mta/submission/message.js';

const b = (s: string) => Buffer.from(s, 'latin1');

describe('submitted message headers', () => {
  it('reads From, the key and dedup fields, and strips folded Bcc fields, leaving the body alone', () => {
    const raw = b('From: A <a@s.test>\r\nBcc: x@d.test,\r\n y@d.test\r\nX-Lettermill-Idempotency-Key: k1\r\nSubject: hi\r\nbcc: z@d.test\r\n\r\nBcc: body line\r\n');
    const h = readHeaders(raw);
    expect(h.from).toEqual(['A <a@s.test>']);
    expect(h.idempotencyKey).toEqual(['k1']);
    expect(h.bcc).toHaveLength(2);
    expect(stripBcc(raw, h).toString('latin1')).toBe('From: A <a@s.test>\r\nX-Lettermill-Idempotency-Key: k1\r\nSubject: hi\r\n\r\nBcc: body line\r\n');
    expect(stripBcc(raw).equals(stripBcc(raw, h))).toBe(true);
  });

  it('a message with no header block, and one with no blank line, are read as before', () => {
    const none = b('\r\nFrom: not a header\r\n');
    expect(readHeaders(none).from).toEqual([]);
    expect(stripBcc(none)).toBe(none);
    const noBlank = b('From: a@s.test\r\nBcc: x@d.test\r\n');
    expect(readHeaders(noBlank).from).toEqual(['a@s.test']);
    expect(stripBcc(noBlank).toString('latin1')).toBe('From: a@s.test\r\n');
  });

  it('only the first MB is header: a blank line past it is not looked for', () => {
    const raw = Buffer.concat([b('From: a@s.test\r\nX-Long: '), Buffer.alloc(1024 * 1024, 'a'), b('\r\nBcc: late@d.test\r\n\r\nbody')]);
    const h = readHeaders(raw);
    expect(h.from).toEqual(['a@s.test']);
    expect(h.bcc).toEqual([]);
  });
});
