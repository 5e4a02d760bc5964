import { describe, expect, it } from 'vitest';
import { classifyReply, parseReply } from '../../../src/mta/delivery/classify.js';

const c = (raw: string, command?: string) => classifyReply(raw, 'mx.dest.test', true, command);

describe('SMTP reply classification', () => {
  it('2xx → sent', () => {
    expect(c('250 2.0.0 Ok: queued as ABC')).toEqual({ status: 'sent', code: 250, response: '250 2.0.0 Ok: queued as ABC', mxHost: 'mx.dest.test', tls: true });
  });

  it('parses multi-line replies and enhanced codes', () => {
    expect(parseReply('550-5.1.1 The email account that you tried to reach does not exist.\n550 5.1.1 https://support.example/?p=NoSuchUser')).toMatchObject({ code: 550, enhancedCode: '5.1.1' });
  });

  const cases: [string, string, 'bounced' | 'deferred', boolean | undefined, string?][] = [
    ['550-5.1.1 The email account that you tried to reach does not exist.\n550 5.1.1 Please try again', 'userunknown', 'bounced', true],
    ['550 5.1.1 <a@b>: Recipient address rejected: User unknown in virtual mailbox table', 'userunknown', 'bounced', true],
    ['550 Requested action not taken: mailbox unavailable', 'userunknown', 'bounced', true, 'RCPT TO'],
    // Without the command the same words may be a content filter's (Sisimai: filtered).
    ['550 Requested action not taken: mailbox unavailable', 'filtered', 'bounced', false, 'DATA'],
    ['553 5.1.2 Host unknown', 'hostunknown', 'bounced', true],
    ['556 5.1.10 Recipient address has null MX', 'notaccept', 'bounced', true],
    ['552 5.2.2 Mailbox full', 'mailboxfull', 'bounced', false],
    ['552 5.3.4 Message size exceeds fixed maximum message size', 'mesgtoobig', 'bounced', false],
    ['554 5.7.1 Service unavailable; Client host [192.0.2.1] blocked using zen.spamhaus.org', 'blocked', 'bounced', false],
    ['550 5.7.1 Message rejected as spam by Content Filtering.', 'spamdetected', 'bounced', false],
    ['550 5.7.26 This mail is unauthenticated, which poses a security risk to the sender and Gmail users', 'authfailure', 'bounced', false],
    ['554 5.7.1 <x@y>: Relay access denied', 'norelaying', 'bounced', false],
    ['550 5.2.1 The email account that you tried to reach is disabled.', 'suspend', 'bounced', false],
    ['554 5.7.9 Message not accepted for policy reasons', 'policyviolation', 'bounced', false],
    ['550 5.9.9 something nobody has seen', 'onhold', 'bounced', false],
    // 4.7.28 is not in RFC 3463's table: without knowing the receiver, only its class speaks.
    ['421 4.7.28 Our system has detected an unusual rate of unsolicited mail', 'securityerror', 'deferred', undefined],
    ['452 4.2.2 The email account that you tried to reach is over quota', 'mailboxfull', 'deferred', undefined],
    // RFC 3463's table, as Sisimai: 4.7.1 is "delivery not authorized".
    ['451 4.7.1 Please try again later', 'blocked', 'deferred', undefined],
  ];
  for (const [raw, reason, status, hard, command] of cases) {
    it(`${raw.slice(0, 60)} (${command ?? 'no command'}) → ${status} ${reason}`, () => {
      const r = c(raw, command);
      expect(r.status).toBe(status);
      if (r.status === 'bounced') {
        expect(r.reason).toBe(reason);
        expect(r.hard).toBe(hard);
      }
      if (r.status === 'deferred') {
        expect(r.reason).toBe(reason);
        expect(r.connectionFailure).toBe(false);
      }
    });
  }

  it("a receiver's own wording decides for its hosts (Gmail's rate limit is a block)", () => {
    const r = classifyReply('421 4.7.28 Our system has detected an unusual rate of unsolicited mail', 'gmail-smtp-in.l.google.com', true);
    expect(r).toMatchObject({ status: 'deferred', reason: 'blocked' });
  });

  it('a deferral without any hint carries no reason', () => {
    const r = c('450 mailbox busy');
    expect(r).toMatchObject({ status: 'deferred', code: 450, reason: undefined });
  });
});
