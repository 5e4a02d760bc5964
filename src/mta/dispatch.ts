import { isRawJob, isStoredRawJob } from '../shared/contracts/mta.js';
import type { Clock } from '../shared/clock.js';
import type { Logger } from '../shared/log.js';
import type { JobHandler } from '../shared/queue/worker.js';
import type { Deliverer, DeliveryResult, OutboundMessage } from './delivery/types.js';
import { applyEffects, bouncedEvent, droppedEvent, type EffectDeps } from './effects.js';
import type { MtaJobPayload, MtaQueuedPayload } from './job.js';
import { MissingBodyError, type SubmissionBodies } from './submission/bodies.js';
import { MTA_QUEUE } from './queue.js';
import { PHASES, newContext, releaseAll, runPipeline, type PipelineContext, type PipelineDeps } from './pipeline/index.js';

export interface DispatchDeps {
  pipeline: PipelineDeps;
  effects: EffectDeps;
  deliverer: Deliverer;
  /** MTA_FAILOVER_RELAY_URL's deliverer, for jobs select_ip routed `viaRelay`. */
  failover?: Deliverer;
  clock: Clock;
  log: Logger;
  /** Submitted messages' stored octets (read back before the pipeline); without it such a job fails. */
  bodies?: SubmissionBodies;
  /** The queue's retry backoff (default: the MTA queue's), the base of deferral-aware retry. */
  backoffMs?: number[];
}

/** The message the engine sends; `sendId` is the queue job's id (tokens and provenance are keyed by it). */
export function toOutbound(job: MtaJobPayload, sendId: string): OutboundMessage {
  if (isRawJob(job)) {
    return { messageId: job.messageId, sendId, organizationId: job.organizationId, from: job.from, to: job.to, raw: job.raw, dkimDomain: job.dkimDomain, campaignId: job.campaignId ?? null };
  }
  return {
    messageId: job.messageId,
    sendId,
    organizationId: job.organizationId,
    from: job.from,
    to: job.to,
    subject: job.subject,
    html: job.html,
    text: job.text,
    replyTo: job.replyTo,
    headers: job.headers,
    dkimDomain: job.dkimDomain,
    campaignId: job.campaignId ?? null,
    ...(job.entity !== undefined ? { entity: job.entity } : {}),
  };
}

const summarize = (r: Extract<DeliveryResult, { status: 'deferred' }>) =>
  `${r.code ?? (r.connectionFailure ? 'connection' : 'temporary')}${r.enhancedCode ? ` ${r.enhancedCode}` : ''}: ${r.response}`.slice(0, 500);

/**
 * The MTA queue's job handler: claim → the ten phases → delivery → effects → queue outcome.
 *
 * - pipeline defer: back in the queue after the (jittered) delay, attempt given back; a
 *   group-wide reason (recipient domain degraded or backing off, no address of the pool
 *   eligible or with a throttle slot) also pauses the job's queue group for that delay, so
 *   its backlog is not claimed job by job only to defer
 * - pipeline drop: the job ends (`screened` / `suppressed` in the delivery log, with its
 *   `dropped` event to the backend in the same commit)
 * - sent / bounced: the job ends
 * - deferred delivery: retry by the queue's backoff; on the last attempt the job fails and a
 *   soft `bounced` event with reason `expired` goes to the backend
 */
