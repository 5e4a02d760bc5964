/**
 * What a receiver sees: the body, the headers and the signature (docs/webhooks.md →
 * Verifying requests, and docs/examples/webhook-receiver.mjs, which tests use verbatim).
 */
import { toIso, unixSeconds } from '../../shared/clock.js';
import { hmacSha256Hex, randomToken } from '../../shared/crypto.js';

export const WEBHOOK_USER_AGENT = 'Lettermill-Webhooks/1.0';

/** `whsec_` + 32 random bytes (base64url). */
export function newWebhookSecret(): string {
  return `whsec_${randomToken(32)}`;
}

/**
 * Hex HMAC-SHA256 of the exact body bytes. The key is the whole secret string as UTF-8,
 * `whsec_` prefix included (no base64 decoding), so `createHmac('sha256', secret)` works as is.
 */
export function signBody(secret: string, body: string): string {
  return hmacSha256Hex(secret, body);
}

export interface SignedRequest {
  body: string;
  headers: Record<string, string>;
}

/**
 * Builds one attempt's request. `timestamp` is the send time of this attempt, inside the
 * signed body so a receiver can reject replays; the event's own time is in `data`.
 */
export function buildWebhookRequest(input: {
  eventId: string;
  event: string;
  data: unknown;
  webhookId: string;
  secret: string;
  now: number;
}): SignedRequest {
  const body = JSON.stringify({ id: input.eventId, event: input.event, timestamp: toIso(input.now), data: input.data });
  return {
    body,
    headers: {
      'Content-Type': 'application/json',
      'User-Agent': WEBHOOK_USER_AGENT,
      'X-Signature': signBody(input.secret, body),
      'X-Timestamp': String(unixSeconds(input.now)),
      'X-Webhook-Id': input.webhookId,
      'X-Event-Id': input.eventId,
    },
  };
}
