/**
 * EMAIL_PROVIDER=resend: `POST /emails` of Resend's API (Bearer key). Written against the
 * documented JSON rather than the `resend` SDK: it wraps this one call, answers `{ data,
 * error }` without the response's Retry-After (the retry rule of http-call.ts needs it), and
 * would be one more dependency for a single request. Our send id is the `lettermill_send_id` tag
 * (Resend's webhooks echo tags) and the Idempotency-Key, so a retried call sends once.
 * The answer's id is what Resend's webhooks name (data.email_id).
 */
import type { Clock } from '../../../shared/clock.js';
import { callProviderApi } from './http-call.js';
import { ProviderError, SEND_ID_TAG, sendHeaders, type EmailProvider, type OutboundMessage, type ProviderResult } from './types.js';

export class ResendProvider implements EmailProvider {
  readonly name = 'resend';

  constructor(private readonly o: { url: string; apiKey: string; timeoutMs: number; clock: Clock }) {}

  async send(m: OutboundMessage): Promise<ProviderResult> {
    const body = JSON.stringify({
      from: m.from,
      to: [m.to],
      subject: m.subject,
      html: m.html,
      ...(m.text !== undefined ? { text: m.text } : {}),
      ...(m.replyTo !== undefined ? { reply_to: m.replyTo } : {}),
      headers: sendHeaders(m),
      tags: [{ name: SEND_ID_TAG, value: m.id }],
    });
    const answer = await callProviderApi({
      provider: 'Resend',
      timeoutMs: this.o.timeoutMs,
      clock: this.o.clock,
      request: () => ({
        url: `${this.o.url}/emails`,
        headers: { 'content-type': 'application/json', authorization: `Bearer ${this.o.apiKey}`, 'idempotency-key': m.id },
        body,
      }),
      // Resend errors: { statusCode, name, message }.
      reason: (a) => (typeof a.json?.message === 'string' ? (typeof a.json?.name === 'string' ? `${a.json.name}: ${a.json.message}` : a.json.message) : undefined),
    });
    const id = answer.json?.id;
    if (typeof id !== 'string' || !id) throw new ProviderError('Resend accepted the message without an id', true);
    return { providerMessageId: id, messageId: null };
  }
}
