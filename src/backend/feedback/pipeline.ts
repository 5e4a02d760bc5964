/**
 * The one place feedback has effects. Every route hands its translated events here; each
 * event is applied at most once: its (source, provider event id) row is inserted in the
 * same transaction as its effects, so a replay (or a concurrent duplicate, which waits on
 * the unique index) finds the row and does nothing.
 *
 * Lifecycle effects: the send's status (never backwards), the blocklist for hard bounces
 * and complaints (and relay suppressions with a blocklist reason), the contact's activity,
 * and the customer event (email.delivered / bounced / complained; email.sent comes from the
 * hand-over, not from feedback) once the transaction has committed. MTA operational effects: team inbox, recorded MTA events,
 * campaign-sending pause on a circuit breaker, and logs.
 */
import type { Clock } from '../../shared/clock.js';
import { newId } from '../../shared/crypto.js';
import { tx, type Db, type DbClient } from '../../shared/db/pool.js';
import type { Logger } from '../../shared/log.js';
import type { BackendEventMap, BackendEventName } from '../events.js';
import type { FeedbackEvent, InboundEvent, LifecycleEvent, OperationalEvent, SuppressionReason } from './lifecycle.js';
import { ACTIVITY_STATUSES, BLOCKLIST_SUPPRESSION_REASONS, CUSTOMER_EVENT } from './policy.js';
import { findContactId, findSend, moveSendStatus, type SendRef } from './sends.js';

export interface EventEmitter {
  emit<K extends BackendEventName>(name: K, data: BackendEventMap[K]): Promise<void>;
}

export interface PipelineDeps {
  db: Db;
  clock: Clock;
  log: Logger;
  events: EventEmitter;
}

export interface ApplyResult {
  applied: number;
  duplicates: number;
}

type Pending = { emit: { name: BackendEventName; data: any }[]; log: (() => void)[] };

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
  if (groups.every((g) => g.length === 0)) return groups.map(() => ({ applied: 0, duplicates: 0 }));
  let pending: Pending;
  let results: ApplyResult[];
  for (let attempt = 1; ; attempt++) {
    pending = { emit: [], log: [] };
    try {
      results = await tx(deps.db, async (c) => {
        const out: ApplyResult[] = [];
        for (const events of groups) {
          const r: ApplyResult = { applied: 0, duplicates: 0 };
          for (const ev of events) {
            if (await applyOne(c, deps, ev, pending)) r.applied++;
            else r.duplicates++;
          }
          out.push(r);
        }
        return out;
      });
      break;
    } catch (err) {
      // Two batches touching the same addresses in opposite order can deadlock; PostgreSQL
      // aborts one. Nothing of it was committed, so running it again is safe.
      if (attempt < 3 && (err as { code?: string }).code === '40P01') continue;
      throw err;
    }
  }
  for (const l of pending.log) l();
  for (const e of pending.emit) await deps.events.emit(e.name, e.data);
  return results;
}

async function applyOne(c: DbClient, deps: PipelineDeps, ev: FeedbackEvent, pending: Pending): Promise<boolean> {
  const now = deps.clock.now();
  const id = newId('fbe', now);
  const lifecycle = ev.kind === 'lifecycle' ? ev : null;
  const inserted = await c.query({
    name: 'lm_fb_event_insert',
    text: `INSERT INTO feedback_events (id, source, provider_event_id, kind, type, recipient, provider_message_id, send_id, detail, occurred_at, received_at)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
           ON CONFLICT (source, provider_event_id) DO NOTHING RETURNING id`,
    values: [
      id,
      ev.source,
      ev.eventId,
      ev.kind,
      ev.kind === 'lifecycle' ? ev.status : ev.kind === 'inbound' ? 'inbound.received' : ev.event,
      lifecycle?.recipient ?? null,
      lifecycle?.providerMessageId ?? null,
      lifecycle?.sendId ?? null,
      JSON.stringify(lifecycle ? { bounce: lifecycle.bounce, complaint: lifecycle.complaint, suppression: lifecycle.suppression } : {}),
      iso(ev.occurredAt),
      iso(now),
    ],
  });
  if (inserted.rowCount === 0) return false;
  if (ev.kind === 'lifecycle') await applyLifecycle(c, deps, ev, id, pending);
  else if (ev.kind === 'inbound') await applyInbound(c, deps, ev, pending);
  else await applyOperational(c, deps, ev, pending);
  return true;
}

