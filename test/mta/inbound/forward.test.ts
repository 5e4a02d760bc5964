/**
 * Re-origination of the message bytes (src/mta/inbound/forward.ts): which fields go, which
 * are written, and the body kept byte for byte, with CRLF and bare-LF input.
 */
import { describe, expect, it } from 'vitest';
import { headerFields, reoriginate } from '../../../src/mta/inbound/forward.js';

const o = { fromAddress: 'info@mailbox.test', authResults: 'mx.test; spf=pass', domain: 'mailbox.test' };

describe('reoriginate', () => {
  it('rewrites From (display name kept), sets Reply-To, records results, drops transport and signature fields, keeps the body', () => {
    const body = 'Line one\r\n\r\nLine two with DKIM-Signature: in the body\r\n';
    const raw = Buffer.from(
      [
        'Received: from a by b',
        'DKIM-Signature: v=1; d=outside.test;',
        '\tb=abc',
        'ARC-Seal: i=1; cv=none',
        'From: =?utf-8?q?Al=C3=AFce?= <alice@outside.test>',
        'Sender: list@outside.test',
        'Message-ID: <1@outside.test>',
        'Subject: Folded',
        ' subject',
        '',
        body,
      ].join('\r\n'),
    );
    const out = reoriginate(raw, o);
    const text = out.raw.toString('latin1');
    const [head, ...rest] = text.split('\r\n\r\n');
    expect(rest.join('\r\n\r\n')).toBe(body);
    expect(out.from).toBe('=?utf-8?q?Al=C3=AFce?= <info@mailbox.test>');
    expect(head).toContain('From: =?utf-8?q?Al=C3=AFce?= <info@mailbox.test>\r\n');
    expect(head).toContain('Reply-To: =?utf-8?q?Al=C3=AFce?= <alice@outside.test>\r\n');
    expect(head).toContain('X-Original-Authentication-Results: mx.test; spf=pass\r\n');
    expect(head).toContain('X-Lettermill-Loop: mailbox.test\r\n');
    expect(head).toContain('Subject: Folded\r\n subject');
    for (const gone of [/^Received:/m, /^DKIM-Signature:/m, /^ARC-Seal:/m, /^Sender:/m, /^Message-ID:/m, /b=abc/]) expect(head).not.toMatch(gone);
  });

  it('keeps an existing Reply-To, and a From without a display name becomes the bare address', () => {
    const out = reoriginate(Buffer.from('From: alice@outside.test\r\nReply-To: team@outside.test\r\n\r\nhi\r\n'), o);
    expect(out.from).toBe('info@mailbox.test');
    expect(out.raw.toString()).toMatch(/^From: info@mailbox\.test\r\nReply-To: team@outside\.test\r\n/);
  });

  it('reads bare-LF input: fields found, body kept', () => {
    const raw = Buffer.from('From: A <a@outside.test>\nX-Lettermill-Loop: other.test\nSubject: lf\n\nbody\nline\n');
    const { fields } = headerFields(raw);
    expect(fields.map((f) => f.name)).toEqual(['from', 'x-lettermill-loop', 'subject']);
    const out = reoriginate(raw, o).raw.toString();
    expect(out).toMatch(/\r\nSubject: lf\r\n\r\nbody\nline\n$/);
    expect(out.match(/X-Lettermill-Loop/g)).toHaveLength(1);
  });
});
