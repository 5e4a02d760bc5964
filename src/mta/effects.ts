import type { Logger } from '../shared/log.js';
import type { DeliveryResult } from './delivery/types.js';
import { MTA_EVENT } from '../shared/contracts/mta.js';
import type { OutboxRelay } from './outbox/relay.js';
import { resultEventId, type OutboxEvent } from './outbox/store.js';
import type { MtaMetrics } from './metrics.js';
import type { PipelineContext } from './pipeline/types.js';
import type { MtaPolicy } from './policy.js';
import type { OrgBreaker } from './state/breaker.js';
import type { DomainBackoff } from './state/domain-backoff.js';
import type { IntelKind, SmtpIntel } from './state/smtp-intel.js';
import type { Throttle } from './state/throttle.js';
import type { VolumePressureRules } from './state/volume-pressure.js';
import type { Warming } from './state/warming.js';
import type { DeliveryLogStore } from './stores/delivery-logs.js';
import type { IspProfile } from './stores/isp-profiles.js';
import type { SuppressionStore } from './stores/suppression.js';

export interface EffectDeps {
  policy: MtaPolicy;
  log: Logger;
  breaker: OrgBreaker;
  throttle: Throttle;
  intel: SmtpIntel;
  backoff: DomainBackoff;
  suppression: Pick<SuppressionStore, 'add' | 'get'>;
  logs: Pick<DeliveryLogStore, 'append'>;
  /** Builds the events that travel with delivery-log rows. */
  events: Pick<OutboxRelay, 'event'>;
  metrics: MtaMetrics | null;
  profiles: { resolve(domain: string): IspProfile };
  /** Adaptive warming: results per (IP, provider) and volume pressure (absent in tests that do not need it). */
  warming?: Warming;
  pressure?: VolumePressureRules;
}

/** A 5xx that speaks about the sender (reputation, policy), not about the one recipient. */
export function isBlocking(policy: MtaPolicy, r: { reason?: string; enhancedCode?: string }): boolean {
  if (r.reason && policy.blockingReasons.includes(r.reason)) return true;
  return !r.reason && typeof r.enhancedCode === 'string' && r.enhancedCode.startsWith('5.7.');
}

/**
 * Applies a classified delivery result (mta.md → Pipeline, last paragraph): breaker marker,
 * throttle adaptation, SMTP intel, domain backoff, metrics, suppression on a hard bounce, the
 * delivery log row with its event to the backend (one statement: the outbox). A `local` deferral (our side failed) is only
 * logged and counted. The send has happened: no failure in here may
 * make the job run again, so each effect is isolated and only logged when it fails.
 */
