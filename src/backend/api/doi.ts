/**
 * Double opt-in: the confirmation token and email. The REST API sends it when a contact is
 * added to a topic with requireDoubleOptIn; forms (issue 4) reuse sendDoiConfirmation, and
 * the public `/confirm/doi` endpoints verify the token with readDoiToken.
 */
import type { Signer, VerifyResult } from '../../shared/signing.js';
import type { Config } from '../../shared/config.js';
import { unavailable } from '../../shared/errors.js';
import { formatMailbox, parseMailbox } from '../../shared/mail/address.js';
import type { SendOutcome, SendService } from './sending/send.js';
import { DOUBLE_OPT_IN } from './policy.js';

export const DOI_TOKEN_PURPOSE = 'doi';

/** Token payload: contact id and topic id. */
export interface DoiTokenData {
  c: string;
  t: string;
}

export function createDoiToken(signer: Signer, contactId: string, topicId: string, nowMs: number): string {
  return signer.sign(DOI_TOKEN_PURPOSE, { c: contactId, t: topicId } satisfies DoiTokenData, { expiresAt: nowMs + DOUBLE_OPT_IN.tokenTtlMs });
}

export function readDoiToken(signer: Signer, token: string, nowMs: number): VerifyResult<DoiTokenData> {
  const v = signer.verify<DoiTokenData>(DOI_TOKEN_PURPOSE, token, nowMs);
  if (v.ok && (typeof v.data?.c !== 'string' || typeof v.data?.t !== 'string')) return { ok: false, reason: 'malformed' };
  return v;
}

export function doiConfirmationUrl(baseUrl: string, token: string): string {
  return `${baseUrl.replace(/\/+$/, '')}/confirm/doi?token=${encodeURIComponent(token)}`;
}

const escapeHtml = (s: string) => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

export function doiEmail(o: { topicName: string; organizationName: string; url: string }): { subject: string; html: string; text: string } {
  const subject = `Please confirm your subscription to ${o.topicName}`;
  const text = [
    `You asked to receive "${o.topicName}" from ${o.organizationName}.`,
    '',
    `Confirm your subscription: ${o.url}`,
    '',
    'If you did not ask for this, ignore this email and you will not be subscribed.',
  ].join('\n');
  const html = `<!doctype html><html><body style="font-family:sans-serif">
<p>You asked to receive &ldquo;${escapeHtml(o.topicName)}&rdquo; from ${escapeHtml(o.organizationName)}.</p>
<p><a href="${escapeHtml(o.url)}">Confirm your subscription</a></p>
<p style="color:#666">If you did not ask for this, ignore this email and you will not be subscribed.</p>
</body></html>`;
  return { subject, html, text };
}

/** Sender of system emails: EMAIL_FROM, else no-reply@ the BASE_URL host. */
export function systemFrom(config: Pick<Config, 'EMAIL_FROM' | 'BASE_URL' | 'ORGANIZATION_NAME'>): { from: string; address: string } {
  const configured = config.EMAIL_FROM ? parseMailbox(config.EMAIL_FROM) : null;
  if (config.EMAIL_FROM && !configured) throw unavailable('EMAIL_FROM is not a valid mailbox (a@example.com or Name <a@example.com>)', 'email_from_invalid');
  const host = new URL(config.BASE_URL ?? 'http://localhost').hostname;
  const mailbox = configured ?? { name: config.ORGANIZATION_NAME, address: `no-reply@${host}` };
  return { from: formatMailbox({ name: mailbox.name ?? config.ORGANIZATION_NAME, address: mailbox.address }), address: mailbox.address };
}

export async function sendDoiConfirmation(
  d: { signer: Signer; sender: SendService; config: Pick<Config, 'EMAIL_FROM' | 'BASE_URL' | 'ORGANIZATION_NAME'>; nowMs: number },
  contact: { id: string; email: string },
  topic: { id: string; name: string },
): Promise<SendOutcome> {
  const token = createDoiToken(d.signer, contact.id, topic.id, d.nowMs);
  const mail = doiEmail({ topicName: topic.name, organizationName: d.config.ORGANIZATION_NAME, url: doiConfirmationUrl(d.config.BASE_URL!, token) });
  const from = systemFrom(d.config);
  return d.sender.send({
    type: 'transactional',
    contactId: contact.id,
    to: contact.email,
    from: from.from,
    fromAddress: from.address,
    subject: mail.subject,
    html: mail.html,
    text: mail.text,
    metadata: { purpose: 'doi_confirmation', topicId: topic.id },
  });
}
