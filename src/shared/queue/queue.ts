/**
 * Durable job queue on PostgreSQL (tables: src/shared/db/migrations/002_queue.ts, group pauses:
 * 004_queue_group_pause.ts; functions: src/shared/db/functions/queue_*.sql).
 *
 * - Groups: at most one active job per (queue, group_key), enforced by a partial unique index;
 *   groups run in parallel. A `queue_groups` row per busy group is what claims walk, so a
 *   claim never scans pending jobs. Its `next_run_at` is a lower bound of
 *   max(first due job, paused_until).
 * - Group pauses: a deferral with scope `group` (or pauseGroup) holds every job of the group
 *   until the pause passes; enqueues into a paused group keep the pause.
 * - Every state change is one round trip into a plpgsql function (claim, finish, cancel,
 *   lease expiry, retention); batches go through the same functions.
 * - Time: every "now" comes from the injected Clock and is passed as a parameter, never
 *   now() in SQL, so tests drive deferral, backoff and lease expiry with a ManualClock.
 * - Crash safety: a job leaves `active` only when a finish (or lease expiry) commits; a
 *   killed process leaves pending jobs and active jobs with a lease, which maintain() takes
 *   back once the lease passes. Delivery is at-least-once.
 */
import type pg from 'pg';
import { systemClock, toIso, type Clock } from '../clock.js';
import type { Queryable } from '../db/pool.js';
import { retryOnConflict } from '../db/retry.js';
import { PayloadCache } from './payload-cache.js';
import { decodePayload, encodePayload } from './payload-codec.js';
import type {
  AttemptRecord,
  EnqueueInput,
  Job,
  JobOutcome,
  DeferScope,
  JobState,
  QueueOptions,
  QueueStats,
} from './types.js';

/** NOTIFY channel shared by all queues; the payload is the queue name. */
export const QUEUE_CHANNEL = 'lm_queue';

/** Rows deleted per state and retention pass (bounds one transaction after a long backlog). */
const RETAIN_BATCH = 10_000;

/** Filters of the pending listing. Group-key filters match through the group rows (small). */
export interface PendingFilter {
  limit?: number;
  offset?: number;
  groupKey?: string;
  groupKeyPrefix?: string;
  /** e.g. `:gmail.com` for the MTA's `<ipPool>:<domain>` groups. */
  groupKeySuffix?: string;
  orgId?: string;
  /** true: only jobs claimable now (due, group not paused); false: only delayed or paused ones; default both. */
  ready?: boolean;
}

export interface FinishItem<P = unknown> {
  job: Job<P>;
  outcome: JobOutcome;
}

export interface MaintainResult {
  /** Active jobs taken back because their lease passed. */
  expired: number;
  /** Finished jobs deleted by retention (-1: another maintainer held the retention lock). */
  deleted: number;
}

interface JobRow {
  id: number | string;
  queue: string;
  group_key: string;
  priority: number;
  state: JobState;
  attempts: number;
  max_attempts: number;
  claims: number;
  run_at: Date;
  lease_until: Date | null;
  locked_by: string | null;
  org_id: string | null;
  dedupe_key: string | null;
  created_at: Date;
  started_at: Date | null;
  finished_at: Date | null;
  last_error: string | null;
  payload: unknown;
  history: AttemptRecord[];
  /** The payload as the payload cache held it, already parsed (lean claims only). */
  parsed?: unknown;
}

const ms = (d: Date | null): number | null => (d === null ? null : d.getTime());

function toJob<P>(r: JobRow): Job<P> {
  return {
    id: String(r.id),
    queue: r.queue,
    groupKey: r.group_key,
    priority: r.priority,
    // The cache's value; stored bytes (payload-codec.ts), or the text the cache held; null: a lean claim's row.
    payload: (r.parsed !== undefined ? r.parsed : r.payload === null ? null : JSON.parse(decodePayload(r.payload as Buffer | string))) as P,
    state: r.state,
    attempts: r.attempts,
    maxAttempts: r.max_attempts,
    claims: r.claims,
    runAt: r.run_at.getTime(),
    orgId: r.org_id,
    dedupeKey: r.dedupe_key,
    createdAt: r.created_at.getTime(),
    startedAt: ms(r.started_at),
    leaseUntil: ms(r.lease_until),
    lockedBy: r.locked_by,
    finishedAt: ms(r.finished_at),
    lastError: r.last_error,
    history: r.history,
  };
}

