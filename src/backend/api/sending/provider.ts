/**
 * Sending providers and their resolution (mta.md: EMAIL_PROVIDER selects; nothing set means
 * sends are refused, never an implicit default).
 */
import type { Config } from '../../../shared/config.js';
import { AppError } from '../../../shared/errors.js';
import { MtaProvider } from './mta.js';
import { SmtpRelayProvider } from './smtp.js';

export type { EmailProvider, OutboundMessage, ProviderResult } from './types.js';
export { ProviderError } from './types.js';
import type { EmailProvider } from './types.js';

/**
 * What choosing a provider needs: configuration, and the MTA's URL, which is the backend's
 * peer option rather than configuration (role all knows it only once the MTA listens).
 */
export interface ProviderSettings extends Pick<Config, 'EMAIL_PROVIDER' | 'MTA_API_KEY' | 'ORGANIZATION_ID' | 'SMTP_RELAY_URL'> {
  mtaUrl: string | undefined;
}

const refuse = (message: string, reason: string) => new AppError('unavailable', message, { reason });

/**
 * The configured provider, or a 503 `unavailable` AppError saying what to configure. Callers
 * resolve before anything is written, so a refused send leaves nothing queued.
 */
export function resolveProvider(settings: ProviderSettings, opts: { timeoutMs: number }): EmailProvider {
  const name = settings.EMAIL_PROVIDER;
  if (!name) {
    throw refuse('No email provider is configured: set EMAIL_PROVIDER (mta, smtp, ses, resend or mandrill). Nothing was sent.', 'no_email_provider');
  }
  switch (name) {
    case 'mta': {
      if (!settings.mtaUrl || !settings.MTA_API_KEY) {
        throw refuse('EMAIL_PROVIDER=mta needs MTA_URL and MTA_API_KEY. Nothing was sent.', 'provider_misconfigured');
      }
      return new MtaProvider({ url: settings.mtaUrl, apiKey: settings.MTA_API_KEY, organizationId: settings.ORGANIZATION_ID, timeoutMs: opts.timeoutMs });
    }
    case 'smtp': {
      if (!settings.SMTP_RELAY_URL) throw refuse('EMAIL_PROVIDER=smtp needs SMTP_RELAY_URL. Nothing was sent.', 'provider_misconfigured');
      return new SmtpRelayProvider({ url: settings.SMTP_RELAY_URL, timeoutMs: opts.timeoutMs });
    }
    default:
      throw refuse(
        `EMAIL_PROVIDER=${name} is not supported by this version for sending; use mta or smtp (a generic SMTP relay, which ${name} also offers). Nothing was sent.`,
        'provider_unsupported',
      );
  }
}

/** Closes a provider's pooled connections, if it has any. */
export async function closeProvider(p: EmailProvider | undefined): Promise<void> {
  await (p as { close?: () => Promise<void> } | undefined)?.close?.();
}
