/** Operator-tunable policy of campaign sending (documented in docs/public-endpoints.md). */
import type { QueueOptions } from '../../shared/queue/types.js';
import type { SendStatus } from '../sends/status.js';

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

/**
 * The per-recipient record (GET /admin/campaigns/:id/recipients): how a send's status reads
 * to an operator. `sending` is written before the hand-over, so it is `queued`; a provider's
 * acceptance is `sent`; a complaint implies the message was delivered.
 */
export const RECIPIENT_STATES = ['queued', 'sent', 'delivered', 'bounced', 'suppressed', 'failed'] as const;
export type RecipientState = (typeof RECIPIENT_STATES)[number];
// Keyed by every send status: a new status cannot go without an operator word.
export const RECIPIENT_STATE_OF: Record<SendStatus, RecipientState> = {
  sending: 'queued',
  accepted: 'sent',
  attempted: 'sent',
  sent: 'sent',
  delivered: 'delivered',
  complained: 'delivered',
  bounced: 'bounced',
  suppressed: 'suppressed',
  failed: 'failed',
  rejected: 'failed',
};

export const RECIPIENTS = {
  defaultLimit: 50,
  maxLimit: 500,
  /** Rows per query of the CSV export (streamed page by page). */
  exportPage: 2_000,
  /**
   * Retry resends these send statuses only: refused at hand-over (`failed`, `rejected`) and
   * soft bounces (`bounced` whose latest bounce feedback is `soft`). Hard bounces, complaints
   * and suppressions are never resent; delivered and sent ones neither.
   */
  retryStatuses: ['failed', 'rejected'],
  retrySoftBounces: true,
} as const;

/** Scheduled campaigns (POST /admin/campaigns/:id/schedule). */
export const SCHEDULE = {
  /** sendAt may be at most this far ahead. */
  maxAheadMs: 365 * 24 * 60 * 60 * 1000,
  /** Every backend instance looks for due campaigns this often (a campaign starts at most this late). */
  sweepMs: 5_000,
  /** Due campaigns started per sweep (the rest wait for the next one). */
  sweepBatch: 20,
} as const;
