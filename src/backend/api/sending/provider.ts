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

export type ProviderConfig = Pick<Config, 'EMAIL_PROVIDER' | 'MTA_URL' | 'MTA_API_KEY' | 'ORGANIZATION_ID' | 'SMTP_RELAY_URL'>;

const refuse = (message: string, reason: string) => new AppError('unavailable', message, { reason });

/**
 * The configured provider, or a 503 `unavailable` AppError saying what to configure. Read at
 * send time (configuration the process fills in after start, such as MTA_URL in `--role all`,
 * is then known) and before anything is written, so a refused send leaves nothing queued.
 */
export function resolveProvider(config: ProviderConfig, cache: Map<string, EmailProvider>, opts: { timeoutMs: number }): EmailProvider {
  const name = config.EMAIL_PROVIDER;
  if (!name) {
    throw refuse('No email provider is configured: set EMAIL_PROVIDER (mta, smtp, ses, resend or mandrill). Nothing was sent.', 'no_email_provider');
  }
  switch (name) {
    case 'mta': {
      if (!config.MTA_URL || !config.MTA_API_KEY) {
        throw refuse('EMAIL_PROVIDER=mta needs MTA_URL and MTA_API_KEY. Nothing was sent.', 'provider_misconfigured');
      }
      const key = `mta|${config.MTA_URL}|${config.ORGANIZATION_ID}`;
      let p = cache.get(key);
      if (!p) cache.set(key, (p = new MtaProvider({ url: config.MTA_URL, apiKey: () => config.MTA_API_KEY!, organizationId: config.ORGANIZATION_ID, timeoutMs: opts.timeoutMs })));
      return p;
    }
    case 'smtp': {
      if (!config.SMTP_RELAY_URL) throw refuse('EMAIL_PROVIDER=smtp needs SMTP_RELAY_URL. Nothing was sent.', 'provider_misconfigured');
      const key = `smtp|${config.SMTP_RELAY_URL}`;
      let p = cache.get(key);
      if (!p) cache.set(key, (p = new SmtpRelayProvider({ url: config.SMTP_RELAY_URL, timeoutMs: opts.timeoutMs })));
      return p;
    }
    default:
      throw refuse(
        `EMAIL_PROVIDER=${name} is not supported by this version for sending; use mta or smtp (a generic SMTP relay, which ${name} also offers). Nothing was sent.`,
        'provider_unsupported',
      );
  }
}

/** Closes pooled connections of every provider in the cache. */
export async function closeProviders(cache: Map<string, EmailProvider>): Promise<void> {
  for (const p of cache.values()) await (p as { close?: () => Promise<void> }).close?.();
  cache.clear();
}
