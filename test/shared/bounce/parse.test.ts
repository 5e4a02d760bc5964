import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseReport } from '../../../src/shared/mail/bounce/parse.js';

const dir = join(import.meta.dirname, '../../fixtures/bounces');
const read = (name: string) => readFileSync(join(dir, name));

describe('parseReport: plain-text and DSN bounces written from the vendors’ documented formats', () => {
  const cases: [file: string, recipient: string, status: string | null, reply: number | null, reason: string, hard: boolean][] = [
    ['vendor/qmail.eml', 'nobody@qmail.example', '5.1.1', 550, 'userunknown', true],
    ['vendor/exim.eml', 'full@exim.example', '5.2.2', 552, 'mailboxfull', false],
    ['vendor/sendmail.eml', 'gone@sendmail.example', '5.1.1', 550, 'userunknown', true],
    ['vendor/office365.eml', 'missing@contoso.example', '5.1.10', 550, 'userunknown', true],
    ['vendor/gmail-legacy.eml', 'nouser@gmail-dest.example', '5.1.1', 550, 'userunknown', true],
    ['vendor/gmail-dsn.eml', 'x@gmail.com', '5.1.1', 550, 'userunknown', true],
    ['vendor/yahoo.eml', 'blocked@yahoo-dest.example', '5.7.9', 554, 'policyviolation', false],
    ['vendor/outlook-com.eml', 'ghost@outlook.com', '5.5.0', 550, 'userunknown', true],
    ['vendor/icloud.eml', 'full@icloud.com', '5.2.2', 552, 'mailboxfull', false],
    ['vendor/ses.eml', 'nouser@ses-dest.example', '5.1.1', 550, 'userunknown', true],
    ['vendor/mimecast.eml', 'victim@mimecast-dest.example', '5.0.0', 550, 'policyviolation', false],
    ['vendor/postfix-delayed.eml', 'slow@postfix-dest.example', '4.4.1', null, 'expired', false],
    ['vendor/latin1.eml', 'müller@firma.example', '5.1.1', 550, 'userunknown', true],
    ['vendor/gmx.eml', 'nobody@gmx-dest.example', '5.1.1', 550, 'userunknown', true],
    ['vendor/zoho.eml', 'full@zoho-dest.example', '5.2.2', 552, 'mailboxfull', false],
    ['vendor/domino.eml', 'nobody@domino.example', null, null, 'userunknown', true],
    // No command named: Sisimai's order reads user-unknown words under 5.7.1 as a filter.
    ['vendor/yandex.eml', 'nouser@yandex.ru', '5.7.1', 550, 'filtered', false],
  ];
  for (const [file, recipient, status, reply, reason, hard] of cases) {
    it(`${file} → ${recipient} ${status} ${reason} ${hard ? 'hard' : 'soft'}`, async () => {
      const r = await parseReport(read(file));
      expect(r.kind).toBe('dsn');
      expect(r.recipients).toHaveLength(1);
      expect(r.recipients[0]).toMatchObject({ recipient, status, replyCode: reply, reason, hardBounce: hard });
      expect(r.recipients[0]!.diagnostic).toBeTruthy();
    });
  }

  it('reads the returned original headers: CFBL-Feedback-ID, Message-ID, Return-Path', async () => {
    for (const file of ['vendor/qmail.eml', 'vendor/exim.eml', 'vendor/sendmail.eml', 'vendor/office365.eml', 'vendor/gmail-dsn.eml', 'vendor/gmx.eml', 'vendor/yandex.eml']) {
      const r = await parseReport(read(file));
      expect(r, file).toMatchObject({ cfblFeedbackId: '42:cfbltoken', originalMessageId: 'orig-1@lettermill.test', originalMailFrom: 'bounce+tok123@bounces.lettermill.test' });
    }
  });

  it('a DSN keeps Action and Remote-MTA; a delivery notice is `delivered`, not a failure', async () => {
    const delayed = await parseReport(read('vendor/postfix-delayed.eml'));
    expect(delayed.recipients[0]).toMatchObject({ action: 'delayed', remoteMta: 'mx.postfix-dest.example' });
    const ok = await parseReport(read('vendor/delivered.eml'));
    expect(ok.recipients[0]).toMatchObject({ recipient: 'happy@postfix-dest.example', action: 'delivered', reason: 'delivered', hardBounce: false });
  });

  it('an auto-reply (RFC 3834) is `vacation` from its sender, not a failure', async () => {
    const r = await parseReport(read('vendor/vacation.eml'));
    expect(r.kind).toBe('autoreply');
    expect(r.recipients).toEqual([expect.objectContaining({ recipient: 'jane@vacation.example', reason: 'vacation', hardBounce: false })]);
  });

  it('LF, CRLF and bare CR give the same report', async () => {
    for (const file of ['vendor/sendmail.eml', 'vendor/gmail-dsn.eml', 'arf-cfbl.eml'.replace(/^/, 'vendor/')]) {
      const lf = read(file).toString('latin1');
      const want = await parseReport(lf);
      expect(await parseReport(Buffer.from(lf.replace(/\n/g, '\r\n'), 'latin1')), `${file} CRLF`).toEqual(want);
      expect(await parseReport(Buffer.from(lf.replace(/\n/g, '\r'), 'latin1')), `${file} CR`).toEqual(want);
    }
  });

  it('garbage, empty input and a plain message are `unknown`/`undefined`, never a throw', async () => {
    for (const raw of [read('vendor/garbage.eml'), Buffer.alloc(0), '\r\r\n\n', Buffer.from([0xff, 0xfe, 0, 1, 2]), read('cfbl-example.eml')]) {
      const r = await parseReport(raw);
      expect(r.kind).toBe('unknown');
      expect(r.recipients).toEqual([expect.objectContaining({ recipient: null, reason: 'undefined', hardBounce: false })]);
    }
  });
});

