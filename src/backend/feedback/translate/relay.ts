/**
 * The generic relay (provider D). Its payload is ours to define (docs/feedback.md): one
 * event object, or an array of up to 100, each
 * `{ id, event, timestamp, messageId, recipient, bounce?: { type, reason?, diagnostic? },
 *    suppression?: { reason }, feedbackType?, metadata?: { sendId? } }`.
 * loaded and clicked are ignored: first-party tracking is authoritative.
 */
import { FeedbackFormatError, LIFECYCLE_STATUSES, type LifecycleEvent, type LifecycleStatus, type Translation } from '../lifecycle.js';
import { asObject, classifyBounce, mapSuppressionReason, optString, parseJson, reasonFromText, requireEmail } from './common.js';
import { timeMs } from '../../../shared/clock.js';

export const RELAY_MAX_EVENTS = 100;
// The relay's event names are the lifecycle's, all nine (docs/feedback.md).
const ACTED: ReadonlySet<string> = new Set(LIFECYCLE_STATUSES);
const IGNORED: ReadonlySet<string> = new Set(['loaded', 'clicked']);

export function translateRelay(body: Buffer, nowMs: number): Translation {
  const parsed = parseJson(body);
  const list = Array.isArray(parsed) ? parsed : [parsed];
  if (list.length === 0) return { events: [], ignored: 'empty batch' };
  if (list.length > RELAY_MAX_EVENTS) throw new FeedbackFormatError(`A relay batch holds at most ${RELAY_MAX_EVENTS} events`);
  const out: LifecycleEvent[] = [];
  const ignored: string[] = [];
  list.forEach((item, i) => {
    const e = asObject(item, `relay event ${i}`);
    const name = optString(e.event, 50)?.toLowerCase();
    if (!name) throw new FeedbackFormatError(`relay event ${i} has no "event"`);
    if (IGNORED.has(name) || !ACTED.has(name)) {
      ignored.push(name);
      return;
    }
    const eventId = optString(e.id, 200);
    if (!eventId) throw new FeedbackFormatError(`relay event ${i} has no "id"`);
    const metadata = e.metadata && typeof e.metadata === 'object' ? (e.metadata as Record<string, unknown>) : {};
    const ev: LifecycleEvent = {
      kind: 'lifecycle',
      source: 'relay',
      eventId,
      status: name as LifecycleStatus,
      recipient: requireEmail(e.recipient, `relay event ${i} recipient`),
      providerMessageId: optString(e.messageId, 300),
      sendId: optString(metadata.sendId, 100),
      occurredAt: timeMs(e.timestamp, nowMs),
    };
    if (name === 'bounced') {
      const b = asObject(e.bounce ?? {}, `relay event ${i} bounce`);
      const diag = optString(b.diagnostic, 1000);
      ev.bounce = classifyBounce(optString(b.type, 20), diag, optString(b.reason, 50)?.toLowerCase() ?? reasonFromText(diag));
    } else if (name === 'complained') {
      ev.complaint = { feedbackType: optString(e.feedbackType, 50) };
    } else if (name === 'suppressed') {
      const s = asObject(e.suppression ?? {}, `relay event ${i} suppression`);
      ev.suppression = { reason: mapSuppressionReason(s.reason) };
    }
    out.push(ev);
  });
  return out.length ? { events: out } : { events: [], ignored: ignored.join(', ') };
}
