/**
 * The campaign fan-out: one durable job per campaign on the shared queue (group key = the
 * campaign, so one instance works on a campaign at a time). Each run is a slice of at most
 * FANOUT.sliceMs that re-queues itself; a stopping instance ends its slice after the batch
 * in flight.
 *
 * A slice walks the topic's eligible members (active, not waiting for double opt-in, not
 * suppressed — checked when each batch is read, so who left meanwhile is not sent to) in
 * contact-id order from the campaign's cursor, in batches: render, write the email_sends
 * rows (`sending`), hand over concurrently, then record the outcomes and move the cursor in
 * one transaction. The next batch is read, rendered and written while the current one is
 * handed over (the database works while this process talks to the provider).
 *
 * Restart safety: the cursor moves only in the transaction that records a batch, so a stop
 * or crash loses no one. Each message's email_sends id is derived from (campaign, contact):
 * a batch handed over again after a crash has the same ids (the MTA de-duplicates on the
 * job's messageId) and its rows are not duplicated; a clean stop finishes the batch in
 * flight and hands nothing over twice.
 *
 * `email.sent`: one per message the provider accepted, emitted after the batch's record
 * commits, only for sends whose hand-over that record was the first to note (see
 * recordHandOff in api/sending/send.ts), so a batch handed over again emits nothing twice.
 * The bus batches the writes (up to 500 events per transaction), so a 100,000-recipient
 * campaign costs the webhook store about 200 statements — none when no endpoint subscribes.
 */
import { recordFailures, recordHandOffs } from '../sends/handoff.js';
import { insertSends } from '../sends/status.js';
import { tx } from '../../shared/db/pool.js';
import { conflict, notFound } from '../../shared/errors.js';
import { RETRYABLE, retryArgs } from './recipients.js';
import { createHash, createHmac } from 'node:crypto';
import type { Clock } from '../../shared/clock.js';
import { toIso } from '../../shared/clock.js';
import type { Db } from '../../shared/db/pool.js';
import { newId } from '../../shared/crypto.js';
import type { Logger } from '../../shared/log.js';
import { domainOf, parseMailbox } from '../../shared/mail/address.js';
import { Queue } from '../../shared/queue/queue.js';
import type { Job, JobOutcome } from '../../shared/queue/types.js';
import { Worker } from '../../shared/queue/worker.js';
import type { Signer } from '../../shared/signing.js';
import type { EventBus } from '../events.js';
import { isCampaignSendingPaused } from '../feedback/sending-pause.js';
import type { LinkSigner } from '../public/tracked-links.js';
import { preferencesToken, unsubscribeToken } from '../public/tokens.js';
import { CAMPAIGN_QUEUE, ENGAGEMENT, engagementScore, FANOUT } from './policy.js';
import { compileCampaign, linkParts, renderForRecipient, type CompiledCampaign } from './render.js';
import { ProviderError, type CampaignMessage, type CampaignTransport, type HandOff, type TransportResolver } from './transport.js';

export interface FanoutJob {
  campaignId: string;
  /** A retry of the campaign's failures (POST /admin/campaigns/:id/retry): hands over its `sending` retry rows. */
  retry?: boolean;
}

export interface FanoutDeps {
  db: Db;
  clock: Clock;
  log: Logger;
  signer: Signer;
  links: LinkSigner;
  transports: TransportResolver;
  baseUrl: string;
  organizationName: string;
  /** Where `email.sent` goes (the backend's bus). */
  events?: Pick<EventBus, 'emitIn'>;
}

/** Members who get a campaign ($1 = topic): active, not waiting for double opt-in, not suppressed. */
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
  cursor_contact: string | null;
  send_started_at: Date;
}

/** What every message of a campaign shares, computed once. */
interface CampaignContext {
  row: CampaignRow;
  compiled: CompiledCampaign;
  linkParts: string[];
  fromAddress: string;
  dkimDomain: string;
  listId: string;
}

/** A member about to get the campaign: what the message is made from. */
interface Recipient {
  id: string;
  contactId: string;
  email: string;
  engagementScore: number | undefined;
}

interface Batch {
  /** In contact-id order. */
  items: Recipient[];
  /** The last member read. */
  last: string | null;
  /** Fewer members than a batch were left. */
  done: boolean;
}

