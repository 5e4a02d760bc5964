/**
 * The campaign fan-out: one durable job per campaign on the shared queue (group key = the
 * campaign, so one instance works on a campaign at a time). Each run is a slice of at most
 * FANOUT.sliceMs and re-queues itself; a stopping instance ends the slice after the batch in
 * flight:
 *   1. while campaign sending is paused (circuit breaker): defer;
 *   2. materialize: copy eligible members into campaign_recipients in keyset chunks, each
 *      chunk in one transaction with the cursor (idempotent: ON CONFLICT DO NOTHING);
 *   3. send: take queued recipients in id order, re-check eligibility (unsubscribed,
 *      suppressed or removed since → skipped), render, write their email_sends rows
 *      (`sending`), hand over concurrently, then record every outcome in one transaction.
 * Restart safety: a recipient leaves `queued` only in the transaction that records its
 * hand-over, so a stop or crash never loses one; a clean stop finishes the batch in flight,
 * so nothing is handed over twice. After a hard crash the batch in flight is handed over
 * again under the same messageId (the email_sends id), which the MTA de-duplicates.
 */
import type { Clock } from '../../shared/clock.js';
import { toIso } from '../../shared/clock.js';
import { newId } from '../../shared/crypto.js';
import type { Db } from '../../shared/db/pool.js';
import { tx } from '../../shared/db/pool.js';
import type { Logger } from '../../shared/log.js';
import { Queue } from '../../shared/queue/queue.js';
import type { Job, JobOutcome } from '../../shared/queue/types.js';
import { Worker } from '../../shared/queue/worker.js';
import type { Signer } from '../../shared/signing.js';
import { domainOf, parseMailbox } from '../api/email-address.js';
import { isCampaignSendingPaused } from '../feedback/sending-pause.js';
import type { LinkSigner } from '../public/tracked-links.js';
import { insertEngagementRows } from '../public/tracking-recorder.js';
import { preferencesToken, unsubscribeToken } from '../public/tokens.js';
import { CAMPAIGN_QUEUE, ENGAGEMENT, engagementScore, FANOUT } from './policy.js';
import { compileCampaign, renderForRecipient, type CompiledCampaign } from './render.js';
import { ProviderError, type CampaignMessage, type CampaignTransport, type HandOff, type TransportResolver } from './transport.js';

export interface FanoutJob {
  campaignId: string;
}

export interface FanoutDeps {
  db: Db;
  clock: Clock;
  log: Logger;
  signer: Signer;
  links: LinkSigner;
  transports: TransportResolver;
  baseUrl: () => string;
  organizationName: string;
}

/** Members who get a campaign: active, not waiting for double opt-in, not suppressed. */
export const ELIGIBLE_MEMBERS = `
  FROM topic_memberships m JOIN contacts c ON c.id = m.contact_id
 WHERE m.topic_id = $1 AND m.unsubscribed_at IS NULL AND m.doi_status IN ('confirmed', 'not_required')
   AND NOT EXISTS (SELECT 1 FROM suppressions s WHERE s.email = lower(c.email))`;

interface CampaignRow {
  id: string;
  subject: string;
  html: string;
  text_body: string | null;
  from_mailbox: string;
  topic_id: string;
  topic_name: string;
  status: string;
  archive_token: string;
  materialized: boolean;
  materialized_through: string | null;
}

interface RecipientRow {
  contact_id: string;
  send_id: string;
  email: string;
  eligible: boolean;
}

export function createFanoutQueue(d: Pick<FanoutDeps, 'db' | 'clock'>): Queue<FanoutJob> {
  return new Queue<FanoutJob>({ db: d.db, clock: d.clock, options: CAMPAIGN_QUEUE });
}

export class Fanout {
  readonly queue: Queue<FanoutJob>;
  private readonly worker: Worker<FanoutJob>;
  private readonly compiled = new Map<string, CompiledCampaign>();
  /** Set by stop(): a running slice ends after the batch in flight. */
  private stopping = false;

  constructor(private readonly d: FanoutDeps) {
    this.queue = createFanoutQueue(d);
    this.worker = new Worker<FanoutJob>({
      queue: this.queue,
      handler: (job) => this.run(job),
      concurrency: FANOUT.workerConcurrency,
      log: d.log,
    });
  }

  async start(): Promise<void> {
    await this.worker.start();
    // A campaign marked sending whose job was never enqueued (crash in between): enqueue it now.
    const r = await this.d.db.query<{ id: string }>(`SELECT id FROM campaigns WHERE status = 'sending'`);
    for (const { id } of r.rows) await this.enqueue(id);
  }

