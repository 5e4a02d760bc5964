import { Batcher } from '../shared/batch.js';
import { toIso, unixSeconds, type Clock } from '../shared/clock.js';
import type { Config } from '../shared/config.js';
import { hmacSha256Hex, newId } from '../shared/crypto.js';
import type { Logger } from '../shared/log.js';
import { PeerClient, type PeerError } from '../shared/net/peer.js';
import type { Queue } from '../shared/queue/queue.js';
import type { Job, JobOutcome, QueueOptions } from '../shared/queue/types.js';
import { Worker } from '../shared/queue/worker.js';
import { VERSION } from '../shared/version.js';
import type { MtaEventName, MtaEvents } from './events.js';
import type { MtaMetrics } from './metrics.js';
import type { DlqEntry, DlqStore } from './stores/dlq.js';

/** Retries of events whose first post failed (the first post happens at emit time). */
export const EVENTS_QUEUE: QueueOptions = {
  name: 'mta-events',
  maxAttempts: 6,
  backoffMs: [30_000, 120_000, 600_000, 1_800_000, 3_600_000],
  timeoutMs: 30_000,
  retainCompleted: 1_000,
  retainFailed: 1_000,
};

export interface EventJob {
  /** Event id; also its dead-letter id. */
  id: string;
  body: DlqEntry['body'];
  createdAt: number;
  /** Posts made before this queue job (the immediate one, earlier DLQ rounds). */
  priorAttempts: number;
}

const POST_TIMEOUT_MS = 10_000;

/**
 * First posts: events that arrive while a post slot is free leave together on the next turn of
 * the event loop (a lone event is posted as the object itself, several as a JSON array); while
 * every slot is busy they accumulate, and the next free slot takes up to `maxItems` of them
 * (the backend's `/webhooks/mta` takes 1 – 500). One request per delivered message cost
 * the MTA about a tenth of its CPU at 5 KB (`perf`). The cap on posts in flight is the
 * backpressure: a slow backend gets fewer, larger requests instead of ever more concurrent
 * ones that time out and are queued for retry while the first may still commit.
 */
export const EVENT_POSTS = { maxInFlight: 4, maxItems: 500, maxBytes: 2 * 1024 * 1024 };

/** An emitted event with its body serialised once (the batch body is these texts joined). */
interface Outgoing {
  job: EventJob;
  text: string;
}

/**
 * Posts `{ event, timestamp, data }` to MTA_WEBHOOK_URL, signed: `X-MTA-Timestamp` (Unix
 * seconds) and `X-MTA-Signature` = hex HMAC-SHA256 of `<timestamp>.<body>` with
 * MTA_WEBHOOK_SECRET. The first post is made at once (batched: EVENT_POSTS); a failure goes to
 * the `mta-events` queue (durable, retried by backoff, one event per post) and, after the last
 * attempt, to the dead-letter queue.
 */
export class Notifier implements MtaEvents {
  private readonly inFlight = new Set<Promise<void>>();
  private readonly posts = new Batcher<Outgoing, void>(async (batch) => {
    await (batch.length === 1 ? this.first(batch[0]!.job, batch[0]!.text) : this.firstBatch(batch));
    return batch.map(() => undefined);
  }, EVENT_POSTS);
  private worker: Worker<EventJob> | null = null;
  private warnedUnconfigured = false;
  private readonly http = new PeerClient();

  constructor(
    private readonly config: Pick<Config, 'MTA_WEBHOOK_URL' | 'MTA_WEBHOOK_SECRET'>,
    private readonly clock: Clock,
    private readonly log: Logger,
    readonly queue: Queue<EventJob>,
    private readonly dlq: DlqStore,
    private readonly metrics: MtaMetrics | null,
  ) {}

  emit(event: MtaEventName, data: Record<string, unknown>): Promise<void> {
    const now = this.clock.now();
    const job: EventJob = { id: newId('mevt', now), body: { event, timestamp: toIso(now), data }, createdAt: now, priorAttempts: 1 };
    const text = JSON.stringify(job.body);
    // first/firstBatch never throw: a failed post is queued for retry (or logged as lost).
    const p = this.posts.submit({ job, text }, text.length).finally(() => this.inFlight.delete(p));
    this.inFlight.add(p);
    return p;
  }

  /**
   * One POST for the batch. Refused with a 4xx (the backend could not take one of them), each
   * is posted alone so the others still go through; any other failure queues them all.
   */
  private async firstBatch(batch: Outgoing[]): Promise<void> {
    const error = await this.send(`[${batch.map((o) => o.text).join(',')}]`, batch.map((o) => o.job.body.event));
    if (error === null || error === 'unconfigured') return;
    if (/^HTTP 4/.test(error)) await Promise.all(batch.map((o) => this.first(o.job, o.text)));
    else await Promise.all(batch.map((o) => this.queueForRetry(o.job)));
  }

