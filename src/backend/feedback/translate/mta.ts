/**
 * The bundled MTA's events: `{ id, event, timestamp, data }`, each validated against the
 * contract both halves share (src/shared/contracts/mta.ts; catalogue in docs/mta.md).
 * Delivery events become lifecycle events; the rest are operational. The de-duplication key
 * is the event's `id`, stable across the MTA's retries.
 *
 * The MTA posts `sent` only after the recipient's MX answered 2xx to DATA (src/mta/effects.ts),
 * which is delivery in the lifecycle's (and Resend's) terms: it becomes `delivered`, with the
 * MX's reply. `email.sent` is the backend's own, emitted at hand-over.
 */
import {
  FeedbackFormatError,
  type FeedbackEvent,
  type MtaOperationalEventName,
  type OperationalEvent,
  type Translation,
} from '../lifecycle.js';
import { TypeCompiler, type TypeCheck } from '@sinclair/typebox/compiler';
import type { TSchema } from '@sinclair/typebox';
import {
  isMtaEventName,
  MTA_EVENT,
  MTA_EVENT_BATCH_MAX,
  MTA_EVENT_DATA,
  MTA_EVENT_NAMES,
  MtaEventEnvelopeSchema,
  type MtaEventData,
  type MtaEventEnvelope,
  type MtaEventName,
} from '../../../shared/contracts/mta.js';
import { classifyBounce, normEmail, parseJson, requireEmail, type Json } from './common.js';
import { timeMs } from '../../../shared/clock.js';
import { MTA_SUPPRESSION_REASONS } from '../policy.js';

const SEVERITY: Record<MtaOperationalEventName, OperationalEvent['severity']> = {
  [MTA_EVENT.orgCircuitBreaker]: 'critical',
  [MTA_EVENT.allIpsBlocked]: 'critical',
  [MTA_EVENT.ipBlocklisted]: 'warning',
  [MTA_EVENT.ipDelisted]: 'info',
  [MTA_EVENT.ipWarmingComplete]: 'info',
};

const envelope = TypeCompiler.Compile(MtaEventEnvelopeSchema);
const dataCheck = Object.fromEntries(MTA_EVENT_NAMES.map((n) => [n, TypeCompiler.Compile(MTA_EVENT_DATA[n])])) as { [K in MtaEventName]: TypeCheck<(typeof MTA_EVENT_DATA)[K]> };

/** The first schema error as `<what><path> <message>` (e.g. `data/recipient Expected string`). */
function firstError(check: TypeCheck<TSchema>, value: unknown, what: string): string {
  const e = check.Errors(value).First();
  return e ? `${what}${e.path} ${e.message}`.trim() : `${what} is invalid`;
}

/** The MX's reply as the MTA reports it (`smtpResponse` is the reply line; `smtpCode` is prefixed when the line lacks it). */
function smtpReply(code: number | null, text: string | null): string | null {
  if (!text) return null;
  return code !== null && !/^\d{3}\b/.test(text) ? `${code} ${text}` : text;
}

/** Strict base64 (what Buffer#toString('base64') writes): anything else is refused, never half-decoded. */
export function decodeBase64(s: string, what: string): Buffer {
  if (s.length % 4 !== 0 || !/^[A-Za-z0-9+/]*={0,2}$/.test(s)) throw new FeedbackFormatError(`${what} must be base64`);
  return Buffer.from(s, 'base64');
}

/**
 * One event object, or an array of them (the MTA's relay batches; src/mta/outbox/relay.ts).
 * Each is validated against the contract (src/shared/contracts/mta.ts). A malformed element
 * refuses the whole body (400); the MTA then posts each event alone.
 */