  async stop(): Promise<void> {
    this.stopping = true;
    await this.worker.stop({ drain: true, timeoutMs: FANOUT.sliceMs + FANOUT.providerTimeoutMs + 5_000 });
  }

  enqueue(campaignId: string): Promise<unknown> {
    return this.queue.enqueue({ groupKey: `campaign:${campaignId}`, payload: { campaignId }, dedupeKey: `campaign:${campaignId}` });
  }

  /** One slice of a campaign's fan-out. */
  async run(job: Job<FanoutJob>): Promise<JobOutcome> {
    const started = this.d.clock.now();
    const deadline = performance.now() + FANOUT.sliceMs;
    const c = (
      await this.d.db.query<CampaignRow>(
        `SELECT c.id, c.subject, c.html, c.text_body, c.from_mailbox, c.topic_id, t.name AS topic_name, c.status, c.archive_token,
                c.materialized, c.materialized_through
           FROM campaigns c JOIN topics t ON t.id = c.topic_id WHERE c.id = $1`,
        [job.payload.campaignId],
      )
    ).rows[0];
    if (!c || c.status !== 'sending') return { type: 'complete' };
    if (await isCampaignSendingPaused(this.d.db)) {
      this.d.log.warn({ campaignId: c.id }, 'campaign sending is paused (circuit breaker); the campaign waits');
      return { type: 'defer', delayMs: FANOUT.pausedRecheckMs, reason: 'campaign sending paused by the circuit breaker' };
    }

    let transport: CampaignTransport;
    try {
      transport = this.d.transports.resolve();
    } catch (err) {
      return this.retryOrFail(job, c.id, `no provider: ${(err as Error).message}`);
    }

    let materialized = c.materialized;
    let cursor = c.materialized_through;
    const more = () => performance.now() < deadline && !this.stopping;
    while (!materialized && more()) {
      ({ done: materialized, cursor } = await this.materializeChunk(c, cursor));
    }
    if (!materialized) return { type: 'defer', delayMs: 0, reason: 'materializing recipients' };

    const compiled = this.compile(c);
    while (more()) {
      const r = await this.sendBatch(c, compiled, transport);
      if (r.transientError) return this.retryOrFail(job, c.id, r.transientError);
      if (r.remaining === 0) {
        await this.d.db.query(`UPDATE campaigns SET status = 'sent', completed_at = $2, updated_at = $2 WHERE id = $1 AND status = 'sending'`, [
          c.id,
          toIso(this.d.clock.now()),
        ]);
        this.compiled.delete(c.id);
        this.d.log.info({ campaignId: c.id, ms: this.d.clock.now() - started }, 'campaign handed over completely');
        return { type: 'complete' };
      }
    }
    return { type: 'defer', delayMs: 0, reason: 'next slice' };
  }

  private async retryOrFail(job: Job<FanoutJob>, campaignId: string, error: string): Promise<JobOutcome> {
    if (job.attempts >= job.maxAttempts) {
      await this.d.db.query(`UPDATE campaigns SET status = 'failed', error = $2, updated_at = $3 WHERE id = $1 AND status = 'sending'`, [
        campaignId,
        error.slice(0, 1000),
        toIso(this.d.clock.now()),
      ]);
    }
    this.d.log.warn({ campaignId, error }, 'campaign fan-out will retry');
    return { type: 'retry', error };
  }

  private compile(c: CampaignRow): CompiledCampaign {
    let compiled = this.compiled.get(c.id);
    if (!compiled) {
      compiled = compileCampaign(c.html, c.text_body, { topic: c.topic_name, organization: this.d.organizationName });
      this.compiled.set(c.id, compiled);
    }
    return compiled;
  }