  private async first(job: EventJob, text: string): Promise<void> {
    const error = await this.send(text, [job.body.event]);
    if (error === null) return;
    if (error === 'unconfigured') return;
    await this.queueForRetry(job);
  }

  private async queueForRetry(job: EventJob): Promise<void> {
    try {
      await this.queue.enqueue({ groupKey: job.id, payload: job, runAt: this.clock.now() + EVENTS_QUEUE.backoffMs[0]! });
      this.metrics?.webhookEvents.inc({ event: job.body.event, outcome: 'queued_for_retry' });
    } catch (err) {
      // The database is unreachable too: nothing durable is left but the log.
      this.log.error({ err: (err as Error).message, event: job.body.event, eventId: job.id }, 'event lost: post and retry queue both failed');
      this.metrics?.webhookEvents.inc({ event: job.body.event, outcome: 'lost' });
    }
  }

  /** One signed POST; null on a 2xx, otherwise the error text (`unconfigured` when there is nowhere to post). */
  post(body: EventJob['body']): Promise<string | null> {
    return this.send(JSON.stringify(body), [body.event]);
  }

  /** Posts `text` (one event body, or an array of them: `events` are their names, for metrics). */
  private async send(text: string, events: string[]): Promise<string | null> {
    const url = this.config.MTA_WEBHOOK_URL;
    const secret = this.config.MTA_WEBHOOK_SECRET;
    if (!url || !secret) {
      if (!this.warnedUnconfigured) {
        this.warnedUnconfigured = true;
        this.log.warn('MTA_WEBHOOK_URL or MTA_WEBHOOK_SECRET is not set: events to the backend are not sent');
      }
      for (const event of events) this.metrics?.webhookEvents.inc({ event, outcome: 'unconfigured' });
      return 'unconfigured';
    }
    const ts = String(unixSeconds(this.clock.now()));
    try {
      const res = await this.http.postJson(
        url,
        text,
        { 'user-agent': `Lettermill-MTA/${VERSION}`, 'x-mta-timestamp': ts, 'x-mta-signature': hmacSha256Hex(secret, `${ts}.${text}`) },
        POST_TIMEOUT_MS,
      );
      if (res.status >= 200 && res.status < 300) {
        for (const event of events) this.metrics?.webhookEvents.inc({ event, outcome: 'delivered' });
        return null;
      }
      return `HTTP ${res.status}`;
    } catch (err) {
      const e = err as PeerError;
      return `${e.message}${e.code && !e.message.includes(e.code) ? ` (${e.code})` : ''}`;
    }
  }

  /** Handler of the `mta-events` queue. */
  readonly handle = async (job: Job<EventJob>): Promise<JobOutcome> => {
    const error = await this.post(job.payload.body);
    if (error === null || error === 'unconfigured') return { type: 'complete' };
    if (job.attempts < job.maxAttempts) return { type: 'retry', error };
    await this.dlq.put({
      id: job.payload.id,
      body: job.payload.body,
      error,
      attempts: job.payload.priorAttempts + job.attempts,
      createdAt: job.payload.createdAt,
    });
    this.metrics?.webhookEvents.inc({ event: job.payload.body.event, outcome: 'dead_lettered' });
    this.log.warn({ event: job.payload.body.event, eventId: job.payload.id, error }, 'event moved to the dead-letter queue');
    return { type: 'fail', error };
  };

  /** Re-queues dead-lettered events (all when `ids` is undefined); returns the ids queued. */
  async retryFromDlq(ids?: string[]): Promise<string[]> {
    const queued: string[] = [];
    const seen = new Set<string>();
    for (;;) {
      const entries = ids ? await Promise.all(ids.map((id) => this.dlq.get(id))).then((l) => l.filter((e) => e !== null)) : (await this.dlq.list(500, 0)).items;
      const fresh = entries.filter((e) => !seen.has(e.id));
      if (fresh.length === 0) return queued;
      const now = this.clock.now();
      await this.queue.enqueueMany(
        fresh.map((e) => ({
          groupKey: e.id,
          runAt: now,
          payload: { id: e.id, body: e.body, createdAt: Date.parse(e.createdAt), priorAttempts: e.attempts },
        })),
      );
      // Queued before removal: a crash in between re-sends rather than loses.
      for (const e of fresh) {
        await this.dlq.remove(e.id);
        queued.push(e.id);
        seen.add(e.id);
      }
      if (ids) return queued;
    }
  }

  startWorker(log: Logger): Promise<void> {
    this.worker = new Worker<EventJob>({ queue: this.queue, handler: this.handle, concurrency: 4, log });
    return this.worker.start();
  }

  /** Waits for first posts in flight, then stops the retry worker. */
  async stop(): Promise<void> {
    await this.posts.drain();
    await Promise.allSettled([...this.inFlight]);
    await this.worker?.stop();
    this.http.close();
  }
}
