/**
 * Sending providers: which settings each needs, and making one. Which provider a message
 * goes through is ./router.ts (provider routes, then EMAIL_PROVIDER, else refused).
 */
import type { Clock } from '../../../shared/clock.js';
import type { Config } from '../../../shared/config.js';
import { MandrillProvider } from './mandrill.js';
import { MtaProvider } from './mta.js';
import { ResendProvider } from './resend.js';
import { SesProvider } from './ses.js';
import { SmtpRelayProvider } from './smtp.js';
import type { EmailProvider } from './types.js';

export type { EmailProvider, OutboundMessage, ProviderResult } from './types.js';
export { ProviderError } from './types.js';

export type ProviderName = NonNullable<Config['EMAIL_PROVIDER']>;

/**
 * What making a provider needs: configuration, and the MTA's URL, which is the backend's
 * peer option rather than configuration (role all knows it only once the MTA listens).
 */
export interface ProviderSettings
  extends Pick<
    Config,
    | 'EMAIL_PROVIDER'
    | 'MTA_API_KEY'
    | 'ORGANIZATION_ID'
    | 'SMTP_RELAY_URL'
    | 'AWS_ACCESS_KEY_ID'
    | 'AWS_SECRET_ACCESS_KEY'
    | 'AWS_SESSION_TOKEN'
    | 'AWS_REGION'
    | 'SES_REGION'
    | 'SES_ENDPOINT'
    | 'SES_CONFIGURATION_SET'
    | 'RESEND_API_KEY'
    | 'RESEND_API_URL'
    | 'MANDRILL_API_KEY'
    | 'MANDRILL_API_URL'
  > {
  mtaUrl: string | undefined;
}

export function providerSettings(c: Config, mtaUrl: string | undefined): ProviderSettings {
  return {
    EMAIL_PROVIDER: c.EMAIL_PROVIDER,
    MTA_API_KEY: c.MTA_API_KEY,
    ORGANIZATION_ID: c.ORGANIZATION_ID,
    SMTP_RELAY_URL: c.SMTP_RELAY_URL,
    AWS_ACCESS_KEY_ID: c.AWS_ACCESS_KEY_ID,
    AWS_SECRET_ACCESS_KEY: c.AWS_SECRET_ACCESS_KEY,
    AWS_SESSION_TOKEN: c.AWS_SESSION_TOKEN,
    AWS_REGION: c.AWS_REGION,
    SES_REGION: c.SES_REGION,
    SES_ENDPOINT: c.SES_ENDPOINT,
    SES_CONFIGURATION_SET: c.SES_CONFIGURATION_SET,
    RESEND_API_KEY: c.RESEND_API_KEY,
    RESEND_API_URL: c.RESEND_API_URL,
    MANDRILL_API_KEY: c.MANDRILL_API_KEY,
    MANDRILL_API_URL: c.MANDRILL_API_URL,
    mtaUrl,
  };
}

/** The settings a provider lacks (names to set), empty when it can send. */
export function missingSettings(name: ProviderName, s: ProviderSettings): string[] {
  const need: [string, unknown][] =
    name === 'mta'
      ? [['MTA_URL', s.mtaUrl], ['MTA_API_KEY', s.MTA_API_KEY]]
      : name === 'smtp'
        ? [['SMTP_RELAY_URL', s.SMTP_RELAY_URL]]
        : name === 'ses'
          ? [['AWS_ACCESS_KEY_ID', s.AWS_ACCESS_KEY_ID], ['AWS_SECRET_ACCESS_KEY', s.AWS_SECRET_ACCESS_KEY], ['AWS_REGION or SES_REGION', s.SES_REGION ?? s.AWS_REGION]]
          : name === 'resend'
            ? [['RESEND_API_KEY', s.RESEND_API_KEY]]
            : [['MANDRILL_API_KEY', s.MANDRILL_API_KEY]];
  return need.filter(([, v]) => !v).map(([n]) => n);
}

/** Makes a provider whose settings are complete (check missingSettings first). */
export function createProvider(name: ProviderName, s: ProviderSettings, o: { timeoutMs: number; clock: Clock }): EmailProvider {
  switch (name) {
    case 'mta':
      return new MtaProvider({ url: s.mtaUrl!, apiKey: s.MTA_API_KEY!, organizationId: s.ORGANIZATION_ID, ...o });
    case 'smtp':
      return new SmtpRelayProvider({ url: s.SMTP_RELAY_URL!, timeoutMs: o.timeoutMs });
    case 'ses': {
      const region = (s.SES_REGION ?? s.AWS_REGION)!;
      return new SesProvider({
        region,
        endpoint: s.SES_ENDPOINT ?? `https://email.${region}.amazonaws.com`,
        credentials: { accessKeyId: s.AWS_ACCESS_KEY_ID!, secretAccessKey: s.AWS_SECRET_ACCESS_KEY!, ...(s.AWS_SESSION_TOKEN ? { sessionToken: s.AWS_SESSION_TOKEN } : {}) },
        ...(s.SES_CONFIGURATION_SET ? { configurationSet: s.SES_CONFIGURATION_SET } : {}),
        ...o,
      });
    }
    case 'resend':
      return new ResendProvider({ url: s.RESEND_API_URL, apiKey: s.RESEND_API_KEY!, ...o });
    case 'mandrill':
      return new MandrillProvider({ url: s.MANDRILL_API_URL, apiKey: s.MANDRILL_API_KEY!, ...o });
  }
}

/** Closes a provider's pooled connections, if it has any. */
export async function closeProvider(p: EmailProvider | undefined): Promise<void> {
  await (p as { close?: () => Promise<void> } | undefined)?.close?.();
}