  private async materializeChunk(c: CampaignRow, cursor: string | null): Promise<{ done: boolean; cursor: string | null }> {
    const rows = (
      await this.d.db.query<{ contact_id: string; email: string }>(
        `SELECT m.contact_id, c.email ${ELIGIBLE_MEMBERS} AND m.contact_id > $2 ORDER BY m.contact_id LIMIT $3`,
        [c.topic_id, cursor ?? '', FANOUT.materializeChunk],
      )
    ).rows;
    const done = rows.length < FANOUT.materializeChunk;
    const next = rows.length ? rows[rows.length - 1]!.contact_id : cursor;
    const now = this.d.clock.now();
    await tx(this.d.db, async (q) => {
      if (rows.length) {
        await q.query(
          `INSERT INTO campaign_recipients (campaign_id, contact_id, send_id, email, status, updated_at)
           SELECT $1, t.contact_id, t.send_id, t.email, 'queued', $5 FROM unnest($2::text[], $3::text[], $4::text[]) AS t(contact_id, send_id, email)
           ON CONFLICT (campaign_id, contact_id) DO NOTHING`,
          [c.id, rows.map((r) => r.contact_id), rows.map(() => newId('es', now)), rows.map((r) => r.email), toIso(now)],
        );
      }
      await q.query(`UPDATE campaigns SET materialized_through = $2, materialized = $3, updated_at = $4 WHERE id = $1`, [c.id, next, done, toIso(now)]);
    });
    return { done, cursor: next };
  }

  /** Hands over one batch; returns how many were queued before it (0: nothing left). */
  private async sendBatch(c: CampaignRow, compiled: CompiledCampaign, transport: CampaignTransport): Promise<{ remaining: number; transientError?: string }> {
    const rows = (
      await this.d.db.query<RecipientRow>(
        `SELECT r.contact_id, r.send_id, COALESCE(ct.email, r.email) AS email,
                (ct.id IS NOT NULL AND m.unsubscribed_at IS NULL AND m.doi_status IN ('confirmed', 'not_required') AND s.email IS NULL) AS eligible
           FROM campaign_recipients r
           LEFT JOIN contacts ct ON ct.id = r.contact_id
           LEFT JOIN topic_memberships m ON m.topic_id = $2 AND m.contact_id = r.contact_id
           LEFT JOIN suppressions s ON s.email = lower(COALESCE(ct.email, r.email))
          WHERE r.campaign_id = $1 AND r.status = 'queued'
          ORDER BY r.send_id LIMIT $3`,
        [c.id, c.topic_id, FANOUT.sendBatch],
      )
    ).rows;
    if (rows.length === 0) return { remaining: 0 };
    const now = this.d.clock.now();
    const eligible = rows.filter((r) => r.eligible);
    const skipped = rows.filter((r) => !r.eligible);
    const scores = await this.scores(eligible.map((r) => r.contact_id), c.id, now);

    const from = parseMailbox(c.from_mailbox)!;
    const base = this.d.baseUrl();
    const listId = `${c.topic_name.replace(/[^\x20-\x7e]|["<>\\]/g, '').trim().slice(0, 100)} <${c.topic_id.toLowerCase().replace(/[^a-z0-9-]/g, '-')}.${new URL(base).hostname}>`;
    const messages: CampaignMessage[] = eligible.map((r) => {
      const unsubscribeUrl = `${base}/unsub/${unsubscribeToken(this.d.signer, { c: r.contact_id, t: c.topic_id, s: r.send_id }, now)}`;
      const preferencesUrl = `${base}/prefs/${preferencesToken(this.d.signer, r.contact_id, now)}`;
      const body = renderForRecipient(
        compiled,
        {
          emailSendId: r.send_id,
          unsubscribeUrl,
          preferencesUrl,
          archiveUrl: `${base}/archive/${c.archive_token}`,
          pixelUrl: `${base}/t/o/${r.send_id}`,
          clickBase: `${base}/t/c/${r.send_id}/`,
        },
        this.d.links,
      );
      return {
        id: r.send_id,
        to: r.email,
        from: c.from_mailbox,
        subject: c.subject,
        html: body.html,
        text: body.text,
        headers: {
          'List-Unsubscribe': `<${unsubscribeUrl}>`,
          'List-Unsubscribe-Post': 'List-Unsubscribe=One-Click',
          'List-Id': listId,
        },
        dkimDomain: domainOf(from.address),
        campaignId: c.id,
        engagementScore: scores.get(r.contact_id),
      };
    });

    // The rows exist before the hand-over (status sending), as for every send.
    if (messages.length) {
      await this.d.db.query(
        `INSERT INTO email_sends (id, type, contact_id, campaign_id, to_email, from_email, subject, provider, status, metadata, created_at, updated_at)
         SELECT t.id, 'campaign', t.contact_id, $1, t.to_email, $2, $3, $4, 'sending', '{}', $5, $5
           FROM unnest($6::text[], $7::text[], $8::text[]) AS t(id, contact_id, to_email)
           JOIN contacts ct ON ct.id = t.contact_id
         ON CONFLICT (id) DO NOTHING`,
        [c.id, from.address, c.subject, transport.name, toIso(now), messages.map((m) => m.id), eligible.map((r) => r.contact_id), messages.map((m) => m.to)],
      );
    }

    const contactOf = new Map(eligible.map((r) => [r.send_id, r.contact_id]));
    const results = await handOver(messages, transport, FANOUT.concurrency);
    const sentAt = this.d.clock.now();
    const accepted: { m: CampaignMessage; h: HandOff }[] = [];
    const refused: { m: CampaignMessage; error: string }[] = [];
    let transient: string | undefined;
    results.forEach((res, i) => {
      const m = messages[i]!;
      if (res.ok) accepted.push({ m, h: res.value });
      else if (res.error instanceof ProviderError && !res.error.retryable) refused.push({ m, error: res.error.message });
      else transient ??= res.error instanceof Error ? res.error.message : String(res.error);
    });

    await tx(this.d.db, async (q) => {
      const at = toIso(sentAt);
      if (accepted.length) {
        await q.query(
          `UPDATE email_sends e SET status = 'accepted', provider_message_id = t.pid, updated_at = $2
             FROM unnest($1::text[], $3::text[]) AS t(id, pid) WHERE e.id = t.id AND e.status = 'sending'`,
          [accepted.map((a) => a.m.id), at, accepted.map((a) => a.h.providerMessageId)],
        );
        await insertEngagementRows(q, accepted.map((a) => ({ emailSendId: a.m.id, contactId: contactOf.get(a.m.id) ?? null, campaignId: c.id, sentAt })));
      }
      if (refused.length) {
        await q.query(
          `UPDATE email_sends e SET status = 'failed', error = t.err, updated_at = $2
             FROM unnest($1::text[], $3::text[]) AS t(id, err) WHERE e.id = t.id AND e.status = 'sending'`,
          [refused.map((r) => r.m.id), at, refused.map((r) => r.error.slice(0, 1000))],
        );
      }
      const ids = [...accepted.map((a) => a.m.id), ...refused.map((r) => r.m.id), ...skipped.map((s) => s.send_id)];
      const statuses = [...accepted.map(() => 'sent'), ...refused.map(() => 'failed'), ...skipped.map(() => 'skipped')];
      const errors = [...accepted.map(() => null), ...refused.map((r) => r.error.slice(0, 1000)), ...skipped.map(() => 'no longer eligible')];
      if (ids.length) {
        await q.query(
          `UPDATE campaign_recipients r SET status = t.status, error = t.err, updated_at = $2
             FROM unnest($1::text[], $3::text[], $4::text[]) AS t(id, status, err) WHERE r.send_id = t.id AND r.status = 'queued'`,
          [ids, at, statuses, errors],
        );
      }
    });
    if (refused.length) this.d.log.warn({ campaignId: c.id, refused: refused.length, example: refused[0]!.error }, 'provider refused campaign messages');
    return { remaining: rows.length, transientError: transient };
  }

