/**
 * The relay: posts outbox rows to the backend (the URL its start is given: MTA_WEBHOOK_URL, or
 * the backend's loopback URL in role all) and marks them done (deleted) on a 2xx.
 *
 * Rows this instance wrote are posted at once from memory (leased to it for `leaseMs` at
 * insert); everything else that is due — retries by the schedule, rows a crashed instance
 * wrote, DLQ retries — is claimed from the table every `pollMs`, oldest first. Posts are
 * batched by the shared Batcher (a lone event as the object itself, several as a JSON array,
 * at most 4 in flight). An array refused with a 4xx is posted event by event, so one event the
 * backend cannot take does not hold up the others.
 *
 * While the backend does not answer (a refused or timed-out connection, a 5xx), fresh rows are
 * not posted batch after batch: they are held (kept in memory up to `policy.held`; they are
 * in the table, leased to this instance), and one batch per `pollMs` goes as a probe. The first
 * answered post (2xx or 4xx) ends the hold and posts the held rows still leased to us; the
 * poll takes the others when their lease ends. A backend that is down thus costs a probe a
 * second, not a failed post per delivered batch.
 *
 * Delivery is at least once (a post whose answer is lost is made again); the backend applies
 * each event id at most once, so effects happen exactly once.
 *
 * Mailbox deliveries (kind MAILBOX_DELIVERY, docs/inbound.md) are rows of the same table
 * posted one per request to `/webhooks/mta-mailbox` beside the events URL, signed the same
 * way; the backend's answer (`usedBytes`) goes to `onMailboxStored`. Large rows (a 25 MB
 * message is about 34 MB of JSON) always go alone: the Batcher's byte bound takes one item
 * over it on its own.
 */
import { unixSeconds, type Clock } from '../../shared/clock.js';
import { hmacSha256Hex } from '../../shared/crypto.js';
import { Batcher } from '../../shared/batch.js';
import type { Logger } from '../../shared/log.js';
import { PeerClient, type PeerError } from '../../shared/net/peer.js';
import { VERSION } from '../../shared/version.js';
import { MtaMailboxDeliveryResultSchema, type MtaEventData, type MtaEventName, type MtaMailboxDelivery, type MtaMailboxDeliveryResult } from '../../shared/contracts/mta.js';
import { Value } from '@sinclair/typebox/value';
import type { MtaEvents } from '../events.js';
import type { MtaMetrics } from '../metrics.js';
import type { MtaPolicy } from '../policy.js';
import { MAILBOX_DELIVERY, outboxEvent, outboxMailbox, type OutboxEvent, type OutboxStore } from './store.js';

export interface RelayOptions {
  /** Signs every post (MTA_WEBHOOK_SECRET); unset: events are not written at all (logged at start). */
  secret: string | undefined;
  policy: MtaPolicy['events'];
  /** The backend stored a mailbox delivery and said how full the mailbox now is. */
  onMailboxStored?: (delivery: MtaMailboxDelivery, result: MtaMailboxDeliveryResult['data']) => Promise<void>;
}

/** The backend's mailbox-delivery URL beside its events URL (…/webhooks/mta → …/webhooks/mta-mailbox). */
export const mailboxUrl = (eventsUrl: string): string => eventsUrl.replace(/\/webhooks\/mta\/?$/, '/webhooks/mta-mailbox');

export class OutboxRelay implements MtaEvents {
  private readonly http = new PeerClient();
  private readonly posts: Batcher<OutboxEvent, void>;
  /** Mailbox deliveries: one per post (the contract's body is one object). */
  private readonly mailboxPosts: Batcher<OutboxEvent, void>;
  private readonly writes: Batcher<OutboxEvent, boolean>;
  private timer: NodeJS.Timeout | undefined;
  private polling: Promise<void> | null = null;
  private pollAgain: Promise<void> | null = null;
  /** Where posts go, from start on (the MTA's peer option: role all learns it once the backend listens). */
  private target: { url: string; mailboxUrl: string; secret: string } | null = null;
  private started = false;
  private stopped = false;
  /** Set while the backend does not answer: when the next probe may go, and the rows held meanwhile. */
  private down: { probeAt: number; held: { e: OutboxEvent; at: number }[]; head: number; bytes: number } | null = null;