type Settled<T> = { ok: true; value: T } | { ok: false; error: unknown };

export class Fanout {
  readonly queue: Queue<FanoutJob>;
  private readonly worker: Worker<FanoutJob>;
  private readonly contexts = new Map<string, CampaignContext>();
  private readonly idKey: Buffer;
  /** Set by stop(): a running slice ends after the batch in flight. */
  private stopping = false;

  constructor(private readonly d: FanoutDeps) {
    this.queue = new Queue<FanoutJob>({ db: d.db, clock: d.clock, options: CAMPAIGN_QUEUE });
    this.worker = new Worker<FanoutJob>({ queue: this.queue, handler: (job) => this.run(job), concurrency: FANOUT.workerConcurrency, log: d.log });
    // Send ids must be the same on every attempt yet unguessable: keyed by the instance signing key.
    this.idKey = createHash('sha256').update(d.signer.sign('lettermill/campaign-send-ids/v1', 'key')).digest();
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

  /** `es_<time of the send start><16 chars of HMAC(campaign, contact)>`: the shape of every email_sends id. */
  sendId(campaignId: string, startedAt: number, contactId: string): string {
    return newId('es', startedAt, createHmac('sha256', this.idKey).update(campaignId).update('\0').update(contactId).digest());
  }

  /**
   * Queues a retry of the campaign's failures (recipients.ts RETRYABLE): one new send per
   * recipient, written with the campaign row locked, so a second request (a double click)
   * finds those recipients' latest send `sending` and queues nobody. Returns how many.
   */
  async retry(campaignId: string): Promise<number> {
    const now = this.d.clock.now();
    const queued = await tx(this.d.db, async (q) => {
      const c = (await q.query<{ status: string; topic_id: string; from_mailbox: string; subject: string }>(
        `SELECT status, topic_id, from_mailbox, subject FROM campaigns WHERE id = $1 FOR UPDATE`, [campaignId],
      )).rows[0];
      if (!c) throw notFound('Campaign not found', 'campaign_not_found');
      if (c.status !== 'sent' && c.status !== 'failed') throw conflict(`Only a finished campaign can be retried (status ${c.status})`, 'campaign_not_finished');
      const transport = await this.d.transports.resolve(domainOf(c.from_mailbox)); // no provider: 503, nothing written
      const failed = (await q.query<{ id: string; contact_id: string; to_email: string }>(RETRYABLE, retryArgs(campaignId, c.topic_id))).rows;
      if (failed.length === 0) return 0;
      // A retry's id: time-ordered like every send id, its tail keyed by the send it retries.
      const ids = failed.map((f) => newId('es', now, createHmac('sha256', this.idKey).update('retry\0').update(f.id).digest()));
      const from = parseMailbox(c.from_mailbox)!.address;
      await insertSends(q, {
        type: 'campaign',
        campaignId,
        fromEmail: from,
        subject: c.subject,
        provider: transport.name,
        rows: failed.map((f, i) => ({ id: ids[i]!, contactId: f.contact_id, toEmail: f.to_email, metadata: { retryOf: f.id } })),
        onConflict: 'id',
      }, now);
      return failed.length;
    });
    if (queued > 0) await this.queue.enqueue({ groupKey: `campaign:${campaignId}`, payload: { campaignId, retry: true } });
    return queued;
  }

  private async loadCampaign(id: string): Promise<CampaignRow | undefined> {
    const r = await this.d.db.query<CampaignRow>(
      `SELECT c.id, c.subject, c.html, c.text_body, c.from_mailbox, c.topic_id, t.name AS topic_name, c.status, c.archive_token,
              c.cursor_contact, c.send_started_at
         FROM campaigns c JOIN topics t ON t.id = c.topic_id WHERE c.id = $1`,
      [id],
    );
    return r.rows[0];
  }

  /** One slice of a campaign's fan-out (or of a retry). */
  async run(job: Job<FanoutJob>): Promise<JobOutcome> {
    if (job.payload.retry) return this.runRetry(job);
    const deadline = performance.now() + FANOUT.sliceMs;
    const row = await this.loadCampaign(job.payload.campaignId);
    if (!row || row.status !== 'sending') {
      this.contexts.delete(job.payload.campaignId);
      return { type: 'complete' };
    }
    if (await isCampaignSendingPaused(this.d.db)) {
      this.d.log.warn({ campaignId: row.id }, 'campaign sending is paused (circuit breaker); the campaign waits');
      return { type: 'defer', delayMs: FANOUT.pausedRecheckMs, reason: 'campaign sending paused by the circuit breaker' };
    }
    let transport: CampaignTransport;
    try {
      transport = await this.d.transports.resolve(domainOf(row.from_mailbox));
    } catch (err) {
      return this.retryOrFail(job, row.id, `no provider: ${(err as Error).message}`);
    }
    const ctx = this.context(row);
    const more = () => performance.now() < deadline && !this.stopping;

    let next: Promise<Batch> | null = this.prepare(ctx, row.cursor_contact, transport);
    let recording: Promise<void> = Promise.resolve();
    try {
      while (next) {
        const batch: Batch = await next;
        next = !batch.done && more() ? this.prepare(ctx, batch.last, transport) : null;
        next?.catch(() => {}); // awaited in the next round; a failure surfaces there
        const results = await handOver(batch.items.length, (i) => transport.send(this.message(ctx, batch.items[i]!, transport)), FANOUT.concurrency);
        await recording; // batches are recorded in order: the cursor never skips one
        const transient = results.find((r) => !r.ok && !(r.error instanceof ProviderError && !r.error.retryable));
        recording = this.record(ctx, batch, results);
        if (transient) {
          await recording;
          const e = (transient as { error: unknown }).error;
          return this.retryOrFail(job, row.id, e instanceof Error ? e.message : String(e));
        }
        if (batch.done) {
          await recording;
          await this.d.db.query(`UPDATE campaigns SET status = 'sent', completed_at = $2, updated_at = $2 WHERE id = $1 AND status = 'sending'`, [
            row.id,
            toIso(this.d.clock.now()),
          ]);
          this.contexts.delete(row.id);
          this.d.log.info({ campaignId: row.id }, 'campaign handed over completely');
          return { type: 'complete' };
        }
      }
      await recording;
      return { type: 'defer', delayMs: 0, reason: 'next slice' };
    } finally {
      // A batch prepared but not handed over keeps its `sending` rows; the cursor did not
      // pass it, so the next slice prepares it again (same ids, rows kept as they are).
      await next?.catch(() => {});
      await recording.catch(() => {});
    }
  }

  /** Hands over a campaign's queued retry sends, in id order, batch by batch. */
  private async runRetry(job: Job<FanoutJob>): Promise<JobOutcome> {
    const row = await this.loadCampaign(job.payload.campaignId);
    if (!row || !row.archive_token) return { type: 'complete' };
    let transport: CampaignTransport;
    try {
      transport = await this.d.transports.resolve(domainOf(row.from_mailbox));
    } catch (err) {
      return { type: 'retry', error: `no provider: ${(err as Error).message}` };
    }
    // Its own context: the fan-out's cached one belongs to a running slice.
    const ctx = { ...this.context(row), row: { ...row } };
    this.contexts.delete(row.id);
    let after = '';
    for (;;) {
      const rows = (
        await this.d.db.query<{ id: string; contact_id: string; to_email: string }>(
          `SELECT id, contact_id, to_email FROM email_sends
            WHERE campaign_id = $1 AND status = 'sending' AND metadata ? 'retryOf' AND id > $2 ORDER BY id LIMIT $3`,
          [row.id, after, FANOUT.sendBatch],
        )
      ).rows;
      if (rows.length === 0) return { type: 'complete' };
      after = rows[rows.length - 1]!.id;
      const items: Recipient[] = rows.map((r) => ({ id: r.id, contactId: r.contact_id, email: r.to_email, engagementScore: undefined }));
      const results = await handOver(items.length, (i) => transport.send(this.message(ctx, items[i]!, transport)), FANOUT.concurrency);
      const accepted: { id: string; providerMessageId: string | null }[] = [];
      const refused: { id: string; error: string }[] = [];
      let transient: string | null = null;
      results.forEach((r, i) => {
        if (r.ok) accepted.push({ id: items[i]!.id, providerMessageId: r.value.providerMessageId });
        else if (r.error instanceof ProviderError && !r.error.retryable) refused.push({ id: items[i]!.id, error: r.error.message });
        else transient ??= r.error instanceof Error ? r.error.message : String(r.error);
      });
      const at = this.d.clock.now();
      await recordHandOffs(this.d.db, this.d.events, accepted, at, (q) => recordFailures(q, refused, at));
      // Sends not handed over stay `sending`: the job's retry hands them over later.
      if (transient) return { type: 'retry', error: transient };
    }
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

  private context(row: CampaignRow): CampaignContext {
    let ctx = this.contexts.get(row.id);
    if (!ctx) {
      const compiled = compileCampaign(row.html, row.text_body, { topic: row.topic_name, organization: this.d.organizationName });
      const from = parseMailbox(row.from_mailbox)!;
      const host = new URL(this.d.baseUrl).hostname;
      ctx = {
        row,
        compiled,
        linkParts: linkParts(compiled, this.d.links, row.id),
        fromAddress: from.address,
        dkimDomain: domainOf(from.address),
        listId: `${row.topic_name.replace(/[^\x20-\x7e]|["<>\\]/g, '').trim().slice(0, 100)} <${row.topic_id.toLowerCase().replace(/[^a-z0-9-]/g, '-')}.${host}>`,
      };
      this.contexts.set(row.id, ctx);
    }
    return ctx;
  }

  /** Reads the next members after `cursor`, renders their messages and writes their email_sends rows. */
  private async prepare(ctx: CampaignContext, cursor: string | null, transport: CampaignTransport): Promise<Batch> {
    const provider = transport.name;
    const c = ctx.row;
    const members = (
      await this.d.db.query<{ contact_id: string; email: string }>({
        name: 'lm_campaign_members',
        text: `SELECT m.contact_id, c.email ${ELIGIBLE_MEMBERS} AND m.contact_id > $2 ORDER BY m.contact_id LIMIT $3`,
        values: [c.topic_id, cursor ?? '', FANOUT.sendBatch],
      })
    ).rows;
    const done = members.length < FANOUT.sendBatch;
    if (members.length === 0) return { items: [], last: cursor, done };
    const now = this.d.clock.now();
    const started = c.send_started_at.getTime();
    const scores = await this.scores(members.map((m) => m.contact_id), c.id, now);
    const items = members.map(
      (m): Recipient => ({
        id: this.sendId(c.id, started, m.contact_id),
        contactId: m.contact_id,
        email: m.email,
        engagementScore: scores.get(m.contact_id),
      }),
    );
    // The rows exist before the hand-over (status sending), as for every send.
    await insertSends(this.d.db, {
      type: 'campaign',
      campaignId: c.id,
      fromEmail: ctx.fromAddress,
      subject: c.subject,
      provider,
      rows: items.map((m) => ({ id: m.id, contactId: m.contactId, toEmail: m.email })),
      onConflict: 'id',
    }, now);
    return { items, last: members[members.length - 1]!.contact_id, done };
  }

  /**
   * One recipient's message, rendered right before its hand-over: its strings then live for
   * one request, not for a whole batch (a batch of rendered bodies would be promoted to the
   * old generation and inflate the heap).
   */
  private message(ctx: CampaignContext, r: Recipient, transport: CampaignTransport): CampaignMessage {
    const c = ctx.row;
    const now = this.d.clock.now();
    const base = this.d.baseUrl;
    const unsubscribeUrl = `${base}/unsub/${unsubscribeToken(this.d.signer, { c: r.contactId, t: c.topic_id, s: r.id }, now)}`;
    const body = renderForRecipient(
      ctx.compiled,
      {
        emailSendId: r.id,
        messageTag: this.d.links.messageTag(c.id, r.id),
        unsubscribeUrl,
        preferencesUrl: `${base}/prefs/${preferencesToken(this.d.signer, r.contactId, now)}`,
        archiveUrl: `${base}/archive/${c.archive_token}`,
        pixelUrl: `${base}/t/o/${r.id}`,
        clickBase: `${base}/t/c/${r.id}/`,
      },
      ctx.linkParts,
      transport.jsonBodies,
    );
    return {
      id: r.id,
      to: r.email,
      from: c.from_mailbox,
      subject: c.subject,
      html: body.html,
      ...(body.text !== undefined ? { text: body.text } : {}),
      htmlJson: body.htmlJson,
      textJson: body.textJson,
      headers: { 'List-Unsubscribe': `<${unsubscribeUrl}>`, 'List-Unsubscribe-Post': 'List-Unsubscribe=One-Click', 'List-Id': ctx.listId },
      dkimDomain: ctx.dkimDomain,
      campaignId: c.id,
      engagementScore: r.engagementScore,
    };
  }

  /** Records a batch's outcomes and moves the cursor past it, or up to its first transient failure. */
  private async record(ctx: CampaignContext, batch: Batch, results: Settled<HandOff>[]): Promise<void> {
    const at = toIso(this.d.clock.now());
    const acceptedIds: string[] = [];
    const providerIds: (string | null)[] = [];
    const messageIds: (string | null)[] = [];
    const refusedIds: string[] = [];
    const refusedErrors: string[] = [];
    let cursor = batch.last;
    for (let i = 0; i < results.length; i++) {
      const r = results[i]!;
      const m = batch.items[i]!;
      if (r.ok) {
        acceptedIds.push(m.id);
        providerIds.push(r.value.providerMessageId);
        messageIds.push(r.value.messageId);
      } else if (r.error instanceof ProviderError && !r.error.retryable) {
        refusedIds.push(m.id);
        refusedErrors.push(r.error.message.slice(0, 1000));
      } else {
        cursor = i === 0 ? (ctx.row.cursor_contact ?? null) : batch.items[i - 1]!.contactId;
        break;
      }
    }
    // Status moves, email.sent for first hand-overs and the cursor: one transaction.
    await recordHandOffs(
      this.d.db,
      this.d.events,
      acceptedIds.map((id, i) => ({ id, providerMessageId: providerIds[i]!, messageId: messageIds[i] ?? null })),
      Date.parse(at),
      async (q) => {
        await recordFailures(q, refusedIds.map((id, i) => ({ id, error: refusedErrors[i]! })), Date.parse(at));
        if (cursor !== ctx.row.cursor_contact) {
          await q.query(`UPDATE campaigns SET cursor_contact = $2, updated_at = $3 WHERE id = $1`, [ctx.row.id, cursor, at]);
        }
      },
    );
    ctx.row.cursor_contact = cursor;
    if (refusedIds.length) this.d.log.warn({ campaignId: ctx.row.id, refused: refusedIds.length, example: refusedErrors[0] }, 'provider refused campaign messages');
  }

  /** Engagement scores of these contacts from their recent campaign messages (absent: unknown). */
  private async scores(contactIds: string[], campaignId: string, now: number): Promise<Map<string, number>> {
    const out = new Map<string, number>();
    const r = await this.d.db.query<{ contact_id: string; sends: number; opened: number; clicked: number }>({
      name: 'lm_campaign_scores',
      text: `SELECT s.contact_id, count(*)::int AS sends, count(e.first_human_open_at)::int AS opened, count(e.first_human_click_at)::int AS clicked
               FROM email_sends s LEFT JOIN email_engagement e ON e.email_send_id = s.id
              WHERE s.contact_id = ANY ($1::text[]) AND s.type = 'campaign' AND s.created_at >= $2
                AND s.campaign_id IS DISTINCT FROM $3 AND s.status NOT IN ('sending', 'failed')
              GROUP BY s.contact_id`,
      values: [contactIds, toIso(now - ENGAGEMENT.lookbackDays * 86_400_000), campaignId],
    });
    for (const row of r.rows) {
      const s = engagementScore(row.sends, row.opened, row.clicked);
      if (s !== undefined) out.set(row.contact_id, s);
    }
    return out;
  }
}

/** Runs send(0..n-1) with at most `limit` in flight; results in index order. */
async function handOver(n: number, send: (i: number) => Promise<HandOff>, limit: number): Promise<Settled<HandOff>[]> {
  const out: Settled<HandOff>[] = new Array(n);
  let next = 0;
  const lane = async () => {
    while (next < n) {
      const i = next++;
      try {
        out[i] = { ok: true, value: await send(i) };
      } catch (error) {
        out[i] = { ok: false, error };
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, n) }, lane));
  return out;
}