/** A row as a job whose unparsable payload is reported (`payloadError`), not thrown. */
function inspected<P>(r: JobRow): Job<P> {
  try {
    return toJob<P>(r);
  } catch (err) {
    return { ...toJob<P>({ ...r, payload: null }), payloadError: `stored payload is not valid JSON: ${(err as Error).message}` };
  }
}

function escapeLike(s: string): string {
  return s.replace(/[\\%_]/g, (c) => `\\${c}`);
}

function checkDelay(name: string, v: number | undefined): void {
  if (v !== undefined && (!Number.isFinite(v) || v < 0)) throw new Error(`${name} must be a non-negative number`);
}

// Multi-row enqueue in ONE statement: payloads travel as one binary bytea parameter ($10)
// cut by byte offsets and lengths ($4, $11) — a text[] parameter made node-postgres escape
// every payload (~5 ms of CPU per 100 KB job) and PostgreSQL parse the array literal. Ids are
// drawn up front so results map back to the input order; the group rows are upserted in key order (lock ordering) with LEAST so a
// concurrent finish that deleted or recomputed the row is handled, never below the group's
// pause (an enqueue does not un-pause a group); NOTIFY fires on commit when something is due
// now (a paused group's workers merely find nothing to claim).
const ENQUEUE_SQL = (returnRows: boolean, fold?: Pick<EnqueueFold, 'ctes' | 'guard'>) => `
  WITH input AS MATERIALIZED (
    SELECT nextval('queue_jobs_id_seq') AS id, t.*
      FROM unnest($2::text[], $3::integer[], $4::integer[], $11::integer[], $5::timestamptz[], $6::text[], $7::text[])
           WITH ORDINALITY AS t(group_key, priority, payload_at, payload_len, run_at, org_id, dedupe_key, ord)
  ), ins AS (
    INSERT INTO queue_jobs (id, queue, group_key, priority, payload, run_at, max_attempts, org_id, dedupe_key, created_at)
    SELECT i.id, $1, i.group_key, i.priority, substring($10::bytea FROM i.payload_at FOR i.payload_len),
           i.run_at, $8, i.org_id, i.dedupe_key, $9
      FROM input i ORDER BY i.ord
    ON CONFLICT (queue, dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING
    RETURNING *
  ), grp AS (
    INSERT INTO queue_groups AS g (queue, group_key, next_run_at, pending)
    SELECT $1, n.group_key, min(n.run_at), count(*)::integer FROM ins n GROUP BY n.group_key ORDER BY n.group_key
    ON CONFLICT (queue, group_key) DO UPDATE
      SET next_run_at = LEAST(g.next_run_at, GREATEST(EXCLUDED.next_run_at, g.paused_until)),
          pending = g.pending + EXCLUDED.pending
    RETURNING 1
  ), wake AS (
    SELECT pg_notify('${QUEUE_CHANNEL}', $1) FROM (SELECT 1 FROM ins n WHERE n.run_at <= $9 LIMIT 1) due
  )${fold ? `, ${fold.ctes}, ${FOLD_GUARD(fold.guard)}` : ''}
  SELECT i.ord, i.id AS new_id, (n.id IS NOT NULL) AS inserted, i.dedupe_key AS input_dedupe_key
         ${returnRows ? ', n.*' : ''}${fold ? ', lm_fold_ok' : ''}
    FROM input i
    LEFT JOIN ins n ON n.id = i.id
    CROSS JOIN (SELECT count(*) AS c FROM wake) w
    CROSS JOIN (SELECT count(*) AS c FROM grp) gg${fold ? ' CROSS JOIN lm_fold_guard' : ''}
   ORDER BY i.ord`;

/** Parameter number of an EnqueueFold's first value (the enqueue's own are $1–$11). */
export const FOLD_PARAM = 12;

/** SQLSTATE of queue_fold_reject (src/shared/db/functions/queue_helpers.sql). */
const FOLD_REJECTED = 'LMQ01';

// queue_fold_reject raises, so nothing of the statement commits. CASE calls it only on the
// failing branch; the value is materialized and selected, so the planner cannot drop it as unused.
const FOLD_GUARD = (guard = 'true') => `lm_fold_guard AS MATERIALIZED (
    SELECT CASE WHEN (SELECT count(*) FROM ins) = (SELECT count(*) FROM input) AND (${guard}) THEN 0
                ELSE queue_fold_reject((SELECT count(*) FROM ins)) END AS lm_fold_ok
  )`;

