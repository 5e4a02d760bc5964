/**
 * Outbound customer webhooks: configuration, fan-out, delivery, log and replay.
 *
 * Flow: EventBus → accept() drops an event no enabled endpoint subscribes to (in-memory list,
 * subscriptions.ts), buffers the others → a batch is written in ONE transaction: the
 * events, one pending delivery per subscribed endpoint, and a job per delivery on the durable
 * queue `webhooks` → the worker runs deliver() per job: one signed POST through the SSRF-safe
 * client, one attempt row, and the queue's retry/backoff for the next attempt.
 *
 * Crash safety: events are durable once their batch commits (emit()'s promise settles then),
 * and a delivery never exists without its job. A delivery whose success was recorded is never
 * sent again; a crash between a 2xx and its record re-sends it (at-least-once; receivers
 * de-duplicate on the event id).
 */
import { Batcher } from '../../shared/batch.js';
import type { Clock } from '../../shared/clock.js';
import { newId } from '../../shared/crypto.js';
import { AppError, badInput, conflict, notFound } from '../../shared/errors.js';
import type { Logger } from '../../shared/log.js';
import { NetError, SafeHttpClient, type Timers } from '../../shared/net/client.js';
import { createLookup, type LookupFn } from '../../shared/net/resolve.js';
import { TargetRefused } from '../../shared/net/target.js';
import { Queue } from '../../shared/queue/queue.js';
import type { Job, JobOutcome } from '../../shared/queue/types.js';
import { Worker } from '../../shared/queue/worker.js';
import type { DbClient } from '../../shared/db/pool.js';
import type { Services } from '../../shared/services.js';
import type { EmittedEvent } from '../events.js';
import { isWebhookEvent, WEBHOOK_EVENTS, type WebhookEventName } from './catalog.js';
import { WEBHOOK_CHANGES_CHANNEL, WEBHOOK_POLICY, WEBHOOK_QUEUE, WORKER_BATCH } from './policy.js';
import { SubscriptionCache } from './subscriptions.js';
import { buildWebhookRequest, newWebhookSecret } from './signing.js';
import {
  laneOf,
  WebhookStore,
  type AttemptInput,
  type DeliveryRecord,
  type DeliveryStatus,
  type DeliveryWork,
  type Enqueueable,
  type WebhookRecord,
} from './store.js';

export interface DeliveryJob {
  deliveryId: string;
  /** A manual retry: one attempt, no automatic follow-ups. */
  manual?: boolean;
}

export interface WebhookServiceOptions {
  /** Name resolution for endpoint hosts (default: DNS_SERVERS or the system resolver). */
  lookup?: LookupFn;
  /** Timer source of the request deadline (tests drive it with a ManualClock). */
  timers?: Timers;
  /** Extra CA certificates trusted for https endpoints. */
  ca?: string | Buffer;
  concurrency?: number;
  pollMs?: number;
  /** Request deadline; default WEBHOOK_POLICY.requestTimeoutMs (30 s). */
  requestTimeoutMs?: number;
  /** Periodic retention sweep; default WEBHOOK_POLICY.sweepMs, 0 disables the timer. */
  sweepMs?: number;
  /** Periodic re-read of the subscribed event names; default WEBHOOK_POLICY.subscriptionRefreshMs, 0 disables. */
  subscriptionRefreshMs?: number;
}

interface Buffered {
  event: EmittedEvent;
  done: () => void;
}

export class WebhookService {
  readonly store: WebhookStore;
  readonly queue: Queue<DeliveryJob>;
  readonly client: SafeHttpClient;
  /** Event names some enabled endpoint subscribes to (events of other names are dropped at once). */
  readonly subscriptions: SubscriptionCache;
  private skippedCount = 0;
  private readonly worker: Worker<DeliveryJob>;
  private readonly clock: Clock;
  private readonly log: Logger;
  private readonly requestTimeoutMs: number;
  private readonly sweepMs: number;
  // Jobs claimed together load together and concurrent attempts are logged together.
  private readonly loads: Batcher<string, DeliveryWork | null>;
  private readonly records: Batcher<AttemptInput, void>;

