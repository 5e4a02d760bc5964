import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseReport } from '../../../src/shared/mail/bounce/parse.js';

const dir = join(import.meta.dirname, '../../fixtures/bounces');
const read = (name: string) => readFileSync(join(dir, name));

type Case = [file: string, recipient: string, status: string | null, reply: number | null, reason: string, hard: boolean];

/** One test per fixture: a DSN of one recipient with this status, reply code and verdict; `more` checks the rest. */
function expectEach(cases: Case[], more?: (r: Awaited<ReturnType<typeof parseReport>>) => void): void {
  for (const [file, recipient, status, reply, reason, hard] of cases) {
    it(`${file} → ${recipient} ${status} ${reason} ${hard ? 'hard' : 'soft'}`, async () => {
      const r = await parseReport(read(file));
      expect(r.kind).toBe('dsn');
      expect(r.recipients).toHaveLength(1);
      expect(r.recipients[0]).toMatchObject({ recipient, status, replyCode: reply, reason, hardBounce: hard });
      expect(r.recipients[0]!.diagnostic).toBeTruthy();
      more?.(r);
    });
  }
}

describe('parseReport: plain-text and DSN bounces written from the vendors’ documented formats', () => {
  const cases: Case[] = [
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
  expectEach(cases);

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

describe('parseReport: the wider vendor set (test/fixtures/bounces/vendor/SOURCES.md names each one’s document and reason)', () => {
  const cases: Case[] = [
    // Microsoft 365 / Exchange Online and Exchange Server (NDR codes, learn.microsoft.com)
    ['vendor/o365-relay-denied.eml', 'ghost@fabrikam.example', '5.4.1', 550, 'norelaying', false],
    ['vendor/o365-dbeb-access-denied.eml', 'nobody@fabrikam.example', '5.4.1', 550, 'userunknown', true],
    ['vendor/o365-not-authorized.eml', 'allstaff@contoso.example', '5.7.1', 550, 'rejected', false],
    ['vendor/o365-mailbox-full.eml', 'full@contoso.example', '5.2.2', 554, 'mailboxfull', false],
    ['vendor/o365-tenant-5.7.708.eml', 'user@tenant.example', '5.7.708', 550, 'speeding', false],
    ['vendor/o365-tenant-5.7.750.eml', 'user@partner.example', '5.7.750', 550, 'rejected', false],
    ['vendor/o365-banned-ip.eml', 'user@fabrikam.example', '5.7.606', 550, 'blocked', false],
    ['vendor/o365-dmarc.eml', 'user@fabrikam.example', '5.7.509', 550, 'authfailure', false],
    ['vendor/o365-too-many-recipients.eml', 'list@fabrikam.example', '4.5.3', 452, 'toomanyconn', false],
    ['vendor/outlook-com-s3150.eml', 'someone@hotmail.com', '5.7.1', 550, 'blocked', false],
    ['vendor/exchange2010-recipnotfound.eml', 'left@corp.example', '5.1.1', 550, 'userunknown', true],
    ['vendor/exchange-content-filter.eml', 'reader@edge-dest.example', '5.7.1', 550, 'spamdetected', false],
    // Nested multipart/alternative (text and HTML) inside the report: mailparser reads it.
    ['vendor/o365-ndr-multipart.eml', 'nobody@contoso.example', '5.1.10', 550, 'userunknown', true],
    // Gmail / Google Workspace (SMTP error reference); multi-line replies joined by Postfix
    ['vendor/gmail-receiving-too-quickly.eml', 'busy@gmail.com', '4.2.1', 450, 'speeding', false],
    ['vendor/gmail-dmarc.eml', 'reader@gmail.com', '5.7.26', 550, 'authfailure', false],
    ['vendor/gmail-unauthenticated.eml', 'reader2@gmail.com', '5.7.26', 550, 'authfailure', false],
    ['vendor/gmail-spam.eml', 'reader3@gmail.com', '5.7.1', 550, 'spamdetected', false],
    ['vendor/gmail-rate-4.7.28.eml', 'reader4@gmail.com', '4.7.28', 421, 'blocked', false],
    ['vendor/gmail-disabled.eml', 'closed@gmail.com', '5.2.1', 550, 'suspend', false],
    ['vendor/gmail-over-quota.eml', 'hoarder@gmail.com', '5.2.2', 552, 'mailboxfull', false],
    ['vendor/gmail-ptr.eml', 'reader5@gmail.com', '5.7.25', 550, 'requireptr', false],
    ['vendor/gmail-low-reputation.eml', 'reader6@gmail.com', '4.7.0', 421, 'badreputation', false],
    ['vendor/gmail-policy.eml', 'reader7@gmail.com', '5.7.1', 550, 'policyviolation', false],
    ['vendor/gmail-security-content.eml', 'reader8@gmail.com', '5.7.0', 552, 'policyviolation', false],
    // Yahoo (sender hub SMTP error codes)
    ['vendor/yahoo-tss04.eml', 'slow@yahoo.com', '4.7.0', 421, 'badreputation', false],
    ['vendor/yahoo-spamhaus.eml', 'listed@yahoo.com', '5.7.1', 553, 'blocked', false],
    ['vendor/yahoo-no-account.eml', 'gone@yahoo.com', null, 554, 'userunknown', true],
    // Sendmail, qmail, Courier, Exim, Postfix: the MTAs’ own bounce texts
    ['vendor/sendmail-deferred-timeout.eml', 'late@sendmail-dest.example', '4.4.1', null, 'expired', false],
    ['vendor/sendmail-host-unknown.eml', 'someone@no-such-domain.example', '5.1.2', 550, 'hostunknown', true],
    ['vendor/sendmail-relaying-denied.eml', 'user@elsewhere2.example', '5.7.1', 550, 'norelaying', false],
    ['vendor/qmail-no-mailbox.eml', 'nobody@qmail-dest.example', '5.1.1', null, 'userunknown', true],
    ['vendor/qmail-over-quota.eml', 'full@qmail-dest.example', '5.2.2', null, 'mailboxfull', false],
    ['vendor/qmail-queue-too-long.eml', 'late@qmail-far.example', '4.4.2', null, 'expired', false],
    ['vendor/qmail-no-host.eml', 'someone@nx.qmail-far.example', '5.1.2', null, 'hostunknown', true],
    ['vendor/courier-userunknown.eml', 'nobody@courier-dest.example', '5.0.0', 550, 'userunknown', true],
    ['vendor/exim-retry-timeout.eml', 'late@exim-dest.example', null, null, 'expired', false],
    ['vendor/exim-hosts-failing.eml', 'late2@exim-dest.example', null, null, 'expired', false],
    ['vendor/exim-retry-not-reached.eml', 'late3@exim-dest.example', null, null, 'expired', false],
    ['vendor/exim-delay-warning.eml', 'late4@exim-dest.example', null, null, 'expired', false],
    ['vendor/exim-unrouteable.eml', 'someone@nx.exim-dest.example', null, null, 'hostunknown', true],
    ['vendor/exim-rbl.eml', 'reader@exim-dest.example', '5.7.1', 550, 'blocked', false],
    ['vendor/exim-sender-verify.eml', 'user@exim-strict.example', '5.1.1', 550, 'rejected', false],
    ['vendor/postfix-host-not-found.eml', 'someone@no-such-domain.example', '5.4.4', null, 'hostunknown', true],
    ['vendor/postfix-name-service-error.eml', 'someone@flaky-dns.example', '4.4.3', null, 'hostunknown', true],
    ['vendor/postfix-size-limit.eml', 'big@postfix-dest.example', '5.3.4', 552, 'mesgtoobig', false],
    ['vendor/postfix-access-denied.eml', 'denied@postfix-dest.example', '5.7.1', 554, 'userunknown', true],
    ['vendor/postfix-relay-denied.eml', 'user@elsewhere.example', '5.7.1', 554, 'norelaying', false],
    ['vendor/postfix-sender-domain.eml', 'user@strict.example', '5.1.8', 550, 'rejected', false],
    ['vendor/postfix-local-mailbox-full.eml', 'full@postfix-local.example', '5.2.2', null, 'mailboxfull', false],
    ['vendor/postfix-helo-rejected.eml', 'user@strict.example', '5.5.2', 504, 'blocked', false],
    ['vendor/postfix-no-ptr.eml', 'user@strict2.example', '4.7.1', 450, 'requireptr', false],
    ['vendor/postfix-mailbox-disabled.eml', 'closed@postfix-dest.example', '5.2.1', 550, 'suspend', false],
    ['vendor/postfix-too-many-connections.eml', 'busy@postfix-dest.example', '4.7.0', 421, 'toomanyconn', false],
    // Filters and mailbox providers
    ['vendor/barracuda.eml', 'user@barracuda-dest.example', '5.0.0', 554, 'blocked', false],
    ['vendor/proofpoint.eml', 'user@pp-dest.example', '5.7.1', 554, 'blocked', false],
    ['vendor/mimecast-invalid-recipient.eml', 'nobody@mc-dest.example', '5.0.0', 550, 'userunknown', true],
    ['vendor/ironport-address-rejected.eml', 'left@ironport-dest.example', '5.1.0', 550, 'userunknown', true],
    ['vendor/icloud-spamhaus.eml', 'reader@icloud.com', '5.7.1', 550, 'blocked', false],
    ['vendor/icloud-user-unknown.eml', 'gone@icloud.com', '5.1.1', 550, 'userunknown', true],
    ['vendor/gmx-ptr.eml', 'reader@gmx.net', '5.0.0', 554, 'requireptr', false],
    ['vendor/comcast-dnsbl.eml', 'reader@comcast.net', '5.0.0', 554, 'blocked', false],
    ['vendor/mailru-invalid-mailbox.eml', 'nobody@mail.ru', '5.0.0', 550, 'userunknown', true],
    ['vendor/qq-mailbox-not-found.eml', '10000@qq.com', '5.0.0', 550, 'userunknown', true],
    ['vendor/qq-content-denied.eml', '20000@qq.com', '5.0.0', 550, 'spamdetected', false],
    ['vendor/163-spam.eml', 'reader@163.com', '5.0.0', 554, 'spamdetected', false],
    ['vendor/163-user-not-found.eml', 'nobody@163.com', '5.0.0', 550, 'userunknown', true],
  ];
  expectEach(cases, (r) =>
    expect(r, 'the returned original').toMatchObject({ cfblFeedbackId: '42:cfbltoken', originalMessageId: 'orig-1@lettermill.test', originalMailFrom: 'bounce+tok123@bounces.lettermill.test' }),
  );

  it('every vendor fixture is in a table (a new file without an expectation fails)', () => {
    const listed = new Set([...cases.map((c) => c[0])]);
    const old = ['arf-cfbl', 'delivered', 'domino', 'exim', 'garbage', 'gmail-dsn', 'gmail-legacy', 'gmx', 'icloud', 'latin1', 'mimecast', 'office365', 'outlook-com', 'postfix-delayed', 'qmail', 'sendmail', 'ses', 'vacation', 'yahoo', 'yandex', 'zoho'];
    const unlisted = readdirSync(join(dir, 'vendor')).filter((f) => f.endsWith('.eml') && !listed.has(`vendor/${f}`) && !old.includes(f.replace(/\.eml$/, '')));
    expect(unlisted).toEqual([]);
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

describe('the light MIME pass (flat multipart/report) against mailparser reading everything', () => {
  const all = (d: string): string[] =>
    readdirSync(d, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? all(join(d, e.name)) : e.name.endsWith('.eml') ? [join(d, e.name)] : []));

  it('the same report from every fixture, in LF, CRLF and bare CR', async () => {
    const files = all(dir);
    expect(files.length).toBeGreaterThan(25);
    for (const f of files) {
      const lf = readFileSync(f, 'latin1').replace(/\r\n?/g, '\n');
      for (const eol of ['\n', '\r\n', '\r']) {
        const raw = Buffer.from(lf.replace(/\n/g, eol), 'latin1');
        expect(await parseReport(raw), `${f} ${JSON.stringify(eol)}`).toEqual(await parseReport(raw, { thorough: true }));
      }
    }
  });

  it('decodes base64 and quoted-printable parts and the notification’s charset', async () => {
    const status = Buffer.from(['Reporting-MTA: dns; mx.firma.example', '', 'Final-Recipient: rfc822; kunde@firma.example', 'Action: failed', 'Status: 5.1.1', ''].join('\r\n')).toString('base64');
    const report = (charset: string, text: Buffer) =>
      [
        'From: MAILER-DAEMON@mx.firma.example',
        'To: bounce@sender.test',
        'Subject: Unzustellbar',
        'MIME-Version: 1.0',
        'Content-Type: multipart/report; report-type=delivery-status;',
        '\tboundary="=_b 1"',
        '',
        '--=_b 1',
        `Content-Type: text/plain; charset="${charset}"`,
        'Content-Transfer-Encoding: quoted-printable',
        '',
        [...text].map((b) => (b >= 0x80 || b === 0x3d ? `=${b.toString(16).toUpperCase().padStart(2, '0')}` : String.fromCharCode(b))).join(''),
        '',
        '--=_b 1',
        'Content-Type: message/delivery-status',
        'Content-Transfer-Encoding: base64',
        '',
        status.replace(/(.{76})/g, '$1\r\n'),
        '',
        '--=_b 1',
        'Content-Type: text/rfc822-headers',
        '',
        'Message-ID: <orig-1@sender.test>',
        'From: news@sender.test',
        '',
        '--=_b 1--',
        '',
      ].join('\r\n');
    // No Diagnostic-Code: the recipient's words come from the decoded notification.
    const latin1 = Buffer.from('Ihre Nachricht an\r\n\r\n  kunde@firma.example\r\n    550 5.1.1 Empfänger unbekannt (Benutzer gelöscht)\r\n', 'latin1');
    const koi8 = Buffer.from([...'  kunde@firma.example\r\n    550 5.1.1 '].map((c) => c.charCodeAt(0)).concat([0xd0, 0xcf, 0xcc, 0xd8, 0xda, 0xcf, 0xd7, 0xc1, 0xd4, 0xc5, 0xcc, 0xd8, 0x0d, 0x0a]));
    for (const [charset, text, words] of [
      ['iso-8859-1', latin1, 'Empfänger unbekannt (Benutzer gelöscht)'],
      ['koi8-r', koi8, 'пользователь'],
    ] as const) {
      const raw = report(charset, text);
      const r = await parseReport(raw);
      expect(r).toEqual(await parseReport(raw, { thorough: true }));
      expect(r.kind).toBe('dsn');
      expect(r.originalMessageId).toBe('orig-1@sender.test');
      expect(r.recipients[0]).toMatchObject({ recipient: 'kunde@firma.example', status: '5.1.1', replyCode: 550, reason: 'userunknown', hardBounce: true });
      expect(r.recipients[0]!.diagnostic).toContain(words);
    }
  });
});