  constructor(
    private readonly store: OutboxStore,
    private readonly o: RelayOptions,
    private readonly clock: Clock,
    private readonly log: Logger,
    private readonly metrics: MtaMetrics | null,
  ) {
    this.posts = new Batcher<OutboxEvent, void>(async (batch) => {
      await this.post(batch);
      return batch.map(() => undefined);
    }, o.policy.posts);
    this.mailboxPosts = new Batcher<OutboxEvent, void>(async (batch) => {
      await this.post(batch);
      return batch.map(() => undefined);
    }, { ...o.policy.posts, maxItems: 1 });
    // Events written on their own (breaker, warming, emergency): group-committed like the log.
    this.writes = new Batcher(async (batch) => {
      const fresh = await this.store.insert(batch);
      return batch.map((e) => fresh.has(e.id));
    }, o.policy.posts);
  }

  /**
   * False when there is nowhere to post: callers then write no event (as before the outbox).
   * Also false before start, when nothing produces events (they come from the workers).
   */
  get enabled(): boolean {
    return this.target !== null;
  }

  /** Builds an event for a caller that writes it in its own transaction (then calls `written`). */
  event<K extends MtaEventName>(event: K, data: MtaEventData[K], id?: string): OutboxEvent | null {
    if (!this.enabled) {
      this.metrics?.webhookEvents.inc({ event, outcome: 'unconfigured' });
      return null;
    }
    return outboxEvent(event, data, this.clock.now(), id);
  }

  /** Writes an event on its own; resolves once it is durable (never rejects: a failed write is logged). */
  async emit<K extends MtaEventName>(event: K, data: MtaEventData[K]): Promise<void> {
    const e = this.event(event, data);
    if (!e) return;
    try {
      if (await this.writes.submit(e, e.body.length)) this.written([e]);
    } catch (err) {
      this.log.error({ err, event, eventId: e.id }, 'event lost: the outbox write failed');
      this.metrics?.webhookEvents.inc({ event, outcome: 'lost' });
    }
  }

  /**
   * Writes an event whose cause must not be acknowledged before it is durable (received mail):
   * rejects when it could not be written or there is nowhere to post it. `id` is stable.
   */
  async record<K extends MtaEventName>(event: K, data: MtaEventData[K], id: string): Promise<void> {
    const e = this.event(event, data, id);
    if (!e) throw new Error('MTA_WEBHOOK_URL or MTA_WEBHOOK_SECRET is not set: the event cannot be delivered');
    if (await this.writes.submit(e, e.body.length)) this.written([e]);
  }

  /**
   * Writes a mailbox delivery durably (rejects when it could not be written, or when there is
   * nowhere to post it: mail is then refused with a temporary error rather than held unsigned).
   */
  async mailbox(delivery: MtaMailboxDelivery): Promise<void> {
    if (!this.enabled) throw new Error('MTA_WEBHOOK_URL or MTA_WEBHOOK_SECRET is not set: mailbox mail cannot be delivered');
    const row = outboxMailbox(delivery);
    if (await this.writes.submit(row, row.body.length)) this.written([row]);
  }

