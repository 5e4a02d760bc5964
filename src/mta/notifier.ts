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
 * Events emitted in the same turn of the event loop leave in one POST, a JSON array of up to
 * this many bodies (a lone event is posted as the object itself). One request per delivered
 * message cost the MTA about a tenth of its CPU at 5 KB (`perf`); the backend applies a batch
 * in one transaction anyway.
 */
export const EVENT_POST_BATCH = 100;

/**
 * Posts `{ event, timestamp, data }` to MTA_WEBHOOK_URL, signed: `X-MTA-Timestamp` (Unix
 * seconds) and `X-MTA-Signature` = hex HMAC-SHA256 of `<timestamp>.<body>` with
 * MTA_WEBHOOK_SECRET. The first post is made at once (events of the same event-loop turn
 * together, as a JSON array: EVENT_POST_BATCH); a failure goes to the `mta-events` queue
 * (durable, retried by backoff, one event per post) and, after the last attempt, to the
 * dead-letter queue.
 */
export class Notifier implements MtaEvents {
  private readonly inFlight = new Set<Promise<void>>();
  /** Emitted, not yet posted (this turn's batch). */
  private pending: { job: EventJob; done: () => void }[] = [];
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
    if (this.pending.length === 0) setImmediate(() => this.flush());
    const p = new Promise<void>((done) => this.pending.push({ job, done })).finally(() => this.inFlight.delete(p));
    this.inFlight.add(p);
    if (this.pending.length >= EVENT_POST_BATCH) this.flush();
    return p;
  }

  private flush(): void {
    const batch = this.pending;
    if (batch.length === 0) return;
    this.pending = [];
    const jobs = batch.map((b) => b.job);
    void (jobs.length === 1 ? this.first(jobs[0]!) : this.firstBatch(jobs)).finally(() => {
      for (const b of batch) b.done();
    });
  }

  /**
   * One POST for the batch. Refused with a 4xx (the backend could not take one of them), each
   * is posted alone so the others still go through; any other failure queues them all.
   */
  private async firstBatch(jobs: EventJob[]): Promise<void> {
    const error = await this.send(JSON.stringify(jobs.map((j) => j.body)), jobs.map((j) => j.body.event));
    if (error === null || error === 'unconfigured') return;
    if (/^HTTP 4/.test(error)) await Promise.all(jobs.map((j) => this.first(j)));
    else await Promise.all(jobs.map((j) => this.queueForRetry(j)));
  }

  private async first(job: EventJob): Promise<void> {
    const error = await this.post(job.body);
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
    await Promise.allSettled([...this.inFlight]);
    await this.worker?.stop();
    this.http.close();
  }
}
