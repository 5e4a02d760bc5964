/**
 * Durable job queue on PostgreSQL (see queue.ts). Shared by MTA deliveries and backend
 * webhook deliveries.
 */
import type { PayloadCacheOptions } from './payload-cache.js';

export type JobState = 'pending' | 'active' | 'completed' | 'failed' | 'cancelled';

export interface QueueOptions {
  /** Queue name: several queues share the tables. */
  name: string;
  maxAttempts: number;
  /** Delay before retry n (index n-1); the last entry repeats. */
  backoffMs: number[];
  /** Lease length: an active job whose lease passes is taken back (worker died). */
  timeoutMs: number;
  /** How many completed / failed jobs to keep (count-based retention). */
  retainCompleted: number;
  retainFailed: number;
  /** How many cancelled jobs to keep; default retainFailed. */
  retainCancelled?: number;
  /**
   * Keep payloads this instance enqueues in memory for its own claims (payload-cache.ts), so
   * large payloads are not read back from PostgreSQL. Off when absent.
   */
  payloadCache?: PayloadCacheOptions;
}

export interface EnqueueInput<P> {
  groupKey: string;
  payload: P;
  /**
   * `payload` already serialised as JSON (it must parse to `payload`): stored as it is, which
   * spares serialising a large payload the caller received as JSON text (POST /send). A
   * Buffer is that text's UTF-8 bytes (they must be valid UTF-8), stored without re-encoding.
   * With a payload cache, `payload` itself is what this process's claim of the job gets (not
   * a copy): the caller must not change it after enqueue.
   */
  payloadJson?: string | Buffer;
  /** Lower runs first within a group. Default 0. */
  priority?: number;
  /** Epoch ms; default now. */
  runAt?: number;
  /** Indexed field for filters and bulk cancel (an organization). */
  orgId?: string | null;
  /** Optional unique key: a second enqueue with the same key returns the first job. */
  dedupeKey?: string | null;
}

export interface AttemptRecord {
  attempt: number;
  startedAt: string;
  finishedAt: string;
  outcome: 'completed' | 'retry' | 'deferred' | 'failed' | 'lease_expired';
  error?: string;
  /** The reason given for a deferral. */
  reason?: string;
  /** `group`: the deferral also paused the job's group (see JobOutcome). */
  scope?: 'group';
}

export interface Job<P = unknown> {
  id: string;
  queue: string;
  groupKey: string;
  priority: number;
  payload: P;
  /**
   * Set by the inspection reads (get, getByDedupeKey, pending) when the stored payload is not
   * valid JSON; `payload` is then null. Such a job can never run: its claim fails it.
   */
  payloadError?: string;
  state: JobState;
  /** Attempts consumed; a claimed job counts its current attempt (1 on the first run). */
  attempts: number;
  maxAttempts: number;
  /** Times claimed (deferrals included): the lease token a finish must present. */
  claims: number;
  runAt: number;
  orgId: string | null;
  dedupeKey: string | null;
  createdAt: number;
  /** Start of the latest claim. */
  startedAt: number | null;
  /** While active: when the lease passes and the job is taken back. */
  leaseUntil: number | null;
  lockedBy: string | null;
  finishedAt: number | null;
  lastError: string | null;
  history: AttemptRecord[];
}

/**
 * How far a deferral reaches: `job` (default) puts back only this job, so the group's next
 * due job runs at once; `group` also pauses the whole group for the same delay (no job of the
 * group is claimed before then). Use `group` only when the reason holds for every job of the
 * group (e.g. its destination is degraded), never for one job's own reason.
 */
export type DeferScope = 'job' | 'group';

/** What a handler decides for a claimed job. */
export type JobOutcome =
  | { type: 'complete' }
  | { type: 'retry'; error: string; delayMs?: number }
  | { type: 'defer'; delayMs: number; reason: string; scope?: DeferScope }
  | { type: 'fail'; error: string };

export interface QueueStats {
  /** Pending and claimable now: due, in a group that is not paused. */
  pending: number;
  active: number;
  completed: number;
  failed: number;
  /** Pending but waiting: run_at in the future, or held by its group's pause. */
  delayed: number;
  cancelled: number;
}