  /** Events this instance has just committed: post them now (they are leased to it). */
  written(events: readonly OutboxEvent[]): void {
    if (this.stopped || !this.target) return; // a later start (or another instance) takes them when the lease ends
    const down = this.down;
    if (down !== null) {
      const now = this.clock.now();
      if (now < down.probeAt) {
        // Rows past their lease are the poll's now: dropped, so a long outage keeps its latest rows.
        const cutoff = now - this.leaseLeft();
        while (down.head < down.held.length && down.held[down.head]!.at <= cutoff) down.bytes -= down.held[down.head++]!.e.body.length;
        if (down.head > 1024 && down.head * 2 > down.held.length) {
          down.held = down.held.slice(down.head);
          down.head = 0;
        }
        // Beyond the bounds the rows are only in the table: the poll takes them when their lease ends.
        const { maxItems, maxBytes } = this.o.policy.held;
        for (const e of events) {
          if (down.held.length - down.head >= maxItems || down.bytes + e.body.length > maxBytes) continue;
          down.held.push({ e, at: now });
          down.bytes += e.body.length;
        }
        return;
      }
      down.probeAt = now + this.o.policy.pollMs;
    }
    for (const e of events) void this.submit(e);
  }

  /** What a post's answer says about the backend: answered (ends a hold) or not (starts one). */
  private noteAnswer(error: string | null): void {
    // A 4xx is an answer too: the backend is up, and refused these events.
    if (error !== null && !/^HTTP 4/.test(error)) {
      this.down ??= { probeAt: this.clock.now() + this.o.policy.pollMs, held: [], head: 0, bytes: 0 };
      return;
    }
    const down = this.down;
    if (down === null) return;
    this.down = null;
    // Rows whose lease may have ended are left to the poll, which may have taken them already.
    const cutoff = this.clock.now() - this.leaseLeft();
    for (let i = down.head; i < down.held.length; i++) if (down.held[i]!.at > cutoff) void this.submit(down.held[i]!.e);
  }

  /** How long a held row surely stays ours: its lease, less a poll interval of margin. */
  private leaseLeft(): number {
    return this.o.policy.leaseMs - this.o.policy.pollMs;
  }

  private submit(e: OutboxEvent): Promise<void> {
    return (e.event === MAILBOX_DELIVERY ? this.mailboxPosts : this.posts).submit(e, e.body.length);
  }

  /**
   * Starts posting to `url` (the backend's /webhooks/mta) and looking for due rows (retries,
   * a dead instance's rows, DLQ retries). Without a URL or secret no event is written. The
   * first start decides; a later one changes nothing.
   */
  start(url: string | undefined): void {
    if (this.started) return;
    this.started = true;
    if (!url || !this.o.secret) {
      this.log.warn('MTA_WEBHOOK_URL or MTA_WEBHOOK_SECRET is not set: events to the backend are not sent');
      return;
    }
    this.target = { url, mailboxUrl: mailboxUrl(url), secret: this.o.secret };
    this.timer = setInterval(() => void this.poll(), this.o.policy.pollMs);
    this.timer.unref();
    void this.poll();
  }

  /** One look for due rows; resolves when their posts are done (tests call it directly). */
  poll(): Promise<void> {
    if (!this.target) return Promise.resolve(); // rows wait for a start with somewhere to post
    // Asked for while one runs: that one read the clock and the table earlier and may miss rows
    // due since, so one more poll follows it (at most one waits; later askers share it).
    if (this.polling) {
      return (this.pollAgain ??= this.polling.then(() => {
        this.pollAgain = null;
        return this.stopped ? undefined : this.poll();
      }));
    }
    this.polling = (async () => {
      try {
        for (;;) {
          const { maxItems, maxBytes, maxInFlight } = this.o.policy.posts;
          // Bytes: what the posts in flight may carry at once (a lone larger row still comes).
          const due = await this.store.claimDue(maxItems, maxBytes * maxInFlight);
          if (due.length === 0) return;
          await Promise.all(due.map((e) => this.submit(e)));
          if (this.stopped) return;
        }
      } catch (err) {
        this.log.error({ err }, 'outbox poll failed');
      } finally {
        this.polling = null;
      }
    })();
    return this.polling;
  }