  /** Engagement scores of these contacts from their recent campaign messages (absent: unknown). */
  private async scores(contactIds: string[], campaignId: string, now: number): Promise<Map<string, number>> {
    const out = new Map<string, number>();
    if (contactIds.length === 0) return out;
    const r = await this.d.db.query<{ contact_id: string; sends: number; opened: number; clicked: number }>(
      `SELECT contact_id, count(*)::int AS sends, count(first_human_open_at)::int AS opened, count(first_human_click_at)::int AS clicked
         FROM email_engagement
        WHERE contact_id = ANY ($1::text[]) AND sent_at >= $2 AND campaign_id IS DISTINCT FROM $3
        GROUP BY contact_id`,
      [contactIds, toIso(now - ENGAGEMENT.lookbackDays * 86_400_000), campaignId],
    );
    for (const row of r.rows) {
      const s = engagementScore(row.sends, row.opened, row.clicked);
      if (s !== undefined) out.set(row.contact_id, s);
    }
    return out;
  }
}

type Settled<T> = { ok: true; value: T } | { ok: false; error: unknown };

/** Sends with at most `limit` in flight; results in input order. */
async function handOver(messages: CampaignMessage[], t: CampaignTransport, limit: number): Promise<Settled<HandOff>[]> {
  const out: Settled<HandOff>[] = new Array(messages.length);
  let next = 0;
  const lane = async () => {
    while (next < messages.length) {
      const i = next++;
      try {
        out[i] = { ok: true, value: await t.send(messages[i]!) };
      } catch (error) {
        out[i] = { ok: false, error };
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, messages.length) }, lane));
  return out;
}
