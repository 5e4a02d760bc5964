import { readFileSync } from 'node:fs';
import { parse as parseToml } from 'smol-toml';
import { describe, expect, it } from 'vitest';
import { classify, commandInText, compileRules, isHardReason, loadRules, RULES_FILE } from '../../../src/shared/mail/bounce/classify.js';
import { BOUNCE_REASONS } from '../../../src/shared/mail/bounce/types.js';

type Doc = Parameters<typeof compileRules>[0];
const doc = () => parseToml(readFileSync(RULES_FILE, 'utf8')) as unknown as Doc;

describe('the one bounce classifier', () => {
  const cases: [input: Parameters<typeof classify>[0], reason: string, hard: boolean][] = [
    [{ status: '5.1.1', text: '550 5.1.1 <a@b.example>: Recipient address rejected: User unknown' }, 'userunknown', true],
    [{ status: '5.1.1', text: '550 5.1.1 mailbox full, quota exceeded' }, 'mailboxfull', false],
    [{ status: '5.1.2', text: 'Host or domain name not found' }, 'hostunknown', true],
    [{ status: '5.7.1', text: '554 5.7.1 Service unavailable; Client host [192.0.2.1] blocked using zen.spamhaus.org' }, 'blocked', false],
    [{ text: '550 5.7.1 Relay access denied' }, 'norelaying', false],
    [{ status: '5.3.4', text: 'message too big' }, 'mesgtoobig', false],
    [{ status: '5.7.13', text: 'account disabled' }, 'suspend', false],
    [{ status: '5.1.10', replyCode: 556, text: 'Recipient address has null MX' }, 'notaccept', true],
    [{ status: '4.3.2', replyCode: 421, text: 'not accepting messages' }, 'notaccept', false],
    [{ status: '2.0.0', text: '250 ok' }, 'delivered', false],
    [{ status: '4.4.7', action: 'delayed' }, 'expired', false],
    [{ text: 'connect to mx.example[192.0.2.1]:25: Connection timed out', action: 'delayed' }, 'expired', false],
    [{ replyCode: 503, text: '503 bad sequence of commands' }, 'syntaxerror', false],
    [{ status: '5.6.1', text: 'media type' }, 'contenterror', false],
    [{ text: 'something no rule knows' }, 'onhold', false],
    [{}, 'undefined', false],
  ];
  for (const [input, reason, hard] of cases) {
    it(`${JSON.stringify(input).slice(0, 90)} → ${reason} ${hard ? 'hard' : 'soft'}`, () => {
      expect(classify(input)).toEqual({ reason, hardBounce: hard });
    });
  }

  it("a receiver's own wording decides for its hosts only", () => {
    const text = '421 4.7.0 an unusual rate of unsolicited mail';
    expect(classify({ text, remoteHost: 'gmail-smtp-in.l.google.com' }).reason).toBe('blocked');
    expect(classify({ text, remoteHost: 'mx.example.test' }).reason).toBe('securityerror');
  });

  it('the command the reply answered matters as Sisimai has it (user-unknown words at DATA are a filter)', () => {
    expect(classify({ replyCode: 550, text: '550 no such user here', command: 'RCPT' }).reason).toBe('userunknown');
    expect(classify({ replyCode: 550, text: '550 no such user here', command: 'DATA' }).reason).toBe('filtered');
    expect(classify({ replyCode: 550, text: '550 no such user here (in reply to RCPT TO command)' }).reason).toBe('userunknown');
  });

  it('reads the command across line breaks, and not out of prose ("send mail to postmaster")', () => {
    expect(commandInText('Access denied (in\n    reply to RCPT TO command)')).toBe('RCPT');
    expect(commandInText('For further assistance, please send mail to postmaster.')).toBe('');
    expect(commandInText('>>> RCPT To:<a@b.example>')).toBe('RCPT');
    expect(commandInText('SMTP error from remote mail server after MAIL FROM:<a@b.example>')).toBe('MAIL');
    expect(commandInText('rejected after rcpt to:<a@b.example>')).toBe('RCPT');
  });

  it('a multi-line reply joined into one line is read without its continuation codes', () => {
    const text = '421-4.7.28 [192.0.2.1] Our system has detected an unusual rate of 421-4.7.28 unsolicited mail originating from your IP address. 421 4.7.28 https://support.google.com/mail/?p=UnsolicitedRateLimitError - gsmtp';
    expect(classify({ text, remoteHost: 'gmail-smtp-in.l.google.com' })).toEqual({ reason: 'blocked', hardBounce: false });
  });

  it('produces only the vocabulary, and the shipped file names only reasons of it', () => {
    const rules = loadRules();
    const named = [...rules.first, ...rules.second].map((c) => c.reason);
    for (const r of [...named, ...rules.status.values(), ...rules.hard]) expect(BOUNCE_REASONS).toContain(r);
    expect([...rules.hard].sort()).toEqual(['hasmoved', 'hostunknown', 'notaccept', 'userunknown']);
    expect(isHardReason('userunknown')).toBe(true);
    expect(isHardReason('mailboxfull')).toBe(false);
  });

  it('compiles each reason into one expression (one test per reason, not per pattern)', () => {
    const rules = loadRules();
    const uu = rules.byName.get('userunknown')!;
    expect(uu.re).toBeInstanceOf(RegExp);
    expect(doc().reasons.userunknown!.text!.length).toBeGreaterThan(50);
  });

  it('an operator adds a pattern in the data and it takes effect in its place in the order', () => {
    const d = doc();
    const text = '550 the frobnicator refused this recipient';
    expect(classify({ text, command: 'RCPT' }, compileRules(d)).reason).toBe('onhold');
    d.reasons.userunknown!.text!.push('frobnicator refused');
    expect(classify({ text, command: 'RCPT' }, compileRules(d))).toEqual({ reason: 'userunknown', hardBounce: true });
  });

  it('a rules file naming a reason outside the vocabulary is refused at load, naming it', () => {
    const d = doc();
    d.status['5.9.9'] = 'ratelimited';
    expect(() => compileRules(d)).toThrow(/status\.5\.9\.9: "ratelimited" is not a reason/);
    const e = doc();
    e.order.first.push('emailtoolarge');
    expect(() => compileRules(e)).toThrow(/order\.first: "emailtoolarge"/);
  });
});
