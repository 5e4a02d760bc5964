/**
 * The message as MIME, for providers that take it raw (SES): nodemailer's composer, the same
 * one the SMTP relay provider sends through, so both carry identical headers.
 */
import MailComposer from 'nodemailer/lib/mail-composer/index.js';
import { sendHeaders, type OutboundMessage } from './types.js';

export function composeMime(m: OutboundMessage): Promise<Buffer> {
  return new MailComposer({
    from: m.from,
    to: m.to,
    subject: m.subject,
    html: m.html,
    text: m.text,
    replyTo: m.replyTo,
    messageId: `<${m.id}@${m.dkimDomain}>`,
    headers: sendHeaders(m),
  })
    .compile()
    .build();
}
