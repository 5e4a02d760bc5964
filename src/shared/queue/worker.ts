/**
 * Runs a queue's jobs. The worker talks to the database in "cycles", one at a time: each
 * cycle is ONE round trip that writes back the outcomes finished so far and claims as many
 * jobs as that frees (queue.finishAndClaim). Outcomes that arrive while a cycle is in flight
 * wait for the next one, so batches grow with load by themselves (like a group commit) and
 * an idle worker still writes an outcome back at once. Handlers run concurrently, at most
 * `concurrency` at a time.
 *
 * Wake-ups: LISTEN on a dedicated connection (enqueue NOTIFYs), every write-back (the
 * released groups may have more work), and polling every `pollMs` as the fallback (deferred
 * jobs becoming due, notifications lost while reconnecting).
 *
 * Crash safety: an outcome counts only once its cycle commits. A worker killed before that
 * leaves its jobs active with a lease; maintain() takes them back when the lease passes.
 */
import { hostname } from 'node:os';
import { randomString } from '../crypto.js';
import { PgListener } from '../db/listener.js';
import { silentLogger, type Logger } from '../log.js';
import { QUEUE_CHANNEL, type FinishItem, type Queue } from './queue.js';
import type { Job, JobOutcome, JobState } from './types.js';

export interface HandlerContext {
  /**
   * Aborted shortly before the job's lease passes (at 90% of timeoutMs, at most 10 s early) or
   * when the worker gives up on it at stop. A handler still running after its lease passed may
   * see the job run again elsewhere: honour the signal.
   */
  signal: AbortSignal;
}

export type JobHandler<P> = (job: Job<P>, ctx: HandlerContext) => Promise<JobOutcome>;

export interface WorkerOptions<P> {
  queue: Queue<P>;
  handler: JobHandler<P>;
  /** Jobs run at once (also the largest claim). */
  concurrency: number;
  /** Fallback polling interval; default 1000 ms. */
  pollMs?: number;
  workerId?: string;
  log?: Logger;
  /** Lease expiry + retention interval; default 5000 ms, 0 disables. */
  maintainMs?: number;
  /**
   * How long an outcome may wait for company when no cycle is in flight; default 0 (next
   * event-loop turn, which already gathers every handler that finished in the same turn).
   */
  flushMs?: number;
  /** Outcomes per round trip at most; default max(concurrency, 50). */
  flushBatch?: number;
  /** LISTEN for enqueue notifications; default true. */
  listen?: boolean;
}

const errorMessage = (err: unknown): string =>
  err instanceof Error ? err.message || err.name : typeof err === 'string' ? err : String(JSON.stringify(err));

