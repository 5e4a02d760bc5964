/**
 * Outbound webhook policy: the numbers an operator might tune, in one place.
 * Attempts, backoff and timeout are fixed by the spec (Limits → Outbound webhook attempts
 * and request timeout); the rest are Lettermill's choices (docs/webhooks.md).
 */
import type { BatchOptions } from '../../shared/batch.js';
import type { QueueOptions } from '../../shared/queue/types.js';

export const WEBHOOK_POLICY = {
  /** At most 3 attempts: immediately, 1 minute after the first failure, 5 minutes after the second. */
  maxAttempts: 3,
  backoffMs: [60_000, 300_000],
  /** Each request, from DNS resolution to the last byte of the response. */
  requestTimeoutMs: 30_000,
  /** Response bytes kept in the delivery log per attempt. */
  responseBodyKept: 4096,
  /** Response bytes read at most (the rest is not waited for). */
  responseBodyRead: 64 * 1024,
  /**
   * Queue groups per endpoint: a healthy endpoint gets at most this many requests at once.
   * New deliveries for an endpoint whose last attempt failed (error, timeout, non-2xx) go to
   * a single lane until it succeeds again, so a dead or hanging endpoint holds about one of
   * the worker's slots instead of this many.
   */
  lanesPerEndpoint: 8,
  /** Deliveries in flight per backend instance. */
  concurrency: 64,
  /** Worker polling fallback (enqueues wake the worker through NOTIFY). */
  pollMs: 1000,
  /** Fan-out buffer: events are written in batches of up to this many... */
  emitBatch: 500,
  /** ...at most this long after the first of them was emitted. */
  emitFlushMs: 10,
  /** Events held in memory while the database is unreachable; beyond this new ones are dropped (logged). */
  emitBufferMax: 50_000,
  /** Deliveries (with their attempt log) and events are kept this long after creation. */
  retentionDays: 30,
  /** How often retention runs. */
  sweepMs: 60_000,
  /** Configured endpoints at most. */
  maxWebhooks: 100,
  /**
   * The in-process list of subscribed event names is re-read this often, as a fallback to the
   * NOTIFY that every endpoint change sends (a notification lost with a dropped connection).
   */
  subscriptionRefreshMs: 5_000,
  /** Delay before re-opening a lost LISTEN connection. */
  listenReconnectMs: 1_000,
} as const;

/** NOTIFY channel of endpoint changes (create, delete, events or enabled changed). */
export const WEBHOOK_CHANGES_CHANNEL = 'lm_webhooks_changed';

/** The durable queue the deliveries run on. */
export const WEBHOOK_QUEUE: QueueOptions = {
  name: 'webhooks',
  maxAttempts: WEBHOOK_POLICY.maxAttempts,
  backoffMs: [...WEBHOOK_POLICY.backoffMs],
  // The lease outlives one request (30 s) with room: a job is only taken back when its worker died.
  timeoutMs: 120_000,
  // The delivery log lives in webhook_deliveries; finished jobs are only kept for inspection.
  retainCompleted: 1_000,
  retainFailed: 10_000,
};

/**
 * The worker's delivery loads and attempt records: the jobs of one claim (and attempts that
 * finish together) share one query, one query at a time, started without waiting for the
 * event loop.
 */
export const WORKER_BATCH: BatchOptions = { maxInFlight: 1, maxItems: 500, tick: 'microtask' };
