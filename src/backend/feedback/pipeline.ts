/**
 * The one place feedback has effects. Every route hands its translated events here; each
 * event is applied at most once: its (source, provider event id) row is inserted in the
 * same transaction as its effects, so a replay (or a concurrent duplicate, which waits on
 * the unique index) finds the row and does nothing.
 *
 * Lifecycle effects: the send's status (never backwards), the blocklist for hard bounces
 * and complaints (and relay suppressions with a blocklist reason), the contact's activity,
 * and the customer event (email.delivered / bounced / complained; email.sent comes from the
 * hand-over, not from feedback), written in the same transaction. MTA operational effects: team inbox, recorded MTA events,
 * campaign-sending pause on a circuit breaker, and logs.
 */
import type { Clock } from '../../shared/clock.js';
import { MTA_EVENT } from '../../shared/contracts/mta.js';
import { newId } from '../../shared/crypto.js';
import { tx, type Db, type DbClient } from '../../shared/db/pool.js';
import type { Logger } from '../../shared/log.js';
import type { BackendEventName, EventBus } from '../events.js';
import type { FeedbackEvent, InboundEvent, LifecycleEvent, OperationalEvent, SuppressionReason } from './lifecycle.js';
import { ACTIVITY_STATUSES, BLOCKLIST_SUPPRESSION_REASONS, CUSTOMER_EVENT } from './policy.js';
import { findContactIds, findRepliedSend, findSends, moveSendStatus, saveSendStatuses, type SendRef } from '../sends/feedback.js';
import { parseMailbox } from '../../shared/mail/address.js';
import { messageIdsIn } from '../../shared/mail/message-id.js';

/** The backend's event bus as feedback uses it: customer events written in the feedback transaction. */
export type EventEmitter = Pick<EventBus, 'emitIn'>;

export interface PipelineDeps {
  db: Db;
  clock: Clock;
  log: Logger;
  events: EventEmitter;
  /** ORGANIZATION_ID: an event naming another organization matches none of this backend's sends (findSends). */
  organizationId?: string;
}

export interface ApplyResult {
  applied: number;
  duplicates: number;
}

type Pending = { emit: { name: BackendEventName; data: any }[]; log: (() => void)[]; committed: () => void };

const iso = (ms: number) => new Date(ms).toISOString();

/** Applies a batch in one transaction; customer events are emitted after it commits. */
export async function applyFeedback(deps: PipelineDeps, events: FeedbackEvent[]): Promise<ApplyResult> {
  return (await applyFeedbackGroups(deps, [events]))[0]!;
}

/**
 * Applies several requests' batches in ONE transaction (group commit of the MTA event
 * webhook, routes.ts) and returns each batch's own counts; customer events are emitted after
 * the commit.
 */
export async function applyFeedbackGroups(deps: PipelineDeps, groups: FeedbackEvent[][]): Promise<ApplyResult[]> {
  const events = groups.flat();
  if (events.length === 0) return groups.map(() => ({ applied: 0, duplicates: 0 }));
  let pending: Pending;
  let applied: boolean[];
  for (let attempt = 1; ; attempt++) {
    pending = { emit: [], log: [], committed: () => {} };
    try {
      applied = await tx(deps.db, (c) => applyAll(c, deps, events, pending));
      break;
    } catch (err) {
      // Two batches touching the same rows in opposite order can deadlock; PostgreSQL aborts
      // one. Nothing of it was committed, so running it again is safe.
      if (attempt < 3 && (err as { code?: string }).code === '40P01') continue;
      throw err;
    }
  }
  for (const l of pending.log) l();
  pending.committed();
  let at = 0;
  return groups.map((g) => {
    const mine = applied.slice(at, (at += g.length));
    const n = mine.filter(Boolean).length;
    return { applied: n, duplicates: g.length - n };
  });
}

/**
 * One transaction's events, set-based: a fixed number of statements whatever the batch size
 * (the MTA reports every delivered message, so this is on the delivery path's heels). Event
 * order is kept where it matters: a send's status moves, the first blocklist reason and
 * customer events follow the order the events came in. Returns, per event, whether it was
 * applied (false: a duplicate).
 */