  private buffer: Buffered[] = [];
  private flushing: Promise<void> | null = null;
  private flushTimer: NodeJS.Timeout | undefined;
  private flushFailures = 0;
  private sweepTimer: NodeJS.Timeout | undefined;
  private sweeping: Promise<void> | null = null;
  private accepting = true;
  /** Endpoints whose last attempt (in this process) failed: their new deliveries use one lane. */
  private readonly failing = new Set<string>();
  private started = false;

  constructor(s: Pick<Services, 'config' | 'db' | 'log' | 'clock'>, opts: WebhookServiceOptions = {}) {
    this.clock = s.clock;
    this.log = s.log.child({ area: 'webhooks' });
    const tag = newId('whs', s.clock.now()); // this instance, in its change notifications
    this.store = new WebhookStore(s.db, s.clock, tag);
    this.subscriptions = new SubscriptionCache({
      selfTag: tag,
      db: s.db,
      log: this.log,
      load: () => this.store.subscribedEvents(),
      channel: WEBHOOK_CHANGES_CHANNEL,
      refreshMs: opts.subscriptionRefreshMs ?? WEBHOOK_POLICY.subscriptionRefreshMs,
      reconnectMs: WEBHOOK_POLICY.listenReconnectMs,
    });
    this.queue = new Queue<DeliveryJob>({ db: s.db, clock: s.clock, options: WEBHOOK_QUEUE });
    this.client = new SafeHttpClient({
      allowHosts: s.config.WEBHOOK_ALLOW_HOSTS,
      lookup: opts.lookup ?? createLookup(s.config.DNS_SERVERS),
      clock: s.clock,
      timers: opts.timers,
      ca: opts.ca,
    });
    this.requestTimeoutMs = opts.requestTimeoutMs ?? WEBHOOK_POLICY.requestTimeoutMs;
    this.sweepMs = opts.sweepMs ?? WEBHOOK_POLICY.sweepMs;
    this.loads = new Batcher((ids) => this.store.loadWork(ids), WORKER_BATCH);
    this.records = new Batcher<AttemptInput, void>(async (items) => {
      await this.store.recordAttempts(items);
      return items.map(() => undefined);
    }, WORKER_BATCH);
    this.worker = new Worker<DeliveryJob>({
      queue: this.queue,
      handler: (job, ctx) => this.deliver(job, ctx.signal),
      concurrency: opts.concurrency ?? WEBHOOK_POLICY.concurrency,
      pollMs: opts.pollMs ?? WEBHOOK_POLICY.pollMs,
      log: this.log,
    });
  }

  /** Events dropped because no enabled endpoint subscribes to them (since construction). */
  get skipped(): number {
    return this.skippedCount;
  }

  // ================================================================== lifecycle

  async start(): Promise<void> {
    if (this.started) return;
    this.started = true;
    await this.subscriptions.start();
    await this.sweep();
    await this.worker.start();
    if (this.sweepMs > 0) {
      this.sweepTimer = setInterval(() => void this.sweep(), this.sweepMs);
      this.sweepTimer.unref();
    }
  }

  /** Writes buffered events, then lets in-flight deliveries finish (or go back to the queue). */
  async stop(): Promise<void> {
    this.accepting = false;
    clearInterval(this.sweepTimer);
    await this.flush();
    if (this.buffer.length) this.log.error({ lost: this.buffer.length }, 'could not write buffered webhook events at shutdown');
    if (this.started) await this.worker.stop({ drain: true, timeoutMs: 10_000 });
    await this.subscriptions.stop();
    await this.sweeping;
    this.client.close();
  }

  // ================================================================== configuration

  async createWebhook(input: { url: string; events: string[] }): Promise<WebhookRecord & { secret: string }> {
    const events = checkEvents(input.events);
    const url = await this.checkUrl(input.url);
    if ((await this.store.count()) >= WEBHOOK_POLICY.maxWebhooks) {
      throw conflict(`At most ${WEBHOOK_POLICY.maxWebhooks} webhooks can be configured`, 'webhook_limit');
    }
    const secret = newWebhookSecret();
    const record = await this.store.create({ url, events, secret });
    await this.subscriptions.changed(); // events emitted from now on reach it
    this.log.info({ webhookId: record.id, url, events }, 'webhook created');
    return { ...record, secret };
  }

