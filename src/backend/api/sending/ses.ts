/**
 * EMAIL_PROVIDER=ses: SES v2 SendEmail (`POST /v2/email/outbound-emails`) with the message as
 * raw MIME, so List-Unsubscribe(-Post) and every other header arrive as we wrote them, and our
 * send id as the `lettermill_send_id` email tag (SES event notifications echo it in
 * mail.tags). The answer's MessageId is what SES's notifications name (mail.messageId).
 * Signed with ./sigv4.ts (why not the SDK: see there).
 */
import type { Clock } from '../../../shared/clock.js';
import { callProviderApi } from './http-call.js';
import { composeMime } from './mime.js';
import { signRequest, type AwsCredentials } from './sigv4.js';
import { ProviderError, SEND_ID_TAG, type EmailProvider, type OutboundMessage, type ProviderResult } from './types.js';

export interface SesOptions {
  region: string;
  /** The API's base URL (default https://email.<region>.amazonaws.com). */
  endpoint: string;
  credentials: AwsCredentials;
  configurationSet?: string;
  timeoutMs: number;
  clock: Clock;
}

export class SesProvider implements EmailProvider {
  readonly name = 'ses';
  private readonly url: URL;

  constructor(private readonly o: SesOptions) {
    this.url = new URL(`${o.endpoint.replace(/\/+$/, '')}/v2/email/outbound-emails`);
  }

  async send(m: OutboundMessage): Promise<ProviderResult> {
    const raw = await composeMime(m);
    const body = JSON.stringify({
      FromEmailAddress: m.from,
      Destination: { ToAddresses: [m.to] },
      Content: { Raw: { Data: raw.toString('base64') } },
      EmailTags: [{ Name: SEND_ID_TAG, Value: m.id }],
      ...(this.o.configurationSet ? { ConfigurationSetName: this.o.configurationSet } : {}),
    });
    const answer = await callProviderApi({
      provider: 'Amazon SES',
      timeoutMs: this.o.timeoutMs,
      clock: this.o.clock,
      request: () => ({
        url: this.url.href,
        headers: signRequest(
          { method: 'POST', url: this.url, headers: { 'content-type': 'application/json' }, body },
          { region: this.o.region, service: 'ses' },
          this.o.credentials,
          this.o.clock.now(),
        ),
        body,
      }),
      // SES errors: { "message": "…" } (or "Message"), the type in x-amzn-ErrorType / __type.
      reason: (a) => {
        const msg = a.json?.message ?? a.json?.Message;
        const type = a.json?.__type ?? a.json?.code;
        return typeof msg === 'string' ? (typeof type === 'string' ? `${type}: ${msg}` : msg) : undefined;
      },
    });
    const id = answer.json?.MessageId;
    if (typeof id !== 'string' || !id) throw new ProviderError('Amazon SES accepted the message without a MessageId', true);
    // SES writes its own Message-ID header; only its MessageId is known for sure.
    return { providerMessageId: id, messageId: null };
  }
}
