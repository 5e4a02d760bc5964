/**
 * EMAIL_PROVIDER=mandrill: `messages/send.json` (the key travels in the JSON body, as Mandrill
 * wants). Our send id is the `lettermill_send_id` metadata (Mandrill's webhooks echo it in
 * msg.metadata); its own open and click tracking is off, since the links are already ours.
 * A recipient answered `rejected` or `invalid` is a refusal with Mandrill's reject_reason.
 */
import type { Clock } from '../../../shared/clock.js';
import { parseMailbox } from '../../../shared/mail/address.js';
import { PROVIDER_API } from '../policy.js';
import { callProviderApi } from './http-call.js';
import { ProviderError, SEND_ID_TAG, sendHeaders, type EmailProvider, type OutboundMessage, type ProviderResult } from './types.js';

const PERMANENT: readonly string[] = PROVIDER_API.mandrillPermanentErrors;

export class MandrillProvider implements EmailProvider {
  readonly name = 'mandrill';

  constructor(private readonly o: { url: string; apiKey: string; timeoutMs: number; clock: Clock }) {}

  async send(m: OutboundMessage): Promise<ProviderResult> {
    // The From was validated by the caller; fall back to it whole should it not parse here.
    const from = parseMailbox(m.from) ?? { name: null, address: m.from };
    const headers = sendHeaders(m);
    if (m.replyTo !== undefined) headers['Reply-To'] = m.replyTo;
    const body = JSON.stringify({
      key: this.o.apiKey,
      message: {
        html: m.html,
        ...(m.text !== undefined ? { text: m.text } : {}),
        subject: m.subject,
        from_email: from.address,
        ...(from.name ? { from_name: from.name } : {}),
        to: [{ email: m.to, type: 'to' }],
        headers,
        track_opens: false,
        track_clicks: false,
        metadata: { [SEND_ID_TAG]: m.id },
      },
      async: false,
    });
    const answer = await callProviderApi({
      provider: 'Mandrill',
      timeoutMs: this.o.timeoutMs,
      clock: this.o.clock,
      request: () => ({ url: `${this.o.url}/messages/send.json`, headers: { 'content-type': 'application/json' }, body }),
      // Mandrill errors: { status: "error", code, name, message }, always HTTP 500.
      reason: (a) => (typeof a.json?.message === 'string' ? `${a.json.name ?? 'error'}: ${a.json.message}` : undefined),
      permanent: (a) => a.status === 500 && PERMANENT.includes(a.json?.name),
    });
    const result = Array.isArray(answer.json) ? answer.json[0] : undefined;
    if (!result || typeof result._id !== 'string') throw new ProviderError('Mandrill answered without a result for the recipient', true);
    if (result.status === 'rejected' || result.status === 'invalid') {
      throw new ProviderError(`Mandrill refused the message (${result.status}): ${String(result.reject_reason ?? 'no reason given').slice(0, PROVIDER_API.reasonChars)}`, false);
    }
    return { providerMessageId: result._id, messageId: null };
  }
}