  async updateWebhook(id: string, patch: { url?: string; events?: string[]; enabled?: boolean }): Promise<WebhookRecord> {
    const events = patch.events === undefined ? undefined : checkEvents(patch.events);
    const url = patch.url === undefined ? undefined : await this.checkUrl(patch.url);
    const record = await this.store.update(id, { url, events, enabled: patch.enabled });
    if (!record) throw webhookNotFound();
    if (events !== undefined || patch.enabled !== undefined) await this.subscriptions.changed();
    return record;
  }

  async rotateSecret(id: string): Promise<{ id: string; secret: string }> {
    const secret = newWebhookSecret();
    if (!(await this.store.update(id, { secret }))) throw webhookNotFound();
    return { id, secret };
  }

  async deleteWebhook(id: string): Promise<void> {
    if (!(await this.store.delete(id))) throw webhookNotFound();
    this.failing.delete(id);
    await this.subscriptions.changed();
  }

  async getWebhook(id: string): Promise<WebhookRecord> {
    const record = await this.store.get(id);
    if (!record) throw webhookNotFound();
    return record;
  }

  listWebhooks(): Promise<WebhookRecord[]> {
    return this.store.list();
  }

  /** The URL rules at creation: syntax, scheme, and every address the host resolves to now. */
  private async checkUrl(url: string): Promise<string> {
    try {
      await this.client.check(url);
    } catch (err) {
      if (err instanceof TargetRefused) throw badInput(`URL not allowed: ${err.message}`, 'url_not_allowed');
      if (err instanceof NetError) throw badInput(`URL host could not be resolved: ${err.message}`, 'dns_lookup_failed');
      throw err;
    }
    return url;
  }

  // ================================================================== log and replay

  async listDeliveries(webhookId: string, opts: { limit: number; cursor?: string; status?: DeliveryStatus }) {
    if (!(await this.store.get(webhookId))) throw webhookNotFound();
    let before: string | undefined;
    if (opts.cursor) {
      before = Buffer.from(opts.cursor, 'base64url').toString('utf8');
      if (!/^whd_[0-9a-z]{26}$/.test(before)) throw badInput('Invalid cursor', 'invalid_cursor');
    }
    const rows = await this.store.listDeliveries(webhookId, { limit: opts.limit + 1, before, status: opts.status });
    const isDone = rows.length <= opts.limit;
    const page = rows.slice(0, opts.limit);
    const cursor = isDone || page.length === 0 ? null : Buffer.from(page[page.length - 1].id).toString('base64url');
    return { data: page, pagination: { limit: opts.limit, cursor, isDone } };
  }

  async getDelivery(id: string): Promise<DeliveryRecord> {
    const d = await this.store.getDelivery(id);
    if (!d) throw notFound('Webhook delivery not found', 'delivery_not_found');
    return d;
  }

  /** One more attempt for a finished (failed or succeeded) delivery, now. */
  async retryDelivery(id: string): Promise<{ id: string; status: 'pending' }> {
    const r = await this.store.requestRetry(id, this.enqueueIn);
    if (!r.ok) {
      if (r.why === 'not_found') throw notFound('Webhook delivery not found', 'delivery_not_found');
      if (r.why === 'disabled') throw conflict('The webhook is disabled; enable it before retrying', 'webhook_disabled');
      throw conflict('The delivery is already scheduled', 'delivery_pending');
    }
    return { id, status: 'pending' };
  }

  // ================================================================== fan-out