/**
 * Writes carried by the enqueue's own statement (enqueueFolded): one round trip and no
 * BEGIN/COMMIT, the statement commits alone, all or nothing.
 */
export interface EnqueueFold {
  /** The prepared statement's name: one text per name. */
  name: string;
  /**
   * CTEs appended to the enqueue's WITH. They read `input` (id: the job's id; ord: its 1-based
   * position in the inputs); their parameters are numbered from FOLD_PARAM.
   */
  ctes: string;
  values: unknown[];
  /** A boolean SQL expression over the CTEs: false fails the statement (FoldRejected). */
  guard?: string;
}

/** The folded statement wrote nothing: a job's dedupe key was taken, or the fold's guard was false. */
export class FoldRejected extends Error {}

const isFoldRejected = (err: unknown): boolean => (err as { code?: unknown })?.code === FOLD_REJECTED;

const SQL = {
  enqueueIds: ENQUEUE_SQL(false),
  enqueueRows: ENQUEUE_SQL(true),
  claim: 'SELECT * FROM queue_claim($1, $2, $3, $4, $5)',
  // Lean: claimed rows come back with a NULL payload (p_payload), taken from the PayloadCache.
  claimLean: 'SELECT * FROM queue_claim($1, $2, $3, $4, $5, false)',
  payloads: 'SELECT id, payload FROM queue_jobs WHERE id = ANY ($1::bigint[])',
  finish: 'SELECT out_id, out_state FROM queue_finish($1, $2, $3, $4, $5, $6, $7, $8)',
  cycle: 'SELECT * FROM queue_cycle($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)',
  cycleLean: 'SELECT * FROM queue_cycle($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, false)',
  cancelIds: 'SELECT queue_cancel AS id FROM queue_cancel($1, $2, $3::bigint[], NULL)',
  cancelOrg: 'SELECT queue_cancel AS id FROM queue_cancel($1, $2, NULL, $3)',
  expire: 'SELECT queue_expire_leases($1, $2) AS n',
  retain: 'SELECT queue_retain($1, $2, $3, $4, $5) AS n',
  maintain: 'SELECT queue_expire_leases($1, $2) AS expired, queue_retain($1, $3, $4, $5, $6) AS deleted',
  depth: `SELECT (COALESCE(sum(pending), 0) + count(active_job_id))::bigint AS depth FROM queue_groups WHERE queue = $1`,
  pause: `WITH r AS (SELECT queue_pause_group($1, $2, $3, $4) AS due)
          SELECT r.due, CASE WHEN r.due THEN pg_notify('${QUEUE_CHANNEL}', $1) END AS notified FROM r`,
  pausedUntil: `SELECT paused_until FROM queue_groups WHERE queue = $1 AND group_key = $2 AND paused_until > $3`,
};

/** Group keys of this queue whose pause has not passed (stats and listings treat their jobs as delayed). */
const PAUSED_GROUPS = (queue: string, now: string) =>
  `SELECT pg.group_key FROM queue_groups pg WHERE pg.queue = ${queue} AND pg.paused_until > ${now}`;

export class Queue<P = unknown> {
  readonly db: pg.Pool;
  readonly clock: Clock;
  readonly options: Readonly<QueueOptions>;
  readonly name: string;
  private readonly backoff: number[];
  /** Payloads this instance enqueued, for its own claims (QueueOptions.payloadCache). */
  private readonly cache: PayloadCache | null;

  constructor(opts: { db: pg.Pool; clock?: Clock; options: QueueOptions }) {
    const o = opts.options;
    if (!o.name) throw new Error('queue name is required');
    if (!Number.isInteger(o.maxAttempts) || o.maxAttempts < 1) throw new Error('maxAttempts must be a positive integer');
    if (!(o.timeoutMs > 0)) throw new Error('timeoutMs must be positive');
    for (const b of o.backoffMs) checkDelay('backoffMs', b);
    for (const [k, v] of [
      ['retainCompleted', o.retainCompleted],
      ['retainFailed', o.retainFailed],
      ['retainCancelled', o.retainCancelled ?? 0],
    ] as const) {
      if (!Number.isInteger(v) || v < 0) throw new Error(`${k} must be a non-negative integer`);
    }
    this.db = opts.db;
    this.clock = opts.clock ?? systemClock;
    this.options = { ...o, backoffMs: [...o.backoffMs] };
    this.name = o.name;
    this.backoff = o.backoffMs.map((b) => Math.round(b));
    const pc = o.payloadCache;
    this.cache = pc && pc.maxBytes > 0 ? new PayloadCache(this.clock, pc) : null;
  }