async function applyAll(c: DbClient, deps: PipelineDeps, events: FeedbackEvent[], pending: Pending): Promise<boolean[]> {
  const now = deps.clock.now();
  const lifecycle = events.filter((e): e is LifecycleEvent => e.kind === 'lifecycle');
  // Sends first, locked in id order: a concurrent batch about the same sends waits here.
  const sendOf = new Map<LifecycleEvent, SendRef | null>();
  (await findSends(c, lifecycle, deps.organizationId)).forEach((s, i) => sendOf.set(lifecycle[i]!, s));

  const ids = await recordEvents(c, events, sendOf, now);
  const applied = ids.map((id) => id !== null);

  type Effect = { ev: LifecycleEvent; send: SendRef | null; recipient: string; reason: SuppressionReason | null; moved: boolean };
  const effects: Effect[] = [];
  const suppress = new Map<string, { reason: SuppressionReason; source: string }>();
  events.forEach((ev, i) => {
    if (!applied[i] || ev.kind !== 'lifecycle') return;
    const send = sendOf.get(ev) ?? null;
    const moved = send ? moveSendStatus(send, ev.status) : false;
    const recipient = ev.recipient ?? send?.to.toLowerCase() ?? null;
    if (!recipient) return;
    const reason = blocklistReason(ev);
    // The first reason an address was blocked for is kept (here and in the table).
    if (reason && !suppress.has(recipient)) suppress.set(recipient, { reason, source: ev.source });
    effects.push({ ev, send, recipient, reason, moved });
  });

  await saveSendStatuses(c, new Set([...sendOf.values()].filter((s): s is SendRef => s !== null)), now);
  if (suppress.size > 0) {
    await c.query({
      name: 'lm_fb_suppress',
      text: `INSERT INTO suppressions (email, reason, source, created_at)
             SELECT u.email, u.reason, u.source, $4 FROM unnest($1::text[], $2::text[], $3::text[]) AS u(email, reason, source)
             ORDER BY u.email ON CONFLICT (email) DO NOTHING`,
      values: [[...suppress.keys()], [...suppress.values()].map((v) => v.reason), [...suppress.values()].map((v) => v.source), iso(now)],
    });
  }
  const contacts = await findContactIds(
    c,
    effects.filter((e) => !e.send?.contactId).map((e) => e.recipient),
  );
  const activity = effects.filter((e) => ACTIVITY_STATUSES.has(e.ev.status));
  if (activity.length > 0) {
    const col = <T>(f: (e: Effect) => T) => activity.map(f);
    await c.query({
      name: 'lm_fb_activity',
      text: `INSERT INTO contact_activity (id, email, contact_id, type, send_id, source, detail, occurred_at, created_at)
             SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::jsonb[], $8::timestamptz[], $9::timestamptz[])`,
      values: [
        col(() => newId('act', now)),
        col((e) => e.recipient),
        col((e) => e.send?.contactId ?? contacts.get(e.recipient) ?? null),
        col((e) => `email.${e.ev.status}`),
        col((e) => e.send?.id ?? null),
        col((e) => e.ev.source),
        col((e) =>
          JSON.stringify({
            providerMessageId: e.ev.providerMessageId,
            bounce: e.ev.bounce ?? null,
            feedbackType: e.ev.complaint?.feedbackType ?? null,
            suppressionReason: e.ev.suppression?.reason ?? null,
            blocklisted: e.reason !== null,
          }),
        ),
        col((e) => iso(e.ev.occurredAt)),
        col(() => iso(now)),
      ],
    });
  }
  // Customer events follow the send's status: one per transition, none for a late or
  // repeated report (a second "delivered", a "sent" after "delivered"). Feedback about a send
  // this backend does not know (sent before this deployment, or by something else) still
  // blocklists, silently.
  for (const e of effects) {
    const name = CUSTOMER_EVENT[e.ev.status];
    if (name && e.send && e.moved) pending.emit.push({ name, data: customerData(name, e.ev, e.send, e.send.contactId ?? contacts.get(e.recipient) ?? null) });
  }

  for (let i = 0; i < events.length; i++) {
    const ev = events[i]!;
    if (!applied[i]) continue;
    if (ev.kind === 'inbound') await applyInbound(c, deps, ev, pending);
    else if (ev.kind === 'operational') await applyOperational(c, deps, ev, pending);
  }
  // Written with the effects (outbound webhook deliveries in this transaction): a crash after
  // the commit cannot lose them, and a rolled-back batch leaves none behind.
  pending.committed = await deps.events.emitIn(c, pending.emit, now);
  return applied;
}

/**
 * Inserts the events' (source, provider event id) rows in one statement; per event, its new
 * row id, or null for a duplicate (already recorded, or repeated earlier in this batch).
 * Rows are inserted in key order, so concurrent batches wait on each other's keys in one
 * order and cannot deadlock on them.
 */
