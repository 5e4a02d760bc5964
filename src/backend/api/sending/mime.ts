/**
 * The message as MIME, for providers that take it raw (SES): nodemailer's composer, the same
 * one the SMTP relay provider sends through, so both carry identical headers.
 */
import MailComposer from 'nodemailer/lib/mail-composer/index.js';
import { sendHeaders, type OutboundMessage } from './types.js';

/** The message as nodemailer's mail options: one mapping for the composer and the SMTP relay. */
export function mailOptions(m: OutboundMessage) {
  return { from: m.from, to: m.to, subject: m.subject, html: m.html, text: m.text, replyTo: m.replyTo, headers: sendHeaders(m) };
}

export function composeMime(m: OutboundMessage): Promise<Buffer> {
  return new MailComposer({ ...mailOptions(m), messageId: `<${m.id}@${m.dkimDomain}>` })
    .compile()
    .build();
}