  /** What the payload cache holds now (null: no cache). */
  get cachedPayloads(): { count: number; bytes: number } | null {
    return this.cache ? { count: this.cache.count, bytes: this.cache.size } : null;
  }

  /** Delay before the retry that follows attempt `attempt` (1-based); the last entry repeats. */
  backoffFor(attempt: number): number {
    if (this.backoff.length === 0) return 0;
    return this.backoff[Math.min(Math.max(attempt, 1), this.backoff.length) - 1]!;
  }

  // ---------------------------------------------------------------- enqueue

  /** Adds one job; with a dedupe key already used in this queue, returns that job instead. */
  async enqueue(input: EnqueueInput<P>): Promise<Job<P>> {
    const rows = await this.insert([input], true);
    const row = rows[0]!;
    if (row.inserted) return toJob<P>(row as unknown as JobRow);
    const existing = await this.getByDedupeKey(input.dedupeKey!);
    if (!existing) throw new Error(`job with dedupe key ${input.dedupeKey} vanished during enqueue`);
    return existing;
  }

  /**
   * Adds many jobs in one statement; returns their ids in input order (for a dedupe key
   * already used, the existing job's id).
   */
  async enqueueMany(inputs: EnqueueInput<P>[], within?: Queryable): Promise<string[]> {
    if (inputs.length === 0) return [];
    const rows = await this.insert(inputs, false, within);
    const ids = rows.map((r) => (r.inserted ? String(r.new_id) : null));
    const missing = rows.filter((r) => !r.inserted).map((r) => r.input_dedupe_key as string);
    if (missing.length > 0) {
      // A fresh statement: sees rows committed by concurrent enqueues and earlier rows of this batch.
      const found = await (within ?? this.db).query<{ id: number; dedupe_key: string }>(
        'SELECT id, dedupe_key FROM queue_jobs WHERE queue = $1 AND dedupe_key = ANY ($2::text[])',
        [this.name, missing],
      );
      const byKey = new Map(found.rows.map((r) => [r.dedupe_key, String(r.id)]));
      rows.forEach((r, i) => {
        if (!r.inserted) ids[i] = byKey.get(r.input_dedupe_key as string) ?? null;
      });
    }
    return ids.map((id, i) => {
      if (id === null) throw new Error(`job with dedupe key ${inputs[i]!.dedupeKey} vanished during enqueue`);
      return id;
    });
  }

  /**
   * Adds many jobs and the caller's writes (`fold`) in one statement, outside any transaction;
   * returns the job ids in input order. The fold reads each job's id from `input`, so every job
   * must be new: a dedupe key already used, or the fold's guard false, writes nothing and
   * throws FoldRejected (the caller then takes its careful path).
   */
  async enqueueFolded(inputs: EnqueueInput<P>[], fold: EnqueueFold): Promise<string[]> {
    if (inputs.length === 0) throw new Error('enqueueFolded needs at least one job');
    try {
      const rows = await this.insert(inputs, false, undefined, fold);
      return rows.map((r) => String(r.new_id));
    } catch (err) {
      if (isFoldRejected(err)) throw new FoldRejected('folded enqueue rejected: a dedupe key was taken or the guard failed');
      throw err;
    }
  }

