/**
 * Amazon SES notifications inside a verified SNS Notification's `Message`: both the
 * identity notifications (`notificationType`) and configuration-set event publishing
 * (`eventType`). Bounce, Complaint and Delivery are translated, plus Send and Reject; opens,
 * clicks and delays are acknowledged and ignored.
 */
import { SES_BOUNCE_SUBTYPES } from '../policy.js';
import type { LifecycleEvent, Translation } from '../lifecycle.js';
import { FeedbackFormatError } from '../lifecycle.js';
import { asObject, classifyBounce, normEmail, optString, parseJson, reasonFromText, type Json } from './common.js';
import { timeMs } from '../../../shared/clock.js';

function recipients(list: unknown, key: string | null): string[] {
  if (!Array.isArray(list)) return [];
  return list.map((r) => normEmail(key ? (r as Json | null)?.[key] : r)).filter((e): e is string => e !== null);
}

export function translateSes(message: string, snsMessageId: string, nowMs: number): Translation {
  const parsed = parseJson(message, 'SNS Message (an SES notification)');
  const n = asObject(parsed, 'SES notification');
  const type = optString(n.notificationType ?? n.eventType, 50);
  if (!type) throw new FeedbackFormatError('SES notification has no notificationType or eventType');
  const mail = asObject(n.mail ?? {}, 'SES mail');
  const tags = mail.tags && typeof mail.tags === 'object' ? (mail.tags as Record<string, unknown>) : {};
  const tagged = Array.isArray(tags.lettermill_send_id) ? tags.lettermill_send_id[0] : undefined;
  const base = {
    kind: 'lifecycle' as const,
    source: 'ses' as const,
    providerMessageId: optString(mail.messageId, 300),
    sendId: optString(tagged, 100),
  };
  const per = (list: string[], make: (recipient: string, eventId: string) => LifecycleEvent): Translation => {
    if (list.length === 0) throw new FeedbackFormatError(`SES ${type} notification names no recipient`);
    return { events: list.map((r) => make(r, `${snsMessageId}:${r}`)) };
  };

  switch (type) {
    case 'Bounce': {
      const b = asObject(n.bounce, 'SES bounce');
      const bounceType = optString(b.bounceType, 30);
      const sub = optString(b.bounceSubType, 50);
      const at = timeMs(b.timestamp, nowMs);
      const byAddress = new Map<string, Json>();
      for (const r of Array.isArray(b.bouncedRecipients) ? b.bouncedRecipients : []) {
        const e = normEmail((r as Json | null)?.emailAddress);
        if (e) byAddress.set(e, r as Json);
      }
      return per([...byAddress.keys()], (recipient, eventId) => {
        const diag = optString(byAddress.get(recipient)?.diagnosticCode, 1000);
        const reason = (sub && SES_BOUNCE_SUBTYPES[sub]) ?? reasonFromText(diag);
        return { ...base, eventId, recipient, occurredAt: at, status: 'bounced', bounce: classifyBounce(bounceType, diag, reason) };
      });
    }
    case 'Complaint': {
      const c = asObject(n.complaint, 'SES complaint');
      const at = timeMs(c.timestamp, nowMs);
      const feedbackType = optString(c.complaintFeedbackType, 50);
      return per(recipients(c.complainedRecipients, 'emailAddress'), (recipient, eventId) => ({
        ...base,
        eventId,
        recipient,
        occurredAt: at,
        status: 'complained',
        complaint: { feedbackType },
      }));
    }
    case 'Delivery': {
      const d = asObject(n.delivery, 'SES delivery');
      const at = timeMs(d.timestamp, nowMs);
      const smtpResponse = optString(d.smtpResponse, 1000);
      return per(recipients(d.recipients, null), (recipient, eventId) => ({ ...base, eventId, recipient, occurredAt: at, status: 'delivered', delivery: { smtpResponse } }));
    }
    case 'Send':
      return per(recipients(mail.destination, null), (recipient, eventId) => ({
        ...base,
        eventId,
        recipient,
        occurredAt: timeMs(mail.timestamp, nowMs),
        status: 'sent',
      }));
    case 'Reject':
      return per(recipients(mail.destination, null), (recipient, eventId) => ({
        ...base,
        eventId,
        recipient,
        occurredAt: timeMs(mail.timestamp, nowMs),
        status: 'rejected',
      }));
    default:
      return { events: [], ignored: `SES ${type}` };
  }
}