export function createDispatcher(d: DispatchDeps): JobHandler<MtaQueuedPayload> {
  const metrics = d.effects.metrics;
  return async (job) => {
    let payload: MtaJobPayload;
    try {
      if (isStoredRawJob(job.payload) && !d.bodies) throw new MissingBodyError('no store of submitted message bodies');
      payload = d.bodies ? await d.bodies.hydrate(job.payload) : (job.payload as MtaJobPayload);
    } catch (err) {
      // Gone for good: nothing to send. A database error is retried like any engine error.
      if (!(err instanceof MissingBodyError)) throw err;
      d.log.error({ err, jobId: job.id }, 'submitted message body missing');
      metrics?.jobs.inc({ outcome: 'failed' });
      return { type: 'fail', error: err.message };
    }
    const ctx = newContext(d.pipeline, job.id, payload);
    const outcome = await runPipeline(ctx, PHASES, metrics?.observePhase);

    if (outcome.type === 'defer') {
      metrics?.jobs.inc({ outcome: 'deferred' });
      const reason = `${outcome.phase}: ${outcome.reason}`;
      return outcome.scope === 'group'
        ? { type: 'defer', delayMs: outcome.delayMs, reason, scope: 'group' }
        : { type: 'defer', delayMs: outcome.delayMs, reason };
    }
    const at = d.clock.now();
    if (outcome.type === 'drop') {
      metrics?.jobs.inc({ outcome: outcome.status });
      // A suppressed drop names the list entry's reason (read here, off the hot path: the phase's cache holds addresses only).
      const reason = outcome.status === 'suppressed' ? ((await d.effects.suppression.get(payload.recipient))?.reason ?? 'unknown') : outcome.reason;
      await d.effects.logs.append(
        {
          messageId: payload.messageId,
          jobId: job.id,
          organizationId: payload.organizationId,
          recipient: payload.recipient,
          domain: payload.domain,
          pool: null,
          ip: null,
          status: outcome.status,
          reason: outcome.status === 'suppressed' ? `suppressed: ${reason}` : reason,
          attempt: job.attempts,
          at,
        },
        droppedEvent(d.effects, ctx, outcome.status, reason, job.attempts),
      );
      return { type: 'complete' };
    }

    let result: DeliveryResult;
    const stop = metrics?.deliveryDuration.startTimer();
    try {
      const via = ctx.viaRelay && d.failover ? d.failover : d.deliverer;
      if (ctx.viaRelay) metrics?.failoverSends.inc({ pool: ctx.pool! });
      const message = toOutbound(payload, job.id);
      // A test send's epoch travels with the message (its provenance) to the report about it.
      if (ctx.breakerProbe) message.breakerEpoch = ctx.breakerProbe.epoch;
      result = await via.deliver(message, { pool: ctx.pool!, bindIp: ctx.ip!.address, ehloName: ctx.ip!.ehloName });
    } catch (err) {
      // The engine failed, not the recipient: treat as temporary, without touching the destination's
      // state; nothing was sent, so every reservation (the warming slot too) is given back.
      await releaseAll(ctx, false);
      d.log.error({ err, jobId: job.id }, 'delivery engine error');
      metrics?.jobs.inc({ outcome: 'error' });
      return { type: 'retry', error: `delivery engine error: ${(err as Error).message}` };
    } finally {
      stop?.();
    }

    // A remote deferral was an attempt at the destination and keeps its warming slot; a local one
    // (our side failed before any server answered) sent nothing and gives every reservation back.
    if (result.status === 'deferred') await releaseAll(ctx, !result.local);
    await applyEffects(d.effects, ctx, result, job.attempts, d.clock.now());

    if (result.status !== 'deferred') {
      metrics?.jobs.inc({ outcome: result.status });
      return { type: 'complete' };
    }
    const error = summarize(result);
    if (job.attempts < job.maxAttempts) {
      metrics?.jobs.inc({ outcome: 'retry' });
      const delayMs = await retryDelay(d, ctx, result, job.attempts);
      return delayMs === null ? { type: 'retry', error } : { type: 'retry', error, delayMs };
    }
    await expire(d, ctx, result, job.attempts);
    metrics?.jobs.inc({ outcome: 'failed' });
    return { type: 'fail', error: `attempts exhausted; last: ${error}` };
  };
}

/**
 * Deferral-aware retry (mta.md → Warming cap behaviour): while volume pressure is recorded for
 * the (IP, provider), the queue's backoff for this retry is doubled per recent event (×8, 4 h
 * at most). Null: the queue's own backoff.
 */
async function retryDelay(d: DispatchDeps, ctx: PipelineContext, r: Extract<DeliveryResult, { status: 'deferred' }>, attempt: number): Promise<number | null> {
  const w = d.effects.warming;
  if (!w || r.local || !ctx.ip || !ctx.provider) return null;
  const b = d.backoffMs ?? MTA_QUEUE.backoffMs;
  const base = b[Math.min(attempt, b.length) - 1]!;
  const delay = await w.retryDelay(ctx.ip.address, ctx.provider, base).catch(() => base);
  return delay === base ? null : delay;
}

/** The last attempt was deferred too: the message expires (soft bounce, Sisimai reason `expired`). */
async function expire(d: DispatchDeps, ctx: PipelineContext, r: Extract<DeliveryResult, { status: 'deferred' }>, attempt: number): Promise<void> {
  const job = ctx.job;
  const event = bouncedEvent(d.effects, ctx, { type: 'soft', reason: 'expired', code: r.code, enhancedCode: r.enhancedCode, response: r.response, mxHost: r.mxHost }, attempt);
  // Awaited: the job fails only once its log row and event are written (a crash before re-runs it).
  await d.effects.logs.append(
    {
      messageId: job.messageId,
      jobId: ctx.jobId,
      organizationId: job.organizationId,
      recipient: job.recipient,
      domain: job.domain,
      pool: ctx.pool ?? null,
      ip: ctx.ip?.address ?? null,
      status: 'failed',
      hard: false,
      code: r.code,
      enhancedCode: r.enhancedCode,
      reason: 'expired',
      response: r.response,
      mxHost: r.mxHost,
      attempt,
      at: d.clock.now(),
    },
    event,
  );
}