  /** `within`: a transaction's client, so the jobs commit (or roll back) with the caller's writes. */
  private async insert(inputs: EnqueueInput<P>[], returnRows: boolean, within?: Queryable, fold?: EnqueueFold): Promise<Record<string, unknown>[]> {
    const now = this.clock.now();
    const groups: string[] = [];
    const priorities: number[] = [];
    const payloads: Buffer[] = [];
    const runAts: string[] = [];
    const orgs: (string | null)[] = [];
    const dedupe: (string | null)[] = [];
    for (const e of inputs) {
      if (typeof e.groupKey !== 'string' || e.groupKey.length === 0) throw new Error('groupKey is required');
      const priority = e.priority ?? 0;
      if (!Number.isInteger(priority)) throw new Error('priority must be an integer');
      if (e.runAt !== undefined && !Number.isFinite(e.runAt)) throw new Error('runAt must be epoch milliseconds');
      const payload = e.payloadJson ?? JSON.stringify(e.payload);
      if (typeof payload !== 'string' && !Buffer.isBuffer(payload)) throw new Error('payload must be JSON-serialisable');
      groups.push(e.groupKey);
      priorities.push(priority);
      payloads.push(typeof payload === 'string' ? Buffer.from(payload, 'utf8') : payload);
      runAts.push(toIso(e.runAt ?? now));
      orgs.push(e.orgId ?? null);
      dedupe.push(e.dedupeKey ?? null);
    }
    // Stored compressed (payload-codec.ts); the cache keeps the JSON bytes, or the value given with them.
    const stored = payloads.map(encodePayload);
    const offsets: number[] = [];
    const lengths: number[] = [];
    let at = 1; // substring() positions are 1-based
    for (const b of stored) {
      offsets.push(at);
      lengths.push(b.length);
      at += b.length;
    }
    const text = fold ? ENQUEUE_SQL(returnRows, fold) : returnRows ? SQL.enqueueRows : SQL.enqueueIds;
    const run = () =>
      (within ?? this.db).query({
        name: fold ? `lm_queue_enqueue_fold_${fold.name}` : returnRows ? 'lm_queue_enqueue_rows' : 'lm_queue_enqueue_ids',
        text,
        values: [
          this.name,
          groups,
          priorities,
          offsets,
          runAts,
          orgs,
          dedupe,
          this.options.maxAttempts,
          toIso(now),
          Buffer.concat(stored, at - 1),
          lengths,
          ...(fold?.values ?? []),
        ],
      });
    // Inside a caller's transaction a failed statement aborts it: no retry there, the caller's rolls back whole.
    const res = within ? await run() : await retryOnConflict(run);
    // Rows come back in input order; a dedupe hit stored nothing of ours.
    // Not for a caller's transaction: it may still roll back.
    if (this.cache && !within) {
      res.rows.forEach((r, i) => {
        if (!r.inserted) return;
        const e = inputs[i]!;
        this.cache!.add(String(r.new_id), e.payloadJson === undefined ? { bytes: payloads[i]! } : { value: e.payload }, payloads[i]!.length);
      });
    }
    return res.rows;
  }

  /**
   * Fills the payloads of lean claim rows: from the cache, the rest in one query. The claim has
   * committed by then: should that query fail, the jobs wait for their lease to pass, as after
   * a worker that died having claimed them (at-least-once either way).
   */
  private async attachPayloads(rows: JobRow[]): Promise<void> {
    const missing: string[] = [];
    const byId = new Map<string, JobRow>();
    for (const r of rows) {
      if (r.state !== 'active') continue;
      const id = String(r.id);
      const held = this.cache!.take(id);
      if (held?.bytes) r.payload = held.bytes.toString('utf8');
      else if (held) r.parsed = held.value;
      else {
        missing.push(id);
        byId.set(id, r);
      }
    }
    if (missing.length === 0) return;
    const res = await this.db.query<{ id: string; payload: Buffer }>({ name: 'lm_queue_payloads', text: SQL.payloads, values: [missing] });
    for (const p of res.rows) byId.get(String(p.id))!.payload = p.payload;
  }

  // ---------------------------------------------------------------- claim & finish

  /**
   * Claims up to `limit` due jobs, at most one per group and never a group that already has
   * an active job. Each becomes active with a lease of `timeoutMs` and consumes an attempt.
   */
  async claim(workerId: string, limit: number): Promise<Job<P>[]> {
    if (limit <= 0) return [];
    const now = this.clock.now();
    const res = await retryOnConflict(() =>
      this.db.query<JobRow>({
        name: this.cache ? 'lm_queue_claim_lean' : 'lm_queue_claim',
        text: this.cache ? SQL.claimLean : SQL.claim,
        values: [this.name, workerId, Math.floor(limit), toIso(now), Math.round(this.options.timeoutMs)],
      }),
    );
    if (this.cache) await this.attachPayloads(res.rows);
    return this.claimedJobs(res.rows);
  }

  /**
   * Claimed rows as jobs. A row whose stored payload does not parse can never run: it is
   * failed at once, so it does not hold the jobs claimed with it until their leases pass,
   * claim after claim.
   */
  private async claimedJobs(rows: JobRow[]): Promise<Job<P>[]> {
    const jobs: Job<P>[] = [];
    const unusable: FinishItem<P>[] = [];
    for (const r of rows) {
      const job = inspected<P>(r);
      if (job.payloadError === undefined) jobs.push(job);
      else unusable.push({ job, outcome: { type: 'fail', error: job.payloadError } });
    }
    if (unusable.length > 0) await this.applyMany(unusable);
    return jobs;
  }

