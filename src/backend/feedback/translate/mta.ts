/**
 * The bundled MTA's events: `{ event, timestamp, data, id? }` (see docs/feedback.md for
 * each data shape). Delivery events become lifecycle events; the rest are operational.
 *
 * The MTA posts `sent` only after the recipient's MX answered 2xx to DATA (src/mta/effects.ts),
 * which is delivery in the lifecycle's (and Resend's) terms: it becomes `delivered`, with the
 * MX's reply. `email.sent` is the backend's own, emitted at hand-over.
 */
import {
  FeedbackFormatError,
  MTA_OPERATIONAL_EVENTS,
  type FeedbackEvent,
  type MtaOperationalEventName,
  type OperationalEvent,
  type Translation,
} from '../lifecycle.js';
import { asObject, canonicalHash, classifyBounce, normEmail, optString, parseJson, requireEmail, timeMs, type Json } from './common.js';

const SEVERITY: Record<MtaOperationalEventName, OperationalEvent['severity']> = {
  'org.circuit_breaker': 'critical',
  all_ips_blocked: 'critical',
  'ip.blocklisted': 'warning',
  'ip.delisted': 'info',
  'ip.warming_complete': 'info',
};

function addresses(v: unknown): string[] {
  const list = Array.isArray(v) ? v : typeof v === 'string' ? v.split(',') : [];
  return list.map(normEmail).filter((e): e is string => e !== null);
}

/** The MX's reply as the MTA reports it (`smtpResponse` is the reply line; `smtpCode` is prefixed when the line lacks it). */
function smtpReply(data: Json): string | null {
  const text = optString(data.smtpResponse ?? data.response, 1000);
  if (!text) return null;
  const code = typeof data.smtpCode === 'number' && Number.isInteger(data.smtpCode) ? data.smtpCode : null;
  return code !== null && !/^\d{3}\b/.test(text) ? `${code} ${text}` : text;
}

/** Events in one array body at most (the MTA's notifier posts up to EVENT_POSTS.maxItems, the same 500). */
export const MTA_MAX_BATCH = 500;

/**
 * One event object, or an array of them (the MTA batches the events of one event-loop turn).
 * A malformed element refuses the whole body (400); the MTA then posts each event alone.
 */
export function translateMta(body: Buffer, nowMs: number): Translation {
  const parsed = parseJson(body);
  if (!Array.isArray(parsed)) return translateMtaEvent(parsed, nowMs);
  if (parsed.length === 0 || parsed.length > MTA_MAX_BATCH) throw new FeedbackFormatError(`An MTA event array must hold 1 to ${MTA_MAX_BATCH} events`);
  const events: FeedbackEvent[] = [];
  let ignored: string | undefined;
  for (const item of parsed) {
    const t = translateMtaEvent(item, nowMs);
    if (t.ignored !== undefined) ignored ??= t.ignored;
    events.push(...t.events);
  }
  return events.length === 0 && ignored !== undefined ? { events: [], ignored } : { events };
}

function translateMtaEvent(parsed: unknown, nowMs: number): Translation {
  const root = asObject(parsed, 'MTA event');
  const event = optString(root.event, 100);
  if (!event) throw new FeedbackFormatError('MTA event must have an "event" name');
  const data = asObject(root.data ?? {}, 'MTA event data');
  const occurredAt = timeMs(root.timestamp, nowMs);
  // The MTA's event id when it sends one; otherwise the hash of the event itself, which is
  // the same for a retry of the same event (also after a dead-letter round trip via jsonb).
  const eventId = optString(root.id, 200) ?? optString(data.eventId, 200) ?? `sha256:${canonicalHash({ event, timestamp: root.timestamp, data })}`;
  const common = {
    source: 'mta' as const,
    eventId,
    occurredAt,
    providerMessageId: optString(data.messageId, 300),
    sendId: optString(data.sendId, 100),
  };

  switch (event) {
    case 'sent':
      return {
        events: [
          {
            kind: 'lifecycle',
            ...common,
            status: 'delivered',
            recipient: requireEmail(data.recipient ?? data.to, 'data.recipient'),
            delivery: { smtpResponse: smtpReply(data) },
          },
        ],
      };
    case 'bounced': {
      const hardFlag = typeof data.hard === 'boolean' ? (data.hard ? 'hard' : 'soft') : optString(data.bounceType, 20);
      if (!hardFlag) throw new FeedbackFormatError('A bounced event needs data.bounceType (hard or soft) or data.hard');
      const reason = optString(data.reason, 50)?.toLowerCase() ?? 'undefined';
      const bounce = classifyBounce(hardFlag, optString(data.smtpResponse ?? data.diagnosticCode ?? data.response, 1000), reason);
      const status = optString(data.enhancedCode, 20);
      if (status && /^[245]\.\d{1,3}\.\d{1,3}$/.test(status)) bounce.status = status;
      return { events: [{ kind: 'lifecycle', ...common, status: 'bounced', recipient: requireEmail(data.recipient ?? data.to, 'data.recipient'), bounce }] };
    }
    case 'complained':
      return {
        events: [
          {
            kind: 'lifecycle',
            ...common,
            status: 'complained',
            recipient: requireEmail(data.recipient ?? data.to, 'data.recipient'),
            complaint: { feedbackType: optString(data.feedbackType, 50) },
          },
        ],
      };
    case 'inbound.received': {
      const from = optString(data.from, 1000);
      const to = addresses(data.to);
      if (!from || to.length === 0) throw new FeedbackFormatError('An inbound.received event needs data.from and data.to');
      const known = new Set(['messageId', 'from', 'to', 'subject', 'text', 'html', 'inReplyTo', 'references', 'receivedAt', 'eventId']);
      const extra: Json = {};
      for (const [k, v] of Object.entries(data)) if (!known.has(k)) extra[k] = v;
      const refs = Array.isArray(data.references)
        ? data.references.filter((r): r is string => typeof r === 'string')
        : typeof data.references === 'string'
          ? data.references.split(/\s+/).filter(Boolean)
          : [];
      const ev: FeedbackEvent = {
        kind: 'inbound',
        source: 'mta',
        eventId,
        occurredAt,
        message: {
          messageId: optString(data.messageId, 998),
          from,
          to,
          subject: typeof data.subject === 'string' ? data.subject.slice(0, 998) : '',
          text: typeof data.text === 'string' ? data.text : null,
          html: typeof data.html === 'string' ? data.html : null,
          inReplyTo: optString(data.inReplyTo, 998),
          references: refs.slice(0, 100),
          receivedAt: timeMs(data.receivedAt, occurredAt),
          extra,
        },
      };
      return { events: [ev] };
    }
    default:
      if ((MTA_OPERATIONAL_EVENTS as readonly string[]).includes(event)) {
        const name = event as MtaOperationalEventName;
        return {
          events: [
            {
              kind: 'operational',
              source: 'mta',
              eventId,
              event: name,
              severity: SEVERITY[name],
              occurredAt,
              organizationId: optString(data.organizationId, 200),
              ip: optString(data.ip, 100),
              data,
            },
          ],
        };
      }
      // A newer MTA may send events this backend does not know: acknowledge, do nothing.
      return { events: [], ignored: `unknown MTA event ${event}` };
  }
}