  /**
   * The EventBus's transactional sink: the events' deliveries are written in the caller's
   * transaction, so they exist exactly when what caused them committed (feedback effects, a
   * hand-over). Throws with the transaction.
   */
  readonly acceptIn = async (client: DbClient, events: EmittedEvent[]): Promise<void> => {
    const ours = events.filter((e) => isWebhookEvent(e.name));
    const wanted = ours.filter((e) => this.subscriptions.wants(e.name));
    this.skippedCount += ours.length - wanted.length;
    if (wanted.length === 0) return;
    await this.store.fanOutIn(
      client,
      wanted.map((e) => ({ id: e.id, type: e.name as WebhookEventName, data: e.data, at: e.emittedAt })),
      this.enqueueIn,
    );
  };

  /**
   * The EventBus sink. Never throws; settles once the event is written (or could not be).
   * Not the shared Batcher: an emitter is released after the first write attempt, and events
   * whose write failed stay buffered and are retried with backoff.
   */
  readonly accept = (event: EmittedEvent): Promise<void> => {
    if (!isWebhookEvent(event.name)) return Promise.resolve();
    // Before any buffering or write: most email.opened / email.clicked have no subscriber.
    if (!this.subscriptions.wants(event.name)) {
      this.skippedCount++;
      return Promise.resolve();
    }
    if (!this.accepting) {
      this.log.error({ event: event.name, eventId: event.id }, 'webhook event emitted after shutdown began; dropped');
      return Promise.resolve();
    }
    if (this.buffer.length >= WEBHOOK_POLICY.emitBufferMax) {
      this.log.error({ event: event.name, eventId: event.id }, 'webhook event buffer full (database unreachable?); event dropped');
      return Promise.resolve();
    }
    return new Promise<void>((done) => {
      this.buffer.push({ event, done });
      if (this.flushing) return;
      if (this.buffer.length >= WEBHOOK_POLICY.emitBatch) void this.flush();
      else this.flushTimer ??= setTimeout(() => void this.flush(), WEBHOOK_POLICY.emitFlushMs);
    });
  };

  /** Writes everything buffered (one flush loop at a time; it picks up what arrives meanwhile). */
  flush(): Promise<void> {
    clearTimeout(this.flushTimer);
    this.flushTimer = undefined;
    if (this.flushing) return this.flushing;
    if (this.buffer.length === 0) return Promise.resolve();
    this.flushing = (async () => {
      while (this.buffer.length > 0) {
        const batch = this.buffer.splice(0, WEBHOOK_POLICY.emitBatch);
        const ok = await this.writeBatch(batch.map((b) => b.event));
        for (const b of batch) b.done(); // written or not, the emitter is not held up
        if (!ok) {
          // Keep the events and try again later; emitters were already released.
          this.buffer.unshift(...batch.map((b) => ({ event: b.event, done: () => {} })));
          this.flushFailures++;
          if (this.accepting) {
            const delay = Math.min(30_000, 500 * 2 ** Math.min(this.flushFailures, 6));
            this.flushTimer = setTimeout(() => void this.flush(), delay);
          }
          return;
        }
        this.flushFailures = 0;
      }
    })().finally(() => {
      this.flushing = null;
    });
    return this.flushing;
  }

  private async writeBatch(events: EmittedEvent[]): Promise<boolean> {
    try {
      await this.store.fanOut(
        events.map((e) => ({ id: e.id, type: e.name as WebhookEventName, data: e.data, at: e.emittedAt })),
        this.enqueueIn,
      );
      return true;
    } catch (err) {
      this.log.error({ err, events: events.length }, 'writing webhook events failed; will retry');
      return false;
    }
  }

  /** Enqueues deliveries inside the caller's transaction (the queue only needs `query`). */
  private readonly enqueueIn = async (client: DbClient, rows: Enqueueable[]): Promise<void> => {
    if (rows.length === 0) return;
    await this.queue.enqueueMany(
      rows.map((r) => ({
        // Lanes spread one endpoint over a few groups: parallel, yet bounded per endpoint.
        groupKey: `${r.webhookId}:${this.failing.has(r.webhookId) ? 0 : laneOf(r.deliveryId, WEBHOOK_POLICY.lanesPerEndpoint)}`,
        payload: r.manual ? { deliveryId: r.deliveryId, manual: true } : { deliveryId: r.deliveryId },
      })),
      client,
    );
  };