  /**
   * Applies handler outcomes in one round trip. For each item returns the job's new state, or
   * null when the claim is no longer current (lease expired and taken back, already finished):
   * a stale worker can never finish someone else's run.
   */
  async applyMany(items: FinishItem<P>[]): Promise<(JobState | null)[]> {
    if (items.length === 0) return [];
    const enc = this.encodeOutcomes(items);
    const res = await retryOnConflict(() =>
      this.db.query<{ out_id: number; out_state: JobState }>({
        name: 'lm_queue_finish',
        text: SQL.finish,
        values: [this.name, toIso(this.clock.now()), this.backoff, ...enc],
      }),
    );
    const states = new Map(res.rows.map((r) => [String(r.out_id), r.out_state]));
    return enc[0].map((id) => states.get(id) ?? null);
  }

  /**
   * A worker's round trip: applies outcomes (as applyMany) and then claims up to `limit` jobs
   * (as claim) in one transaction, so a busy worker needs one round trip per batch.
   */
  async finishAndClaim(
    items: FinishItem<P>[],
    workerId: string,
    limit: number,
  ): Promise<{ states: (JobState | null)[]; jobs: Job<P>[] }> {
    const enc = this.encodeOutcomes(items);
    const res = await retryOnConflict(() =>
      this.db.query<JobRow>({
        name: this.cache ? 'lm_queue_cycle_lean' : 'lm_queue_cycle',
        text: this.cache ? SQL.cycleLean : SQL.cycle,
        values: [
          this.name,
          toIso(this.clock.now()),
          this.backoff,
          ...enc,
          workerId,
          Math.max(Math.floor(limit), 0),
          Math.round(this.options.timeoutMs),
        ],
      }),
    );
    if (this.cache) await this.attachPayloads(res.rows);
    const states = new Map<string, JobState>();
    const claimed: JobRow[] = [];
    for (const r of res.rows) {
      // Claimed jobs come back active; applied outcomes never leave a job active.
      if (r.state === 'active') claimed.push(r);
      else states.set(String(r.id), r.state);
    }
    return { states: enc[0].map((id) => states.get(id) ?? null), jobs: await this.claimedJobs(claimed) };
  }

  private encodeOutcomes(items: FinishItem<P>[]): [string[], number[], string[], (number | null)[], (string | null)[]] {
    const ids: string[] = [];
    const claims: number[] = [];
    const kinds: string[] = [];
    const delays: (number | null)[] = [];
    const texts: (string | null)[] = [];
    for (const { job, outcome } of items) {
      ids.push(job.id);
      claims.push(job.claims);
      switch (outcome.type) {
        case 'complete':
          kinds.push('complete');
          delays.push(null);
          texts.push(null);
          break;
        case 'retry':
          checkDelay('retry delayMs', outcome.delayMs);
          kinds.push('retry');
          delays.push(outcome.delayMs === undefined ? null : Math.round(outcome.delayMs));
          texts.push(String(outcome.error));
          break;
        case 'defer':
          checkDelay('defer delayMs', outcome.delayMs);
          if (outcome.scope !== undefined && outcome.scope !== 'job' && outcome.scope !== 'group') {
            throw new Error(`unknown defer scope ${JSON.stringify(outcome.scope)}`);
          }
          kinds.push(outcome.scope === 'group' ? 'defer_group' : 'defer');
          delays.push(Math.round(outcome.delayMs ?? 0));
          texts.push(outcome.reason === undefined ? null : String(outcome.reason));
          break;
        case 'fail':
          kinds.push('fail');
          delays.push(null);
          texts.push(String(outcome.error));
          break;
        default:
          throw new Error(`unknown job outcome ${JSON.stringify(outcome)}`);
      }
    }
    return [ids, claims, kinds, delays, texts];
  }

  async apply(job: Job<P>, outcome: JobOutcome): Promise<JobState | null> {
    return (await this.applyMany([{ job, outcome }]))[0]!;
  }

  complete(job: Job<P>): Promise<JobState | null> {
    return this.apply(job, { type: 'complete' });
  }

  /** Consumes the attempt; runs again after the backoff (or delayMs), or fails when attempts are exhausted. */
  retry(job: Job<P>, error: string, delayMs?: number): Promise<JobState | null> {
    return this.apply(job, delayMs === undefined ? { type: 'retry', error } : { type: 'retry', error, delayMs });
  }