describe('parseReport: feedback reports (RFC 5965)', () => {
  it('reads every ARF field and the returned original’s CFBL-Feedback-ID (unfolded)', async () => {
    const r = await parseReport(read('vendor/arf-cfbl.eml'));
    expect(r).toMatchObject({
      kind: 'arf',
      feedbackType: 'abuse',
      feedback: {
        userAgent: 'MailboxFBL/2.1',
        originalMailFrom: 'bounce+tok123@bounces.lettermill.test',
        originalRcptTo: 'reader@mailbox.example',
        arrivalDate: 'Mon, 23 Nov 2026 10:00:00 +0000',
        reportedDomain: 'lettermill.test',
      },
      originalMailFrom: 'bounce+tok123@bounces.lettermill.test',
      cfblFeedbackId: '42:cfbltoken -folded',
      originalMessageId: 'orig-1@lettermill.test',
    });
    expect(r.recipients).toEqual([expect.objectContaining({ recipient: 'reader@mailbox.example', reason: 'feedback', hardBounce: false })]);
  });

  // The RFC samples (../shared/testdata/rfc, copied); expectations read off each file.
  const samples: [string, string, string | null, string | null, string | null][] = [
    ['arf-mailauth-001.eml', 'abuse', null, null, '8787KJKJ3K4J3K4J3K4J3.mail@example.net'],
    ['arf-mailauth-002.eml', 'abuse', 'user@example.com', 'somespammer@example.net', null],
    ['arf-mailauth-003.eml', 'auth-failure', 'user@example.com', 'randomuser@example.net', null],
    ['arf-mailauth-004.eml', 'auth-failure', 'address@myotherdomain.name', 'info@interpublication.org', null],
    ['arf-mailauth-005.eml', 'auth-failure', 'someuser@receiver.example', 'anexample.reply@a.sender.example', '87913910.1318094604546@out.sender.example'],
  ];
  for (const [file, type, rcpt, mailFrom, messageId] of samples) {
    it(`${file}: ${type}`, async () => {
      const r = await parseReport(read(file));
      expect(r).toMatchObject({ kind: 'arf', feedbackType: type, originalMailFrom: mailFrom, originalMessageId: messageId });
      expect(r.recipients).toEqual([expect.objectContaining({ recipient: rcpt, reason: 'feedback', hardBounce: false, status: null })]);
    });
  }
});

describe('addressInText (the address module reads addresses out of report prose)', async () => {
  const { addressInText } = await import('../../../src/shared/mail/address.js');
  it('normalizes ours, keeps SMTPUTF8 local parts as written, ignores non-addresses', () => {
    expect(addressInText('Remote host said: <Nobody@Example.COM>: user unknown')).toBe('nobody@example.com');
    expect(addressInText('Empfänger müller@firma.example.')).toBe('müller@firma.example');
    expect(addressInText('host mx.example.com [192.0.2.1] said: 550 no')).toBeNull();
    expect(addressInText('user@localhost')).toBeNull();
  });
});

describe('parseReport never throws (property)', async () => {
  const fc = (await import('fast-check')).default;
  const { BOUNCE_REASONS } = await import('../../../src/shared/mail/bounce/types.js');
  const pieces = ['Content-Type: multipart/report; report-type=delivery-status; boundary="b"\n', '--b\n', 'Content-Type: message/delivery-status\n\n', 'Final-Recipient: rfc822; ', 'Status: 5.1.1\n', 'Diagnostic-Code: smtp; 550 ', 'Content-Type: message/feedback-report\n\n', 'Feedback-Type: abuse\n', 'From: MAILER-DAEMON@x.example\n', '\n', '\r', '\0', '<a@b.example>:\n', 'Content-Type: message/rfc822\n\n', '=?utf-8?B?w6k=?=', '\xff\xfe'];
  it('any mix of report pieces and noise: one shape, only the vocabulary', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(fc.oneof(fc.constantFrom(...pieces), fc.string({ maxLength: 30 })), { maxLength: 25 }), async (parts) => {
        const r = await parseReport(Buffer.from(parts.join(''), 'latin1'));
        return r.recipients.length >= 1 && r.recipients.every((x) => (BOUNCE_REASONS as readonly string[]).includes(x.reason));
      }),
      { seed: 20261125, numRuns: 300 },
    );
  }, 60_000);
});
