/**
 * Resend (provider B): `{ type, created_at, data: { email_id, to[], bounce?: { type,
 * subType, message } } }`. Bounces and complaints are acted on; delivery, open and click
 * analytics are not driven from this route (first-party tracking is authoritative).
 */
import type { LifecycleEvent, Translation } from '../lifecycle.js';
import { FeedbackFormatError } from '../lifecycle.js';
import { asObject, classifyBounce, normEmail, optString, parseJson, reasonFromText } from './common.js';
import { timeMs } from '../../../shared/clock.js';

export const RESEND_IGNORED = new Set(['email.sent', 'email.delivered', 'email.delivery_delayed', 'email.opened', 'email.clicked']);

/** `svixId` is the provider event id: Svix keeps it across retries of one message. */
export function translateResend(body: Buffer, svixId: string, nowMs: number): Translation {
  const root = asObject(parseJson(body), 'Resend event');
  const type = optString(root.type, 100);
  if (!type) throw new FeedbackFormatError('Resend event must have a "type"');
  if (type !== 'email.bounced' && type !== 'email.complained') {
    return { events: [], ignored: RESEND_IGNORED.has(type) ? type : `unhandled Resend event ${type}` };
  }
  const data = asObject(root.data, 'Resend event data');
  const to = (Array.isArray(data.to) ? data.to : [data.to]).map(normEmail).filter((e): e is string => e !== null);
  if (to.length === 0) throw new FeedbackFormatError('Resend event data.to must hold the recipient address');
  const occurredAt = timeMs(root.created_at, nowMs);
  const tags = data.tags && typeof data.tags === 'object' ? (data.tags as Record<string, unknown>) : {};
  const base = {
    kind: 'lifecycle' as const,
    source: 'resend' as const,
    providerMessageId: optString(data.email_id, 300),
    sendId: optString(tags.lettermill_send_id, 100),
    occurredAt,
  };
  const events: LifecycleEvent[] = to.map((recipient, i) => {
    const eventId = to.length === 1 ? svixId : `${svixId}:${i}`;
    if (type === 'email.complained') return { ...base, eventId, recipient, status: 'complained', complaint: { feedbackType: 'abuse' } };
    const bounce = asObject(data.bounce ?? {}, 'Resend data.bounce');
    const message = optString(bounce.message, 1000);
    const reason = reasonFromText(message);
    return { ...base, eventId, recipient, status: 'bounced', bounce: classifyBounce(optString(bounce.type, 20), message, reason) };
  });
  return { events };
}