  /**
   * Puts the job back for delayMs without consuming the attempt (e.g. a rate limit). With
   * scope `group` the job's whole group is paused for delayMs too.
   */
  defer(job: Job<P>, delayMs: number, reason = 'deferred', opts: { scope?: DeferScope } = {}): Promise<JobState | null> {
    return this.apply(job, opts.scope ? { type: 'defer', delayMs, reason, scope: opts.scope } : { type: 'defer', delayMs, reason });
  }

  fail(job: Job<P>, error: string): Promise<JobState | null> {
    return this.apply(job, { type: 'fail', error });
  }

  // ---------------------------------------------------------------- group pauses

  /**
   * Holds every job of the group until `untilMs` (epoch ms): none is claimed before then; an
   * active job runs on. Replaces a pause in place (may shorten it); works on a group with no
   * jobs yet. A time not in the future resumes the group.
   */
  async pauseGroup(groupKey: string, untilMs: number): Promise<void> {
    if (typeof groupKey !== 'string' || groupKey.length === 0) throw new Error('groupKey is required');
    if (!Number.isFinite(untilMs)) throw new Error('untilMs must be epoch milliseconds');
    await this.setPause(groupKey, toIso(untilMs));
  }

  /** Lifts the group's pause; its due jobs are claimable at once (workers are notified). */
  async resumeGroup(groupKey: string): Promise<void> {
    if (typeof groupKey !== 'string' || groupKey.length === 0) throw new Error('groupKey is required');
    await this.setPause(groupKey, null);
  }

  /** End of the group's pause (epoch ms), or null when it is not paused. */
  async pausedUntil(groupKey: string): Promise<number | null> {
    const res = await this.db.query<{ paused_until: Date }>({
      text: SQL.pausedUntil,
      values: [this.name, groupKey, toIso(this.clock.now())],
    });
    return res.rows[0] ? res.rows[0].paused_until.getTime() : null;
  }

  private async setPause(groupKey: string, until: string | null): Promise<void> {
    await retryOnConflict(() =>
      this.db.query({ text: SQL.pause, values: [this.name, groupKey, until, toIso(this.clock.now())] }),
    );
  }

  // ---------------------------------------------------------------- cancel

  /** Cancels a pending job; false when it is not pending (active, finished, unknown). */
  async cancel(id: string): Promise<boolean> {
    if (!/^\d+$/.test(id)) return false;
    const res = await retryOnConflict(() =>
      this.db.query({ text: SQL.cancelIds, values: [this.name, toIso(this.clock.now()), [id]] }),
    );
    return res.rowCount === 1;
  }

  /** Cancels every pending job of an organization; returns how many. Active jobs run on. */
  async cancelByOrg(orgId: string): Promise<number> {
    const res = await retryOnConflict(() =>
      this.db.query({ text: SQL.cancelOrg, values: [this.name, toIso(this.clock.now()), orgId] }),
    );
    return res.rowCount ?? 0;
  }

  // ---------------------------------------------------------------- maintenance

  /** Takes back active jobs whose lease passed; returns how many. */
  async expireLeases(): Promise<number> {
    const res = await retryOnConflict(() =>
      this.db.query<{ n: number }>({ text: SQL.expire, values: [this.name, toIso(this.clock.now())] }),
    );
    return res.rows[0]!.n;
  }

  /** Count-based retention: keeps the newest retainCompleted / retainFailed (/ retainCancelled). */
  async applyRetention(): Promise<number> {
    let total = 0;
    for (;;) {
      const res = await this.db.query<{ n: number }>({ text: SQL.retain, values: this.retainValues() });
      const n = res.rows[0]!.n;
      if (n < 0) return -1;
      total += n;
      if (n < RETAIN_BATCH) return total;
    }
  }

  /** Lease expiry + retention in one round trip (run by workers every few seconds). */
  async maintain(): Promise<MaintainResult> {
    const res = await retryOnConflict(() =>
      this.db.query<{ expired: number; deleted: number }>({
        text: SQL.maintain,
        values: [this.name, toIso(this.clock.now()), ...this.retainValues().slice(1)],
      }),
    );
    const { expired, deleted } = res.rows[0]!;
    // A large backlog of finished jobs: keep trimming (rare).
    const more = deleted >= RETAIN_BATCH ? await this.applyRetention() : 0;
    return { expired, deleted: deleted < 0 ? deleted : deleted + Math.max(more, 0) };
  }

