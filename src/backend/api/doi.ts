/**
 * Double opt-in: the confirmation token and email. The REST API sends it when a contact is
 * added to a topic with requireDoubleOptIn; forms (issue 4) reuse sendDoiConfirmation, and
 * the public `/confirm/doi` endpoints verify the token with readDoiToken.
 */
import type { Signer, VerifyResult } from '../../shared/signing.js';
import type { Config } from '../../shared/config.js';
import { unavailable } from '../../shared/errors.js';
import { hostname } from 'node:os';
import { formatMailbox, normalizeAddress, parseMailbox } from '../../shared/mail/address.js';
import type { SendOutcome, SendService } from './sending/send.js';
import { DOUBLE_OPT_IN } from './policy.js';
import { escapeHtml } from '../../shared/html.js';

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

/**
 * Sender of system emails: EMAIL_FROM (checked at start), else no-reply@ the BASE_URL host. A
 * host that is no mail domain (an IP address, localhost, a single label) gives way to the
 * machine's host name, as Postfix's $myhostname does for local mail, and last to
 * localhost.localdomain: every BASE_URL yields an address the /send grammar accepts.
 */
export function systemFrom(config: Pick<Config, 'EMAIL_FROM' | 'BASE_URL' | 'ORGANIZATION_NAME'>, machineName: string = hostname()): { from: string; address: string } {
  const configured = config.EMAIL_FROM ? parseMailbox(config.EMAIL_FROM) : null;
  if (config.EMAIL_FROM && !configured) throw unavailable('EMAIL_FROM is not a valid mailbox (a@example.com or Name <a@example.com>)', 'email_from_invalid');
  const mailbox = configured ?? { name: config.ORGANIZATION_NAME, address: defaultSystemAddress(config.BASE_URL, machineName) };
  return { from: formatMailbox({ name: mailbox.name ?? config.ORGANIZATION_NAME, address: mailbox.address }), address: mailbox.address };
}

/** no-reply@ the first of the BASE_URL host, the machine's name and localhost.localdomain that is a mail domain. */
export function defaultSystemAddress(baseUrl: string | undefined, machineName: string): string {
  const host = new URL(baseUrl ?? 'http://localhost').hostname;
  for (const domain of [host, machineName]) {
    const address = normalizeAddress(`no-reply@${domain}`); // refuses IP literals (numeric top label, brackets) and single labels
    if (address) return address;
  }
  return 'no-reply@localhost.localdomain';
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