async function recordEvents(c: DbClient, events: FeedbackEvent[], sendOf: Map<LifecycleEvent, SendRef | null>, now: number): Promise<(string | null)[]> {
  const ids: (string | null)[] = events.map(() => null);
  const first = new Map<string, number>();
  events.forEach((ev, i) => {
    const key = `${ev.source}\u0000${ev.eventId}`;
    if (!first.has(key)) first.set(key, i);
  });
  const rows = [...first.values()].sort((a, b) => {
    const x = events[a]!;
    const y = events[b]!;
    return x.source < y.source ? -1 : x.source > y.source ? 1 : x.eventId < y.eventId ? -1 : x.eventId > y.eventId ? 1 : 0;
  });
  const col = <T>(f: (ev: FeedbackEvent) => T) => rows.map((i) => f(events[i]!));
  const lc = (ev: FeedbackEvent) => (ev.kind === 'lifecycle' ? ev : null);
  const newIds = col(() => newId('fbe', now));
  const r = await c.query<{ id: string }>({
    name: 'lm_fb_events_insert',
    text: `INSERT INTO feedback_events (id, source, provider_event_id, kind, type, recipient, provider_message_id, send_id, detail, occurred_at, received_at)
           SELECT u.*, $11::timestamptz FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::jsonb[], $10::timestamptz[]) AS u
           ON CONFLICT (source, provider_event_id) DO NOTHING RETURNING id`,
    values: [
      newIds,
      col((ev) => ev.source),
      col((ev) => ev.eventId),
      col((ev) => ev.kind),
      col((ev) => (ev.kind === 'lifecycle' ? ev.status : ev.kind === 'inbound' ? MTA_EVENT.inboundReceived : ev.event)),
      col((ev) => lc(ev)?.recipient ?? null),
      col((ev) => lc(ev)?.providerMessageId ?? null),
      // The send found, else the id the provider echoed (kept even when unknown here).
      col((ev) => {
        const l = lc(ev);
        return l ? (sendOf.get(l)?.id ?? l.sendId ?? null) : null;
      }),
      col((ev) => {
        const l = lc(ev);
        return JSON.stringify(l ? { bounce: l.bounce, complaint: l.complaint, suppression: l.suppression, delivery: l.delivery, rejection: l.rejection } : {});
      }),
      col((ev) => iso(ev.occurredAt)),
      iso(now),
    ],
  });
  const inserted = new Set(r.rows.map((row) => row.id));
  rows.forEach((i, k) => {
    if (inserted.has(newIds[k]!)) ids[i] = newIds[k]!;
  });
  return ids;
}

function blocklistReason(ev: LifecycleEvent): SuppressionReason | null {
  if (ev.status === 'bounced' && ev.bounce?.type === 'hard') return 'hard_bounce';
  if (ev.status === 'complained') return 'complaint';
  if (ev.status === 'suppressed' && ev.suppression && BLOCKLIST_SUPPRESSION_REASONS.has(ev.suppression.reason)) return ev.suppression.reason;
  return null;
}

function customerData(name: BackendEventName, ev: LifecycleEvent, send: SendRef, contactId: string | null) {
  const ref = { ...send.ref, contactId };
  const at = iso(ev.occurredAt);
  switch (name) {
    case 'email.delivered':
      return { ...ref, deliveredAt: at, smtpResponse: ev.delivery?.smtpResponse ?? null };
    case 'email.bounced': {
      const diag = ev.bounce?.diagnostic ?? null;
      return {
        ...ref,
        bouncedAt: at,
        bounce: {
          type: ev.bounce?.type ?? 'soft',
          reason: ev.bounce?.reason ?? 'undefined',
          status: ev.bounce?.status ?? (diag ? (/\b([245]\.\d{1,3}\.\d{1,3})\b/.exec(diag)?.[1] ?? null) : null),
          diagnostic: diag,
        },
      };
    }
    default:
      return { ...ref, complainedAt: at, feedbackType: ev.complaint?.feedbackType ?? null };
  }
}