  /** Retention of the delivery log. Runs at start and periodically. */
  sweep(): Promise<void> {
    if (this.sweeping) return this.sweeping;
    this.sweeping = (async () => {
      try {
        const retentionMs = WEBHOOK_POLICY.retentionDays * 86_400_000;
        while ((await this.store.prune(retentionMs)) >= 5000);
      } catch (err) {
        this.log.error({ err }, 'webhook retention sweep failed');
      }
    })().finally(() => {
      this.sweeping = null;
    });
    return this.sweeping;
  }

  // ================================================================== delivery

  /** One attempt of one delivery (the queue handler). */
  async deliver(job: Job<DeliveryJob>, signal: AbortSignal): Promise<JobOutcome> {
    const { deliveryId, manual = false } = job.payload;
    const work = await this.loads.submit(deliveryId);
    // Deleted with its endpoint, or already finished (a re-run after a crash): nothing to send.
    if (!work || work.status !== 'pending') return { type: 'complete' };
    if (!work.enabled) {
      await this.store.markFailed(deliveryId, 'Webhook disabled before delivery');
      return { type: 'fail', error: 'webhook disabled' };
    }

    const startedAt = this.clock.now();
    const req = buildWebhookRequest({
      eventId: work.eventId,
      event: work.eventType,
      data: work.data,
      webhookId: work.webhookId,
      secret: work.secret,
      now: startedAt,
    });
    let statusCode: number | null = null;
    let responseBody: string | null = null;
    let error: string | null = null;
    try {
      const res = await this.client.request(work.url, {
        method: 'POST',
        headers: req.headers,
        body: req.body,
        timeoutMs: this.requestTimeoutMs,
        maxBodyKept: WEBHOOK_POLICY.responseBodyKept,
        maxBodyRead: WEBHOOK_POLICY.responseBodyRead,
        signal,
      });
      statusCode = res.status;
      responseBody = res.body;
      if (res.status < 200 || res.status > 299) error = `HTTP ${res.status}`;
    } catch (err) {
      if (err instanceof NetError && err.kind === 'aborted') {
        // The worker is stopping: give the attempt back, nothing was recorded.
        return { type: 'defer', delayMs: 0, reason: 'worker stopping' };
      }
      error = err instanceof TargetRefused ? `Refused: ${err.message}` : err instanceof Error ? err.message : String(err);
    }
    const success = error === null;
    if (success) this.failing.delete(work.webhookId);
    else this.failing.add(work.webhookId);
    const finishedAt = this.clock.now();
    const last = manual || job.attempts >= job.maxAttempts;
    const status: DeliveryStatus = success ? 'succeeded' : last ? 'failed' : 'pending';
    await this.records.submit({
      deliveryId,
      startedAt,
      durationMs: finishedAt - startedAt,
      statusCode,
      error,
      responseBody,
      success,
      manual,
      status,
      nextAttemptAt: status === 'pending' ? finishedAt + this.queue.backoffFor(job.attempts) : null,
    });
    if (success) return { type: 'complete' };
    const logFields = { deliveryId, webhookId: work.webhookId, event: work.eventType, attempt: work.attempts + 1, error };
    if (last) {
      this.log.warn(logFields, 'webhook delivery failed');
      return { type: 'fail', error: error! };
    }
    this.log.info(logFields, 'webhook attempt failed; will retry');
    return { type: 'retry', error: error! };
  }
}

function webhookNotFound(): AppError {
  return notFound('Webhook not found', 'webhook_not_found');
}

function checkEvents(events: string[]): WebhookEventName[] {
  if (!Array.isArray(events) || events.length === 0) throw badInput('events must list at least one event', 'validation_error');
  const unknown = events.filter((e) => !isWebhookEvent(e));
  if (unknown.length) {
    throw badInput(`Unknown event ${unknown.map((u) => JSON.stringify(u)).join(', ')}; supported: ${WEBHOOK_EVENTS.join(', ')}`, 'validation_error');
  }
  return [...new Set(events)] as WebhookEventName[];
}

