/** Operator-tunable policy of campaign sending (documented in docs/public-endpoints.md). */
import type { QueueOptions } from '../../shared/queue/types.js';

export const FANOUT = {
  /** Members read, rendered and handed over per batch (one transaction records each batch). */
  sendBatch: 1_000,
  /** Messages in flight to the provider at once. */
  concurrency: 64,
  /** A fan-out job runs this long, then re-queues itself (a stopping worker waits at most this). */
  sliceMs: 3_000,
  /** While campaign sending is paused by the circuit breaker, look again after this long. */
  pausedRecheckMs: 30_000,
  /** Campaigns fanned out in parallel by one instance. */
  workerConcurrency: 2,
  /** Time allowed for one hand-over to the provider. */
  providerTimeoutMs: 30_000,
} as const;

/** The durable queue of fan-out jobs (one job per campaign, group key = campaign id). */
export const CAMPAIGN_QUEUE: QueueOptions = {
  name: 'campaigns',
  maxAttempts: 20,
  // Provider trouble: retry with growing pauses (the job's recipients stay queued meanwhile).
  backoffMs: [5_000, 15_000, 60_000, 300_000, 900_000],
  // A slice takes sliceMs plus one provider timeout at most; the lease is well above that.
  timeoutMs: 120_000,
  retainCompleted: 1_000,
  retainFailed: 1_000,
};

/**
 * Engagement score (0–100) sent to the MTA for ordering: from the contact's campaign
 * messages of the last `lookbackDays`, the share opened and the share clicked (human and
 * image-proxy hits; Apple MPP prefetches and scanners do not count). Unknown (no message in
 * the window): omitted.
 */
export const ENGAGEMENT = {
  lookbackDays: 180,
  openWeight: 0.6,
  clickWeight: 0.4,
  /** A click rate of 1/clickSaturation or more counts as full marks for clicks. */
  clickSaturation: 4,
} as const;

export function engagementScore(sends: number, opened: number, clicked: number): number | undefined {
  if (sends <= 0) return undefined;
  const openRate = Math.min(1, opened / sends);
  const clickRate = Math.min(1, (clicked / sends) * ENGAGEMENT.clickSaturation);
  return Math.round(100 * (ENGAGEMENT.openWeight * openRate + ENGAGEMENT.clickWeight * clickRate));
}
