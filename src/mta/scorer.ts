import { isRawJob } from '../shared/contracts/mta.js';
import MailComposer from 'nodemailer/lib/mail-composer';
import type { Logger } from '../shared/log.js';
import type { MtaJobPayload } from './job.js';
import type { SpamScorer } from './pipeline/types.js';

const TIMEOUT_MS = 5_000;

/**
 * The optional outbound content scorer (SPAMSCORER_URL). The message is built as MIME and
 * POSTed as `message/rfc822`; the JSON answer's `score` is used (Rspamd's /checkv2 answers in
 * this form). Any failure returns null: screening fails open rather than holding mail.
 */
export class HttpSpamScorer implements SpamScorer {
  constructor(
    private readonly url: string,
    private readonly log: Logger,
  ) {}

  async score(job: MtaJobPayload): Promise<number | null> {
    try {
      // A submitted message is scored as it was submitted.
      const mime = isRawJob(job) ? Buffer.from(job.raw, 'base64') : await new MailComposer({
        from: job.from,
        to: job.to,
        subject: job.subject,
        html: job.html,
        text: job.text,
        replyTo: job.replyTo,
        messageId: `<${job.messageId.replace(/[<>\s]/g, '')}@${job.dkimDomain}>`,
      })
        .compile()
        .build();
      const res = await fetch(this.url, {
        method: 'POST',
        headers: { 'content-type': 'message/rfc822', 'rcpt': job.recipient, from: job.from },
        body: mime,
        signal: AbortSignal.timeout(TIMEOUT_MS),
      });
      if (!res.ok) throw new Error(`HTTP ${res.status}`);
      const body = (await res.json()) as { score?: unknown };
      if (typeof body.score !== 'number' || !Number.isFinite(body.score)) throw new Error('answer has no numeric score');
      return body.score;
    } catch (err) {
      this.log.warn({ err: (err as Error).message, messageId: job.messageId }, 'spam scorer unavailable; screening passes the message');
      return null;
    }
  }
}
