/**
 * Runs a queue's jobs: claims up to `concurrency - inFlight` jobs in one round trip, runs the
 * handlers concurrently and writes their outcomes back in batches (a small buffer flushed
 * while the previous flush is in flight or after `flushMs`, so a burst of finishes costs one
 * round trip). Wake-ups: LISTEN on a dedicated connection (enqueue NOTIFYs), every finish
 * (the freed group may have more work), and polling every `pollMs` as the fallback (deferred
 * jobs becoming due, lost notifications).
 *
 * Crash safety: an outcome counts only once its flush commits. A worker killed before that
 * leaves the job active with a lease; maintain() takes it back when the lease passes.
 */
import { hostname } from 'node:os';
import pg from 'pg';
import { randomString } from '../crypto.js';
import { silentLogger, type Logger } from '../log.js';
import { QUEUE_CHANNEL, type FinishItem, type Queue } from './queue.js';
import type { Job, JobOutcome } from './types.js';

export interface HandlerContext {
  /** Aborted when the job's timeout passes (its lease is about to expire) or the worker stops without waiting. */
  signal: AbortSignal;
}

export type JobHandler<P> = (job: Job<P>, ctx: HandlerContext) => Promise<JobOutcome>;

export interface WorkerOptions<P> {
  queue: Queue<P>;
  handler: JobHandler<P>;
  /** Jobs run at once (also the claim batch size). */
  concurrency: number;
  /** Fallback polling interval; default 1000 ms. */
  pollMs?: number;
  workerId?: string;
  log?: Logger;
  /** Lease expiry + retention interval; default 5000 ms, 0 disables. */
  maintainMs?: number;
  /** How long a finished outcome may wait for company before it is written; default 2 ms. */
  flushMs?: number;
  /** Outcomes per finish round trip; default max(concurrency, 50). */
  flushBatch?: number;
  /** LISTEN for enqueue notifications; default true. */
  listen?: boolean;
}

interface Buffered<P> extends FinishItem<P> {
  done: () => void;
}

const errorMessage = (err: unknown): string =>
  err instanceof Error ? err.message || err.name : typeof err === 'string' ? err : JSON.stringify(err) ?? String(err);

function validOutcome(o: unknown): o is JobOutcome {
  if (typeof o !== 'object' || o === null) return false;
  const t = (o as { type?: unknown }).type;
  return t === 'complete' || t === 'retry' || t === 'defer' || t === 'fail';
}

export class Worker<P = unknown> {
  readonly workerId: string;
  private readonly queue: Queue<P>;
  private readonly handler: JobHandler<P>;
  private readonly concurrency: number;
  private readonly pollMs: number;
  private readonly maintainMs: number;
  private readonly flushMs: number;
  private readonly flushBatch: number;
  private readonly listenEnabled: boolean;
  private readonly log: Logger;

  private running = false;
  /** Set once stop() returns: late outcomes are left to lease expiry (the pool may be gone). */
  private closed = false;
  private inFlight = 0;
  private claiming: Promise<void> | null = null;
  private claimAgain = false;
  private buffer: Buffered<P>[] = [];
  private flushing: Promise<void> | null = null;
  private flushTimer: NodeJS.Timeout | undefined;
  private pollTimer: NodeJS.Timeout | undefined;
  private maintainTimer: NodeJS.Timeout | undefined;
  private maintaining: Promise<void> | null = null;
  private reconnectTimer: NodeJS.Timeout | undefined;
  private listener: pg.Client | undefined;
  private readonly controllers = new Set<AbortController>();
  private idleWaiters: (() => void)[] = [];