function blocklistReason(ev: LifecycleEvent): SuppressionReason | null {
  if (ev.status === 'bounced' && ev.bounce?.type === 'hard') return 'hard_bounce';
  if (ev.status === 'complained') return 'complaint';
  if (ev.status === 'suppressed' && ev.suppression && BLOCKLIST_SUPPRESSION_REASONS.has(ev.suppression.reason)) return ev.suppression.reason;
  return null;
}

async function applyLifecycle(c: DbClient, deps: PipelineDeps, ev: LifecycleEvent, feedbackId: string, pending: Pending): Promise<void> {
  const now = deps.clock.now();
  const send = await findSend(c, ev);
  let moved = false;
  if (send) {
    moved = await moveSendStatus(c, send, ev.status, now);
    await c.query({ name: 'lm_fb_event_send', text: 'UPDATE feedback_events SET send_id = $2 WHERE id = $1', values: [feedbackId, send.id] });
  }
  const recipient = ev.recipient ?? send?.to ?? null;
  if (!recipient) return;

  const reason = blocklistReason(ev);
  if (reason) {
    // The first reason an address was blocked for is kept.
    await c.query(
      `INSERT INTO suppressions (email, reason, source, created_at) VALUES ($1, $2, $3, $4) ON CONFLICT (email) DO NOTHING`,
      [recipient, reason, ev.source, iso(now)],
    );
  }

  const contactId = send?.contactId ?? (await findContactId(c, recipient));
  if (ACTIVITY_STATUSES.has(ev.status)) {
    await c.query(
      `INSERT INTO contact_activity (id, email, contact_id, type, send_id, source, detail, occurred_at, created_at)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
      [
        newId('act', now),
        recipient,
        contactId,
        `email.${ev.status}`,
        send?.id ?? null,
        ev.source,
        JSON.stringify({
          providerMessageId: ev.providerMessageId,
          bounce: ev.bounce ?? null,
          feedbackType: ev.complaint?.feedbackType ?? null,
          suppressionReason: ev.suppression?.reason ?? null,
          blocklisted: reason !== null,
        }),
        iso(ev.occurredAt),
        iso(now),
      ],
    );
  }

  const name = CUSTOMER_EVENT[ev.status];
  // Customer events follow the send's status: one per transition, none for a late or
  // repeated report (a second "delivered", a "sent" after "delivered"). Feedback about a
  // send this backend does not know (sent before this deployment, or by something else)
  // still blocklists, silently.
  if (name && send && moved) pending.emit.push({ name, data: customerData(name, ev, send, contactId) });
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
  await c.query(
    `INSERT INTO feedback_inbox (id, message_id, from_address, to_addresses, subject, text_body, html_body, in_reply_to, refs, extra, received_at, created_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
    [id, m.messageId, m.from, m.to, m.subject, m.text, m.html, m.inReplyTo, m.references, JSON.stringify(m.extra), iso(m.receivedAt), iso(now)],
  );
  pending.log.push(() => deps.log.info({ inboxId: id, to: m.to }, 'inbound message stored in the team inbox'));
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
    case 'org.circuit_breaker': {
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
    case 'all_ips_blocked':
      pending.log.push(() => deps.log.error(ctx, 'MTA reports every sending IP blocked: sending has halted'));
      break;
    case 'ip.blocklisted':
      pending.log.push(() => deps.log.warn(ctx, 'MTA sending IP is blocklisted and was removed from its pool'));
      break;
    case 'ip.delisted':
      pending.log.push(() => deps.log.warn(ctx, 'MTA sending IP is no longer blocklisted'));
      break;
    case 'ip.warming_complete':
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