  /** Re-queues dead-lettered events (all when `ids` is undefined); returns the ids queued. */
  async retryFromDlq(ids?: string[]): Promise<string[]> {
    const queued = await this.store.retry(ids);
    if (queued.length > 0) void this.poll();
    return queued;
  }

  /** One post of the batch, then its rows' bookkeeping. Never throws. */
  private async post(batch: OutboxEvent[]): Promise<void> {
    const mailbox = batch[0]!.event === MAILBOX_DELIVERY;
    const sent = await this.send(batch.length === 1 ? batch[0]!.body : `[${batch.map((e) => e.body).join(',')}]`, mailbox ? this.target!.mailboxUrl : this.target!.url);
    this.noteAnswer(sent.error);
    let error = sent.error;
    if (error === null && mailbox) error = await this.mailboxStored(batch[0]!, sent.text);
    try {
      if (error === null) {
        await this.store.delivered(batch.map((e) => e.id));
        for (const e of batch) this.metrics?.webhookEvents.inc({ event: e.event, outcome: 'delivered' });
        return;
      }
      if (batch.length > 1 && /^HTTP 4/.test(error)) {
        await Promise.all(batch.map((e) => this.post([e])));
        return;
      }
      const dead = new Set(await this.store.failed(batch.map((e) => e.id), error));
      for (const e of batch) {
        const outcome = dead.has(e.id) ? 'dead_lettered' : 'queued_for_retry';
        this.metrics?.webhookEvents.inc({ event: e.event, outcome });
        if (dead.has(e.id)) this.log.warn({ event: e.event, eventId: e.id, error }, 'event moved to the dead-letter queue');
      }
    } catch (err) {
      // The row stays pending and leased: it is posted again once the lease ends.
      this.log.error({ err, events: batch.length }, 'outbox bookkeeping failed');
    }
  }

  /** The backend's answer to a mailbox delivery: kept beside the quota; null, or why it is not an answer. */
  private async mailboxStored(row: OutboxEvent, text: string): Promise<string | null> {
    let answer: unknown;
    try {
      answer = JSON.parse(text);
    } catch {
      return 'mailbox delivery answered without JSON';
    }
    if (!Value.Check(MtaMailboxDeliveryResultSchema, answer)) return 'mailbox delivery answered without { data: { stored, duplicate, usedBytes } }';
    try {
      await this.o.onMailboxStored?.(JSON.parse(row.body) as MtaMailboxDelivery, answer.data);
    } catch (err) {
      // Stored by the backend: only the quota figure is stale until the next delivery.
      this.log.warn({ err, id: row.id }, 'mailbox usage could not be recorded');
    }
    return null;
  }

  /** One signed POST of `text`; error null on a 2xx (with the answer's text), otherwise the error. */
  private async send(text: string, url: string): Promise<{ error: string | null; text: string }> {
    const { secret } = this.target!;
    const ts = String(unixSeconds(this.clock.now()));
    try {
      const res = await this.http.postJson(
        url,
        text,
        { 'user-agent': `Lettermill-MTA/${VERSION}`, 'x-mta-timestamp': ts, 'x-mta-signature': hmacSha256Hex(secret, `${ts}.${text}`) },
        this.o.policy.postTimeoutMs,
      );
      return { error: res.status >= 200 && res.status < 300 ? null : `HTTP ${res.status}`, text: res.text };
    } catch (err) {
      const e = err as PeerError;
      return { error: `${e.message}${e.code && !e.message.includes(e.code) ? ` (${e.code})` : ''}`, text: '' };
    }
  }

  /** Resolves when every write and post under way has finished (shutdown, tests). */
  async settle(): Promise<void> {
    await this.writes.drain();
    await this.posts.drain();
    await this.mailboxPosts.drain();
  }

  /** Finishes posts in flight; rows not yet posted stay in the table for the next start. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    await this.writes.drain();
    await this.polling;
    await this.posts.drain();
    await this.mailboxPosts.drain();
    this.http.close();
  }
}