export async function applyEffects(d: EffectDeps, ctx: PipelineContext, result: DeliveryResult, attempt: number, at: number): Promise<void> {
  const job = ctx.job;
  const ip = ctx.ip!;
  const profile = d.profiles.resolve(job.domain);
  const probe = ctx.breakerProbe?.epoch;
  const base = {
    messageId: job.messageId,
    jobId: ctx.jobId,
    organizationId: job.organizationId,
    recipient: job.recipient,
    domain: job.domain,
    pool: ctx.pool ?? null,
    ip: ip.address,
    attempt,
    at,
  };
  const effects: Promise<unknown>[] = [];
  const run = (name: string, p: () => Promise<unknown>) => effects.push(p().catch((err) => d.log.error({ err, effect: name, jobId: ctx.jobId }, 'delivery effect failed')));

  d.metrics?.sends.inc({ status: result.status, domain: profile.domain, pool: ctx.pool ?? 'none' });
  const w = d.warming;
  if (w && !(result.status === 'deferred' && (result.local || result.connectionFailure))) {
    run('warming', async () => {
      await w.learnMx(job.domain, result.mxHost);
      const provider = ctx.provider ?? (await w.providerOf(job.domain));
      const pressure = result.status === 'deferred' ? (d.pressure?.classify(result) ?? null) : null;
      if (pressure) d.metrics?.warmingPressure.inc({ verdict: pressure });
      await w.record(ip.address, provider, result.status, pressure, ctx.jobId);
    });
  }

  if (result.status === 'sent') {
    run('breaker', () => d.breaker.record(job.organizationId, 'd', probe));
    run('throttle', () => d.throttle.onResult(ip.address, profile, job.domain, 'ok', ctx.throttleQuiet));
    run('intel', () => d.intel.record(job.domain, 'ok'));
    run('backoff', () => d.backoff.recordSuccess(job.domain));
    // The log row and the `sent` event commit together (the outbox).
    run('log', () => d.logs.append({ ...base, status: 'sent', code: result.code, response: result.response, mxHost: result.mxHost }, sentEvent(d, ctx, result, attempt)));
  } else if (result.status === 'bounced') {
    const kind: IntelKind = isBlocking(d.policy, result) ? 'block' : 'ok';
    run('breaker', () => d.breaker.record(job.organizationId, 'b', probe));
    run('intel', () => d.intel.record(job.domain, kind));
    run('backoff', () => d.backoff.recordSuccess(job.domain));
    run('log', async () => {
      await d.logs.append(
        { ...base, status: 'bounced', hard: result.hard, code: result.code, enhancedCode: result.enhancedCode, reason: result.reason, response: result.response, mxHost: result.mxHost },
        bouncedEvent(d, ctx, { ...result, type: result.hard ? 'hard' : 'soft' }, attempt),
      );
      // After the event: suppressed first, a re-run after a crash would drop the job in phase 2
      // and its bounce would never be reported.
      if (result.hard) {
        await d.suppression.add([job.recipient], 'hard_bounce', `bounce:${job.messageId}`);
        d.metrics?.suppressionsAdded.inc({ reason: 'hard_bounce' });
      }
    });
  } else {
    if (result.local) {
      // Our side failed before any remote server answered (no DKIM key, resolver, pool cap,
      // shutdown): it says nothing about the destination, so no throttle, intel or backoff.
    } else if (result.connectionFailure) {
      run('backoff', () => d.backoff.recordFailure(job.domain));
    } else {
      run('throttle', () => d.throttle.onResult(ip.address, profile, job.domain, 'temp'));
      run('intel', () => d.intel.record(job.domain, 'temp'));
      run('backoff', () => d.backoff.recordSuccess(job.domain));
    }
    run('log', () =>
      d.logs.append({ ...base, status: 'deferred', code: result.code, enhancedCode: result.enhancedCode, reason: result.reason ?? null, response: result.response, mxHost: result.mxHost }),
    );
  }
  await Promise.all(effects);
}

/** What a job's result event says about its message. */
function messageRef(ctx: PipelineContext) {
  const job = ctx.job;
  return { messageId: job.messageId, jobId: ctx.jobId, organizationId: job.organizationId, campaignId: job.campaignId ?? null, recipient: job.recipient, domain: job.domain };
}

function sentEvent(d: Pick<EffectDeps, 'events'>, ctx: PipelineContext, r: Extract<DeliveryResult, { status: 'sent' }>, attempt: number): OutboxEvent | null {
  const job = ctx.job;
  return d.events.event(
    MTA_EVENT.sent,
    {
      ...messageRef(ctx),
      pool: ctx.pool ?? null,
      ip: ctx.ip!.address,
      mxHost: r.mxHost ?? null,
      smtpCode: r.code ?? null,
      smtpResponse: r.response ?? null,
      tls: r.tls,
      attempt,
    },
    resultEventId(job.organizationId, job.messageId, ctx.jobId),
  );
}

/** The job's result event when the pipeline dropped it unsent (suppressed or screened). */
export function droppedEvent(d: Pick<EffectDeps, 'events'>, ctx: PipelineContext, status: 'suppressed' | 'screened', reason: string, attempt: number): OutboxEvent | null {
  const job = ctx.job;
  return d.events.event(MTA_EVENT.dropped, { ...messageRef(ctx), status, reason, attempt }, resultEventId(job.organizationId, job.messageId, ctx.jobId));
}

/** The job's result event when it bounced or expired (one per job, whatever run reports it). */
export function bouncedEvent(
  d: Pick<EffectDeps, 'events'>,
  ctx: PipelineContext,
  r: { type: 'hard' | 'soft'; reason: string; code?: number; enhancedCode?: string; response?: string; mxHost?: string },
  attempt: number,
): OutboxEvent | null {
  const job = ctx.job;
  return d.events.event(
    MTA_EVENT.bounced,
    {
      ...messageRef(ctx),
      type: r.type,
      reason: r.reason,
      smtpCode: r.code ?? null,
      enhancedCode: r.enhancedCode ?? null,
      smtpResponse: r.response ?? null,
      mxHost: r.mxHost ?? null,
      pool: ctx.pool ?? null,
      ip: ctx.ip?.address ?? null,
      attempt,
    },
    resultEventId(job.organizationId, job.messageId, ctx.jobId),
  );
}