  constructor(opts: WorkerOptions<P>) {
    if (!Number.isInteger(opts.concurrency) || opts.concurrency < 1) throw new Error('concurrency must be a positive integer');
    this.queue = opts.queue;
    this.handler = opts.handler;
    this.concurrency = opts.concurrency;
    this.pollMs = opts.pollMs ?? 1000;
    this.maintainMs = opts.maintainMs ?? 5000;
    this.flushMs = opts.flushMs ?? 2;
    this.flushBatch = opts.flushBatch ?? Math.max(opts.concurrency, 50);
    this.listenEnabled = opts.listen ?? true;
    this.workerId = opts.workerId ?? `${hostname()}:${process.pid}:${randomString(6)}`;
    this.log = (opts.log ?? silentLogger).child({ queue: opts.queue.name, worker: this.workerId });
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
    if (this.listenEnabled) await this.connectListener();
    this.pollTimer = setInterval(() => this.pump(), this.pollMs);
    this.pollTimer.unref();
    if (this.maintainMs > 0) {
      this.maintainTimer = setInterval(() => void this.runMaintain(), this.maintainMs);
      this.maintainTimer.unref();
    }
    this.pump();
  }

  /**
   * Stops claiming. With drain (default) waits up to timeoutMs for in-flight jobs to finish
   * and be written back; jobs still running after that are left to lease expiry.
   */
  async stop(opts: { drain?: boolean; timeoutMs?: number } = {}): Promise<void> {
    const drain = opts.drain ?? true;
    this.running = false;
    clearInterval(this.pollTimer);
    clearInterval(this.maintainTimer);
    clearTimeout(this.reconnectTimer);
    const listener = this.listener;
    this.listener = undefined;
    if (listener) await listener.end().catch(() => {});

    // A claim in progress may still hand us jobs: they run (they are ours now).
    await this.claiming;
    if (drain) {
      const idle = new Promise<void>((resolve) => this.whenIdle(resolve));
      let timer: NodeJS.Timeout | undefined;
      const timedOut = new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(true), opts.timeoutMs ?? 30_000);
      });
      const late = await Promise.race([idle.then(() => false), timedOut]);
      clearTimeout(timer);
      if (late) this.log.warn({ inFlight: this.inFlight }, 'drain timed out; leaving running jobs to lease expiry');
    }
    for (const c of this.controllers) c.abort(new Error('worker stopped'));
    // Outcomes already produced are written before we let go of the pool.
    await this.flushNow();
    await this.maintaining;
    this.closed = true;
  }

  // ---------------------------------------------------------------- claiming

  private pump(): void {
    if (!this.running) return;
    if (this.claiming) {
      // Woken while a claim is in flight: its snapshot may predate the news, claim again after.
      this.claimAgain = true;
      return;
    }
    const capacity = this.concurrency - this.inFlight;
    if (capacity <= 0) return;
    this.claimAgain = false;
    this.claiming = this.claimBatch(capacity).finally(() => {
      this.claiming = null;
      if (this.claimAgain) this.pump();
      this.checkIdle();
    });
  }

  private async claimBatch(capacity: number): Promise<void> {
    let jobs: Job<P>[];
    try {
      jobs = await this.queue.claim(this.workerId, capacity);
    } catch (err) {
      // Database trouble: the poll timer tries again.
      this.log.error({ err }, 'claim failed');
      return;
    }
    for (const job of jobs) void this.run(job);
    // A full batch suggests more due work: claim again as soon as there is room.
    if (jobs.length === capacity) this.claimAgain = true;
  }

  // ---------------------------------------------------------------- running

  private async run(job: Job<P>): Promise<void> {
    this.inFlight++;
    const controller = new AbortController();
    this.controllers.add(controller);
    const timer = setTimeout(
      () => controller.abort(new Error(`job timeout (${this.queue.options.timeoutMs} ms)`)),
      this.queue.options.timeoutMs,
    );
    timer.unref();
    let outcome: JobOutcome;
    try {
      const result: unknown = await Promise.resolve().then(() => this.handler(job, { signal: controller.signal }));
      outcome = validOutcome(result)
        ? result
        : { type: 'retry', error: `handler returned an invalid outcome: ${JSON.stringify(result)}` };
    } catch (err) {
      outcome = { type: 'retry', error: errorMessage(err) };
    } finally {
      clearTimeout(timer);
      this.controllers.delete(controller);
    }
    await this.finish(job, outcome);
    this.inFlight--;
    this.pump();
    this.checkIdle();
  }

  private finish(job: Job<P>, outcome: JobOutcome): Promise<void> {
    if (this.closed) {
      this.log.warn({ jobId: job.id }, 'outcome after stop; the job is left to lease expiry');
      return Promise.resolve();
    }
    return new Promise<void>((done) => {
      this.buffer.push({ job, outcome, done });
      if (this.flushing) return; // the running flush loop picks it up
      if (this.buffer.length >= this.flushBatch) {
        void this.flushNow();
      } else if (!this.flushTimer) {
        this.flushTimer = setTimeout(() => void this.flushNow(), this.flushMs);
      }
    });
  }

  /** Writes buffered outcomes; one flush loop at a time, which batches whatever arrives meanwhile. */
  private flushNow(): Promise<void> {
    clearTimeout(this.flushTimer);
    this.flushTimer = undefined;
    if (this.flushing) return this.flushing;
    if (this.buffer.length === 0) return Promise.resolve();
    this.flushing = (async () => {
      while (this.buffer.length > 0) {
        const batch = this.buffer.splice(0, this.flushBatch);
        await this.writeOutcomes(batch);
        for (const b of batch) b.done();
      }
    })().finally(() => {
      this.flushing = null;
    });
    return this.flushing;
  }

  private async writeOutcomes(batch: Buffered<P>[]): Promise<void> {
    // Transient errors: retry for a while; after that the jobs stay active and come back
    // through lease expiry (never lost, possibly run again).
    for (let attempt = 1; ; attempt++) {
      try {
        const states = await this.queue.applyMany(batch);
        states.forEach((s, i) => {
          if (s === null) this.log.warn({ jobId: batch[i]!.job.id }, 'outcome ignored: the lease was lost meanwhile');
        });
        return;
      } catch (err) {
        if (attempt >= 5) {
          this.log.error({ err, jobs: batch.length }, 'could not write job outcomes; leaving them to lease expiry');
          return;
        }
        this.log.warn({ err, attempt }, 'writing job outcomes failed; retrying');
        await new Promise((r) => setTimeout(r, 200 * 2 ** attempt));
      }
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
          this.pump();
        }
      })
      .catch((err: unknown) => this.log.error({ err }, 'queue maintenance failed'))
      .finally(() => {
        this.maintaining = null;
      });
    return this.maintaining;
  }

  private async connectListener(): Promise<void> {
    // A dedicated client (not a pool slot): it lives as long as the worker.
    const client = new pg.Client(this.queue.db.options);
    client.on('notification', (msg) => {
      if (msg.payload === this.queue.name) this.pump();
    });
    client.on('error', (err) => {
      this.log.warn({ err }, 'LISTEN connection lost; polling until it is back');
      if (this.listener === client) this.listener = undefined;
      client.end().catch(() => {});
      this.scheduleReconnect();
    });
    try {
      await client.connect();
      await client.query(`LISTEN ${QUEUE_CHANNEL}`);
    } catch (err) {
      this.log.warn({ err }, 'LISTEN failed; polling until it works');
      client.end().catch(() => {});
      this.scheduleReconnect();
      return;
    }
    if (!this.running) {
      await client.end().catch(() => {});
      return;
    }
    this.listener = client;
    this.pump(); // notifications sent while we were not listening are lost
  }

  private scheduleReconnect(): void {
    if (!this.running || this.reconnectTimer) return;
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = undefined;
      if (this.running && !this.listener) void this.connectListener();
    }, Math.max(this.pollMs, 1000));
    this.reconnectTimer.unref();
  }

  // ---------------------------------------------------------------- idle tracking

  private whenIdle(fn: () => void): void {
    this.idleWaiters.push(fn);
    this.checkIdle();
  }

  private checkIdle(): void {
    if (this.inFlight > 0 || this.claiming || this.idleWaiters.length === 0) return;
    const waiters = this.idleWaiters;
    this.idleWaiters = [];
    for (const w of waiters) w();
  }
}
