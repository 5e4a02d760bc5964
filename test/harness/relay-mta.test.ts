/**
 * The real-MTA relays of the harness work: Postfix and Exim each take a message for a
 * recipient the sink refuses (550 5.1.1) and one it defers (452 4.2.2), and send their own
 * DSNs to the given server, which our parser reads as the sink answered. Skips, saying why,
 * only when an MTA cannot run here (not root, no postfix, exim not obtainable).
 */
import nodemailer from 'nodemailer';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseReport } from '../../src/shared/mail/bounce/parse.js';
import { eximUnavailable, postfixUnavailable, startEximRelay, startPostfixRelay, type RelayMta, type RelayMtaOptions } from './relay-mta.js';
import { startSmtpSink, type SmtpSink } from './smtp-sink.js';

const postfixWhy = postfixUnavailable();
const eximWhy = await eximUnavailable();

let sink: SmtpSink;
beforeAll(async () => {
  sink = await startSmtpSink({
    host: '127.0.0.3',
    rcptRule: (rcpt) =>
      rcpt.startsWith('gone') ? { code: 550, message: `5.1.1 <${rcpt}>: Recipient address rejected: User unknown` } : rcpt.startsWith('full') ? { code: 452, message: '4.2.2 Mailbox full' } : undefined,
  });
});
afterAll(() => sink?.close());

for (const [name, why, start] of [
  ['postfix', postfixWhy, startPostfixRelay],
  ['exim', eximWhy, startEximRelay],
] as const) {
  describe.skipIf(why !== null)(`${name} relay${why ? ` (skipped: ${why})` : ''}`, () => {
    let bounces: SmtpSink;
    let mta: RelayMta;
    beforeAll(async () => {
      bounces = await startSmtpSink({ host: '127.0.0.1' });
      const opts: RelayMtaOptions = { host: '127.0.0.2', relayTo: { host: sink.host, port: sink.port }, bouncesTo: { host: bounces.host, port: bounces.port }, replyTimeoutSec: 2 };
      mta = await start(opts);
    }, 60_000);
    afterAll(async () => {
      await mta?.stop();
      await bounces?.close();
    });

    it('relays, and its DSNs reach the bounce server with the sink’s verdicts', async () => {
      const tr = nodemailer.createTransport({ host: mta.host, port: mta.port, secure: false, ignoreTLS: true });
      for (const to of [`gone-${name}@dest.test`, `full-${name}@dest.test`, `ok-${name}@dest.test`]) {
        await tr.sendMail({ envelope: { from: `bounce+${name}@bounces.lettermill.test`, to }, raw: `From: a@lettermill.test\r\nTo: ${to}\r\nSubject: t\r\nMessage-ID: <${to}>\r\n\r\nhi\r\n` });
      }
      const got = await bounces.waitForMessages(2, 60_000).catch((e: Error) => {
        throw new Error(`${e.message}\n${mta.log()}`);
      });
      expect(got.every((m) => m.mailFrom === '' && m.rcptTo[0] === `bounce+${name}@bounces.lettermill.test`)).toBe(true);
      const verdicts = (await Promise.all(got.map(async (m) => (await parseReport(m.data)).recipients[0]!)))
        .map((r) => ({ recipient: r.recipient, status: r.status, reason: r.reason, hardBounce: r.hardBounce }))
        .sort((a, b) => a.recipient!.localeCompare(b.recipient!));
      expect(verdicts).toEqual([
        { recipient: `full-${name}@dest.test`, status: '4.2.2', reason: 'mailboxfull', hardBounce: false },
        { recipient: `gone-${name}@dest.test`, status: '5.1.1', reason: 'userunknown', hardBounce: true },
      ]);
      expect(sink.messages.map((m) => m.rcptTo[0])).toContain(`ok-${name}@dest.test`);
    }, 90_000);
  });
}