  private retainValues(): [string, number, number, number, number] {
    const o = this.options;
    return [this.name, o.retainCompleted, o.retainFailed, o.retainCancelled ?? o.retainFailed, RETAIN_BATCH];
  }

  // ---------------------------------------------------------------- inspection

  async get(id: string): Promise<Job<P> | null> {
    if (!/^\d+$/.test(id)) return null;
    const res = await this.db.query<JobRow>('SELECT * FROM queue_jobs WHERE id = $1 AND queue = $2', [id, this.name]);
    return res.rows[0] ? inspected<P>(res.rows[0]) : null;
  }

  async getByDedupeKey(key: string): Promise<Job<P> | null> {
    const res = await this.db.query<JobRow>('SELECT * FROM queue_jobs WHERE queue = $1 AND dedupe_key = $2', [
      this.name,
      key,
    ]);
    return res.rows[0] ? inspected<P>(res.rows[0]) : null;
  }

  /**
   * Counts by state. `pending` is claimable now (due, group not paused); `delayed` is pending
   * and waiting, for its run_at or for its group's pause. pending + delayed = all pending jobs.
   */
  async stats(): Promise<QueueStats> {
    const res = await this.db.query<QueueStats>(
      `SELECT count(*) FILTER (WHERE state = 'pending' AND NOT held)::int AS pending,
              count(*) FILTER (WHERE state = 'pending' AND held)::int AS delayed,
              count(*) FILTER (WHERE state = 'active')::int AS active,
              count(*) FILTER (WHERE state = 'completed')::int AS completed,
              count(*) FILTER (WHERE state = 'failed')::int AS failed,
              count(*) FILTER (WHERE state = 'cancelled')::int AS cancelled
         FROM (SELECT j.state, j.state = 'pending' AND (j.run_at > $2 OR j.group_key IN (${PAUSED_GROUPS('$1', '$2')})) AS held
                 FROM queue_jobs j WHERE j.queue = $1) s`,
      [this.name, toIso(this.clock.now())],
    );
    return res.rows[0]!;
  }

  /** Pending jobs (due and delayed), oldest first (enqueue order). `ready` counts a paused group's jobs as delayed. */
  async pending(filter: PendingFilter = {}): Promise<Job<P>[]> {
    const values: unknown[] = [this.name];
    const where = [`j.queue = $1`, `j.state = 'pending'`];
    const param = (v: unknown) => {
      values.push(v);
      return `$${values.length}`;
    };
    if (filter.orgId !== undefined) where.push(`j.org_id = ${param(filter.orgId)}`);
    if (filter.groupKey !== undefined) where.push(`j.group_key = ${param(filter.groupKey)}`);
    const patterns: string[] = [];
    if (filter.groupKeyPrefix !== undefined) patterns.push(`${escapeLike(filter.groupKeyPrefix)}%`);
    if (filter.groupKeySuffix !== undefined) patterns.push(`%${escapeLike(filter.groupKeySuffix)}`);
    if (patterns.length > 0) {
      // Every pending job has a group row: match the (few) group keys, then use the job index per group.
      const conds = patterns.map((p) => `g.group_key LIKE ${param(p)}`).join(' AND ');
      where.push(`j.group_key IN (SELECT g.group_key FROM queue_groups g WHERE g.queue = $1 AND ${conds})`);
    }
    if (filter.ready !== undefined) {
      const now = param(toIso(this.clock.now()));
      const held = `(j.run_at > ${now} OR j.group_key IN (${PAUSED_GROUPS('$1', now)}))`;
      where.push(filter.ready ? `NOT ${held}` : held);
    }
    const limit = Math.min(Math.max(Math.floor(filter.limit ?? 100), 0), 10_000);
    const offset = Math.max(Math.floor(filter.offset ?? 0), 0);
    const res = await this.db.query<JobRow>(
      `SELECT j.* FROM queue_jobs j WHERE ${where.join(' AND ')} ORDER BY j.id LIMIT ${param(limit)} OFFSET ${param(offset)}`,
      values,
    );
    return res.rows.map((r) => inspected<P>(r));
  }

  /** Pending (due and delayed) + active jobs, from the group rows' counters: cheap. */
  async depth(): Promise<number> {
    const res = await this.db.query<{ depth: number }>({ name: 'lm_queue_depth', text: SQL.depth, values: [this.name] });
    return Number(res.rows[0]!.depth);
  }
}
