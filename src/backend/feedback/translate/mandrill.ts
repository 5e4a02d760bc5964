/**
 * Mandrill (provider C): the form field `mandrill_events` holds a JSON array of
 * `{ event, _id, ts, msg: { email, _id, bounce_description, diag, metadata } }`.
 * hard_bounce, soft_bounce, spam, reject and delivered are translated; the rest (send,
 * deferral, open, click, unsub, sync and inbound events) are acknowledged and ignored.
 */
import { MANDRILL_BOUNCE_DESCRIPTIONS } from '../policy.js';
import { FeedbackFormatError, type LifecycleEvent, type LifecycleStatus, type Translation } from '../lifecycle.js';
import { asObject, classifyBounce, normEmail, optString, parseJson, reasonFromText, type Json } from './common.js';
import { timeMs } from '../../../shared/clock.js';

/** Mandrill sends at most 1000 events per batch. */
export const MANDRILL_MAX_EVENTS = 1000;

export function parseMandrillEvents(fields: Map<string, string>): Json[] {
  const raw = fields.get('mandrill_events');
  if (raw === undefined) throw new FeedbackFormatError('Missing form field mandrill_events');
  const parsed = parseJson(raw, 'mandrill_events');
  if (!Array.isArray(parsed)) throw new FeedbackFormatError('mandrill_events must be a JSON array');
  if (parsed.length > MANDRILL_MAX_EVENTS) throw new FeedbackFormatError(`mandrill_events holds more than ${MANDRILL_MAX_EVENTS} events`);
  return parsed.map((e, i) => asObject(e, `mandrill_events[${i}]`));
}

/** The batch's time for the tolerance check: its newest event's `ts` (Unix seconds), or null. */
export function mandrillBatchTime(events: Json[]): number | null {
  let newest: number | null = null;
  for (const e of events) if (typeof e.ts === 'number' && Number.isFinite(e.ts)) newest = Math.max(newest ?? -Infinity, e.ts);
  return newest;
}

const STATUS: Record<string, LifecycleStatus> = {
  hard_bounce: 'bounced',
  soft_bounce: 'bounced',
  spam: 'complained',
  reject: 'rejected',
  delivered: 'delivered',
};

export function translateMandrill(events: Json[], nowMs: number): Translation {
  const out: LifecycleEvent[] = [];
  for (const e of events) {
    const name = optString(e.event, 50);
    const status = name ? STATUS[name] : undefined;
    if (!name || !status) continue;
    const msg = asObject(e.msg ?? {}, 'Mandrill msg');
    const recipient = normEmail(msg.email);
    const id = optString(e._id, 200) ?? optString(msg._id, 200);
    if (!recipient || !id) throw new FeedbackFormatError(`Mandrill ${name} event needs msg.email and _id`);
    const metadata = msg.metadata && typeof msg.metadata === 'object' ? (msg.metadata as Json) : {};
    const ev: LifecycleEvent = {
      kind: 'lifecycle',
      source: 'mandrill',
      // _id names the message, not the event: several events share it.
      eventId: `${id}:${name}:${typeof e.ts === 'number' ? e.ts : ''}`,
      status,
      recipient,
      providerMessageId: optString(msg._id, 200) ?? id,
      sendId: optString(metadata.lettermill_send_id, 100),
      occurredAt: timeMs(e.ts, nowMs),
    };
    if (name === 'hard_bounce' || name === 'soft_bounce') {
      const diag = optString(msg.diag, 1000);
      const desc = optString(msg.bounce_description, 50);
      const reason = (desc && MANDRILL_BOUNCE_DESCRIPTIONS[desc]) ?? reasonFromText(diag);
      ev.bounce = classifyBounce(name === 'hard_bounce' ? 'hard' : 'soft', diag, reason);
    } else if (name === 'spam') {
      ev.complaint = { feedbackType: 'abuse' };
    }
    out.push(ev);
  }
  return out.length ? { events: out } : { events: [], ignored: 'no Mandrill events to act on' };
}