export function translateMta(body: Buffer, nowMs: number): Translation {
  const parsed = parseJson(body);
  if (!Array.isArray(parsed)) return translateMtaEvent(parsed, nowMs);
  if (parsed.length === 0 || parsed.length > MTA_EVENT_BATCH_MAX) throw new FeedbackFormatError(`An MTA event array must hold 1 to ${MTA_EVENT_BATCH_MAX} events`);
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
  if (!envelope.Check(parsed)) throw new FeedbackFormatError(`MTA event: ${firstError(envelope, parsed, '')}`);
  const root = parsed as MtaEventEnvelope;
  const name = root.event as string;
  // A newer MTA may send events this backend does not know: acknowledge, do nothing.
  if (!isMtaEventName(name)) return { events: [], ignored: `unknown MTA event ${name}` };
  const check = dataCheck[name] as TypeCheck<TSchema>;
  if (!check.Check(root.data)) throw new FeedbackFormatError(`MTA event ${name}: ${firstError(check, root.data, 'data')}`);
  const occurredAt = timeMs(root.timestamp, nowMs);
  const eventId = root.id;
  const base = { source: 'mta' as const, eventId, occurredAt };

  switch (name) {
    case MTA_EVENT.sent: {
      const d = root.data as MtaEventData[typeof MTA_EVENT.sent];
      return {
        events: [
          {
            kind: 'lifecycle',
            ...base,
            providerMessageId: d.messageId,
            sendId: null,
            organizationId: d.organizationId,
            status: 'delivered',
            recipient: requireEmail(d.recipient, 'data.recipient'),
            delivery: { smtpResponse: smtpReply(d.smtpCode, d.smtpResponse) },
          },
        ],
      };
    }
    case MTA_EVENT.bounced: {
      const d = root.data as MtaEventData[typeof MTA_EVENT.bounced];
      const bounce = classifyBounce(d.type, d.smtpResponse, d.reason.toLowerCase());
      if (d.enhancedCode && /^[245]\.\d{1,3}\.\d{1,3}$/.test(d.enhancedCode)) bounce.status = d.enhancedCode;
      return {
        events: [{ kind: 'lifecycle', ...base, providerMessageId: d.messageId, sendId: null, organizationId: d.organizationId, status: 'bounced', recipient: requireEmail(d.recipient, 'data.recipient'), bounce }],
      };
    }
    case MTA_EVENT.dropped: {
      // The MTA dropped the job unsent: suppressed (the list's reason travels as a field) or screened.
      const d = root.data as MtaEventData[typeof MTA_EVENT.dropped];
      const recipient = requireEmail(d.recipient, 'data.recipient');
      const ref = { kind: 'lifecycle' as const, ...base, providerMessageId: d.messageId, sendId: null, organizationId: d.organizationId, recipient };
      return {
        events: [
          d.status === 'suppressed'
            ? { ...ref, status: 'suppressed', suppression: { reason: MTA_SUPPRESSION_REASONS[d.reason] ?? 'unknown' } }
            : { ...ref, status: 'rejected', rejection: { reason: `screened: ${d.reason}` } },
        ],
      };
    }
    case MTA_EVENT.complained: {
      const d = root.data as MtaEventData[typeof MTA_EVENT.complained];
      return {
        events: [
          {
            kind: 'lifecycle',
            ...base,
            providerMessageId: d.messageId,
            sendId: null,
            organizationId: d.organizationId,
            status: 'complained',
            recipient: requireEmail(d.recipient, 'data.recipient'),
            complaint: { feedbackType: d.feedbackType },
          },
        ],
      };
    }
    case MTA_EVENT.inboundReceived: {
      const d = root.data as MtaEventData[typeof MTA_EVENT.inboundReceived];
      const to = d.to.map(normEmail).filter((e): e is string => e !== null);
      if (to.length === 0) throw new FeedbackFormatError('An inbound.received event needs at least one address in data.to');
      const known = new Set(Object.keys(MTA_EVENT_DATA[MTA_EVENT.inboundReceived].properties));
      const extra: Json = {};
      for (const [k, v] of Object.entries(d)) if (!known.has(k)) extra[k] = v;
      const ev: FeedbackEvent = {
        kind: 'inbound',
        ...base,
        message: {
          messageId: d.messageId,
          from: d.from,
          to,
          subject: d.subject,
          text: d.text,
          html: d.html,
          inReplyTo: d.inReplyTo,
          references: d.references,
          receivedAt: timeMs(d.receivedAt, occurredAt),
          route: d.route ?? null,
          attachments: d.attachments ?? [],
          authentication: d.authentication ?? null,
          rawSize: d.rawSize ?? null,
          raw: d.raw === undefined ? null : decodeBase64(d.raw, 'data.raw'),
          extra,
        },
      };
      return { events: [ev] };
    }
    default: {
      const data = root.data as Json;
      return {
        events: [
          {
            kind: 'operational',
            ...base,
            event: name,
            severity: SEVERITY[name],
            organizationId: typeof data.organizationId === 'string' ? data.organizationId : null,
            ip: typeof data.ip === 'string' ? data.ip : null,
            data,
          },
        ],
      };
    }
  }
}