function validOutcome(o: unknown): o is JobOutcome {
  if (typeof o !== 'object' || o === null) return false;
  const t = (o as { type?: unknown }).type;
  return t === 'complete' || t === 'retry' || t === 'defer' || t === 'fail';
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

export class Worker<P = unknown> {
  readonly workerId: string;
  private readonly queue: Queue<P>;
  private readonly handler: JobHandler<P>;
  private readonly concurrency: number;
  private readonly pollMs: number;
  private readonly maintainMs: number;
  private readonly flushMs: number;
  private readonly flushBatch: number;
  private readonly log: Logger;

  private running = false;
  /** Set once stop() returns: later outcomes are left to lease expiry (the pool may be gone). */
  private closed = false;
  /** Claimed jobs not yet written back (running, or finished and buffered). */
  private inFlight = 0;
  private buffer: FinishItem<P>[] = [];
  private cycling: Promise<void> | null = null;
  /** A cycle was asked for (wake-up or outcomes) since the current one started. */
  private wanted = false;
  private flushTimer: NodeJS.Timeout | undefined;
  private flushImmediate: NodeJS.Immediate | undefined;
  private pollTimer: NodeJS.Timeout | undefined;
  private maintainTimer: NodeJS.Timeout | undefined;
  private maintaining: Promise<void> | null = null;
  private readonly listener: PgListener | undefined;
  private readonly controllers = new Set<AbortController>();
  private idleWaiters: (() => void)[] = [];

  constructor(opts: WorkerOptions<P>) {
    if (!Number.isInteger(opts.concurrency) || opts.concurrency < 1) throw new Error('concurrency must be a positive integer');
    this.queue = opts.queue;
    this.handler = opts.handler;
    this.concurrency = opts.concurrency;
    this.pollMs = opts.pollMs ?? 1000;
    this.maintainMs = opts.maintainMs ?? 5000;
    this.flushMs = opts.flushMs ?? 0;
    this.flushBatch = opts.flushBatch ?? Math.max(opts.concurrency, 50);
    this.workerId = opts.workerId ?? `${hostname()}:${process.pid}:${randomString(6)}`;
    this.log = (opts.log ?? silentLogger).child({ queue: opts.queue.name, worker: this.workerId });
    if (opts.listen ?? true) {
      this.listener = new PgListener({
        db: opts.queue.db,
        channels: [QUEUE_CHANNEL],
        onNotification: (_channel, payload) => {
          if (payload === this.queue.name) this.kick();
        },
        // Whatever was notified while we were not listening; polling covers the time down.
        onUp: () => this.kick(),
        reconnectMs: Math.max(this.pollMs, 1000),
        log: this.log,
      });
    }
  }

  /** Jobs claimed and not yet written back. */
  get active(): number {
    return this.inFlight;
  }

  /** Starts claiming; resolves once the LISTEN connection is up (or has failed over to polling). */
  async start(): Promise<void> {
    if (this.running) return;
    if (this.closed) throw new Error('a stopped worker cannot be restarted');
    this.running = true;
    await this.listener?.start();
    this.pollTimer = setInterval(() => this.kick(), this.pollMs);
    this.pollTimer.unref();
    if (this.maintainMs > 0) {
      this.maintainTimer = setInterval(() => void this.runMaintain(), this.maintainMs);
      this.maintainTimer.unref();
    }
    this.kick();
  }

  /**
   * Stops claiming. With drain (default) waits up to timeoutMs for running jobs to finish and
   * be written back; jobs still running after that are left to lease expiry.
   */
  async stop(opts: { drain?: boolean; timeoutMs?: number } = {}): Promise<void> {
    if (this.closed) return;
    this.running = false;
    clearInterval(this.pollTimer);
    clearInterval(this.maintainTimer);
    await this.listener?.stop();

    if (opts.drain ?? true) {
      let timer: NodeJS.Timeout | undefined;
      const late = await Promise.race([
        new Promise<boolean>((resolve) => this.whenIdle(() => resolve(false))),
        new Promise<boolean>((resolve) => {
          timer = setTimeout(() => resolve(true), opts.timeoutMs ?? 30_000);
        }),
      ]);
      clearTimeout(timer);
      if (late) this.log.warn({ inFlight: this.inFlight }, 'drain timed out; leaving running jobs to lease expiry');
    }
    for (const c of this.controllers) c.abort(new Error('worker stopped'));
    // Outcomes already produced are written before we let go of the pool.
    while (this.cycling || this.buffer.length > 0) {
      if (!this.cycling) this.kick();
      await this.cycling;
    }
    await this.maintaining;
    this.closed = true;
  }

  // ---------------------------------------------------------------- cycles

  /** Asks for a cycle: now if none is in flight, else right after the current one. */
  private kick(): void {
    this.wanted = true;
    if (this.cycling || this.closed) return;
    clearTimeout(this.flushTimer);
    this.flushTimer = undefined;
    if (this.flushImmediate) clearImmediate(this.flushImmediate);
    this.flushImmediate = undefined;
    this.cycling = this.cycleLoop().finally(() => {
      this.cycling = null;
      // Asked for between the loop's last check and now: go again.
      if (this.wanted) this.kick();
      else this.checkIdle();
    });
  }

  private async cycleLoop(): Promise<void> {
    while (this.wanted) {
      this.wanted = false;
      const batch = this.buffer.splice(0, this.flushBatch);
      // Jobs written back in this cycle free their slots in the same transaction.
      const capacity = this.running ? Math.max(this.concurrency - this.inFlight + batch.length, 0) : 0;
      if (batch.length === 0 && capacity === 0) continue;
      const jobs = batch.length > 0 ? await this.writeBack(batch, capacity) : await this.claim(capacity);
      this.inFlight -= batch.length;
      for (const job of jobs) this.run(job);
      // A full claim suggests more due work; a full buffer needs another round trip.
      if ((capacity > 0 && jobs.length === capacity) || this.buffer.length > 0) this.wanted = true;
    }
  }

  private async claim(capacity: number): Promise<Job<P>[]> {
    try {
      return await this.queue.claim(this.workerId, capacity);
    } catch (err) {
      // Database trouble: the poll timer tries again.
      this.log.error({ err }, 'claim failed');
      return [];
    }
  }

  /** Writes outcomes back (and claims); retries transient errors, then leaves the jobs to lease expiry. */
  private async writeBack(batch: FinishItem<P>[], capacity: number): Promise<Job<P>[]> {
    for (let attempt = 1; ; attempt++) {
      try {
        const { states, jobs } = await this.queue.finishAndClaim(batch, this.workerId, capacity);
        this.warnStale(batch, states);
        return jobs;
      } catch (err) {
        if (attempt >= 5 || this.closed) {
          this.log.error({ err, jobs: batch.length }, 'could not write job outcomes; leaving them to lease expiry');
          return [];
        }
        this.log.warn({ err, attempt }, 'writing job outcomes failed; retrying');
        await sleep(100 * 2 ** attempt);
      }
    }
  }

  private warnStale(batch: FinishItem<P>[], states: (JobState | null)[]): void {
    states.forEach((s, i) => {
      if (s === null) this.log.warn({ jobId: batch[i]!.job.id }, 'outcome ignored: the lease was lost meanwhile');
    });
  }

  // ---------------------------------------------------------------- running

  private run(job: Job<P>): void {
    this.inFlight++;
    const controller = new AbortController();
    this.controllers.add(controller);
    // Abort a little before the lease passes, so a handler that honours the signal can still
    // have its outcome written before maintenance takes the job back.
    const timeoutMs = this.queue.options.timeoutMs;
    const timer = setTimeout(
      () => controller.abort(new Error(`job timeout (${timeoutMs} ms)`)),
      Math.max(timeoutMs - Math.min(timeoutMs * 0.1, 10_000), 1),
    );
    timer.unref();
    Promise.resolve()
      .then(() => this.handler(job, { signal: controller.signal }))
      .then(
        (result: unknown): JobOutcome =>
          validOutcome(result)
            ? result
            : { type: 'retry', error: `handler returned an invalid outcome: ${String(JSON.stringify(result))}` },
        (err: unknown): JobOutcome => ({ type: 'retry', error: errorMessage(err) }),
      )
      .then((outcome) => {
        clearTimeout(timer);
        this.controllers.delete(controller);
        this.buffered(job, outcome);
      });
  }

  private buffered(job: Job<P>, outcome: JobOutcome): void {
    if (this.closed) {
      // stop() gave up on this job; the pool may be closed. Lease expiry brings it back.
      this.inFlight--;
      this.log.warn({ jobId: job.id }, 'outcome after stop; the job is left to lease expiry');
      return;
    }
    this.buffer.push({ job, outcome });
    if (this.cycling) {
      this.wanted = true; // picked up right after the round trip in flight
    } else if (this.buffer.length >= this.flushBatch) {
      this.kick();
    } else if (this.flushMs > 0) {
      this.flushTimer ??= setTimeout(() => this.kick(), this.flushMs);
    } else {
      this.flushImmediate ??= setImmediate(() => this.kick());
    }
  }

  // ---------------------------------------------------------------- maintenance & wake-up

  private runMaintain(): Promise<void> {
    if (this.maintaining || !this.running) return this.maintaining ?? Promise.resolve();
    this.maintaining = this.queue
      .maintain()
      .then((r) => {
        if (r.expired > 0) {
          this.log.warn({ expired: r.expired }, 'took back jobs whose lease expired');
          this.kick();
        }
      })
      .catch((err: unknown) => this.log.error({ err }, 'queue maintenance failed'))
      .finally(() => {
        this.maintaining = null;
      });
    return this.maintaining;
  }

  // ---------------------------------------------------------------- idle tracking

  private whenIdle(fn: () => void): void {
    this.idleWaiters.push(fn);
    this.checkIdle();
  }

  private checkIdle(): void {
    if (this.inFlight > 0 || this.cycling || this.idleWaiters.length === 0) return;
    const waiters = this.idleWaiters;
    this.idleWaiters = [];
    for (const w of waiters) w();
  }
}