async function applyInbound(c: DbClient, deps: PipelineDeps, ev: InboundEvent, pending: Pending): Promise<void> {
  const now = deps.clock.now();
  const m = ev.message;
  const id = newId('inb', now);
  const link = await replyLink(c, m);
  await c.query(
    `INSERT INTO feedback_inbox (id, message_id, from_address, to_addresses, subject, text_body, html_body, in_reply_to, refs, extra, received_at, created_at,
                                 raw, raw_size, attachments, authentication, route, send_id, contact_id, campaign_id, linked_by)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21)`,
    [
      id, m.messageId, m.from, m.to, m.subject, m.text, m.html, m.inReplyTo, m.references, JSON.stringify(m.extra), iso(m.receivedAt), iso(now),
      m.raw, m.rawSize ?? m.raw?.length ?? null, JSON.stringify(m.attachments), m.authentication ? JSON.stringify(m.authentication) : null,
      m.route ? JSON.stringify(m.route) : null, link?.sendId ?? null, link?.contactId ?? null, link?.campaignId ?? null, link?.by ?? null,
    ],
  );
  pending.log.push(() => deps.log.info({ inboxId: id, to: m.to, sendId: link?.sendId, linkedBy: link?.by }, 'inbound message stored in the team inbox'));
}

/**
 * What an inbound message answers: one of our sends by its In-Reply-To, else by its
 * References (newest first), against the Message-IDs recorded at hand-over; else only the
 * contact whose address sent it.
 */
async function replyLink(c: DbClient, m: InboundEvent['message']) {
  const direct = messageIdsIn(m.inReplyTo);
  const refs = m.references.flatMap(messageIdsIn).reverse();
  const send = await findRepliedSend(c, [...direct, ...refs]);
  if (send) {
    const by = direct.some((d) => d.toLowerCase() === send.messageId) ? ('in_reply_to' as const) : ('references' as const);
    return { sendId: send.id, contactId: send.contactId, campaignId: send.campaignId, by };
  }
  const from = parseMailbox(m.from)?.address.toLowerCase();
  const contactId = from ? (await findContactIds(c, [from])).get(from) : undefined;
  return contactId ? { sendId: null, contactId, campaignId: null, by: 'from_address' as const } : null;
}

async function applyOperational(c: DbClient, deps: PipelineDeps, ev: OperationalEvent, pending: Pending): Promise<void> {
  const now = deps.clock.now();
  const id = newId('mev', now);
  await c.query(
    `INSERT INTO feedback_mta_events (id, event, severity, organization_id, ip, data, occurred_at, received_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
    [id, ev.event, ev.severity, ev.organizationId, ev.ip, JSON.stringify(ev.data), iso(ev.occurredAt), iso(now)],
  );
  const ctx = { mtaEventId: id, event: ev.event, organizationId: ev.organizationId, ip: ev.ip, data: ev.data };
  switch (ev.event) {
    case MTA_EVENT.orgCircuitBreaker: {
      const reason = breakerReason(ev.data);
      await c.query(
        `INSERT INTO campaign_sending_pauses (id, mta_event_id, organization_id, reason, paused_at) VALUES ($1, $2, $3, $4, $5)`,
        [newId('pause', now), id, ev.organizationId, reason, iso(now)],
      );
      pending.log.push(() =>
        deps.log.error(ctx, 'MTA circuit breaker tripped: campaign sending is paused until an operator resumes it (POST /admin/sending/resume)'),
      );
      break;
    }
    case MTA_EVENT.allIpsBlocked:
      pending.log.push(() => deps.log.error(ctx, 'MTA reports every sending IP blocked: sending has halted'));
      break;
    case MTA_EVENT.ipBlocklisted:
      pending.log.push(() => deps.log.warn(ctx, 'MTA sending IP is blocklisted and was removed from its pool'));
      break;
    case MTA_EVENT.ipDelisted:
      pending.log.push(() => deps.log.warn(ctx, 'MTA sending IP is no longer blocklisted'));
      break;
    case MTA_EVENT.ipWarmingComplete:
      pending.log.push(() => deps.log.warn(ctx, 'MTA sending IP completed warming'));
      break;
  }
}

/** A one-line reason from the MTA's trip details (its `reason`, or signal, rate, threshold, window). */
function breakerReason(d: Record<string, unknown>): string {
  if (typeof d.reason === 'string' && d.reason.trim()) return d.reason.slice(0, 500);
  const pct = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) ? `${Math.round(v * 10000) / 100}%` : null);
  const signal = typeof d.signal === 'string' ? d.signal : null;
  const rate = pct(d.rate);
  const threshold = pct(d.threshold);
  if (signal && rate && threshold) {
    const window = typeof d.window === 'string' ? ` (${d.window} window${typeof d.sample === 'number' ? `, ${d.sample} sends` : ''})` : '';
    return `${signal} rate ${rate} over the ${threshold} threshold${window}`.slice(0, 500);
  }
  return 'circuit breaker tripped on the bounce or complaint rate';
}
