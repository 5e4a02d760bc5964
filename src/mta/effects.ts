import type { Logger } from '../shared/log.js';
import type { DeliveryResult } from './delivery/types.js';
import type { MtaEvents } from './events.js';
import type { MtaMetrics } from './metrics.js';
import type { PipelineContext } from './pipeline/types.js';
import type { MtaPolicy } from './policy.js';
import type { OrgBreaker } from './state/breaker.js';
import type { DomainBackoff } from './state/domain-backoff.js';
import type { IntelKind, SmtpIntel } from './state/smtp-intel.js';
import type { Throttle } from './state/throttle.js';
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
  suppression: Pick<SuppressionStore, 'add'>;
  logs: Pick<DeliveryLogStore, 'append'>;
  events: MtaEvents;
  metrics: MtaMetrics | null;
  profiles: { resolve(domain: string): IspProfile };
}

/** A 5xx that speaks about the sender (reputation, policy), not about the one recipient. */
export function isBlocking(policy: MtaPolicy, r: { reason?: string; enhancedCode?: string }): boolean {
  if (r.reason && policy.blockingReasons.includes(r.reason)) return true;
  return !r.reason && typeof r.enhancedCode === 'string' && r.enhancedCode.startsWith('5.7.');
}

/**
 * Applies a classified delivery result (mta.md → Pipeline, last paragraph): breaker marker,
 * throttle adaptation, SMTP intel, domain backoff, metrics, suppression on a hard bounce, the
 * delivery log row and the event to the backend. A `local` deferral (our side failed) is only
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

  if (result.status === 'sent') {
    run('breaker', () => d.breaker.record(job.organizationId, 'd', probe));
    run('throttle', () => d.throttle.onResult(ip.address, profile, job.domain, 'ok'));
    run('intel', () => d.intel.record(job.domain, 'ok'));
    run('backoff', () => d.backoff.recordSuccess(job.domain));
    run('log', () => d.logs.append({ ...base, status: 'sent', code: result.code, response: result.response, mxHost: result.mxHost }));
    // Events are not awaited: the notifier posts in the background and owns retries.
    emit(d, 'sent', {
      messageId: job.messageId,
      jobId: ctx.jobId,
      organizationId: job.organizationId,
      campaignId: job.campaignId ?? null,
      to: job.recipient,
      domain: job.domain,
      pool: ctx.pool,
      ip: ip.address,
      mxHost: result.mxHost,
      smtpCode: result.code,
      smtpResponse: result.response,
      tls: result.tls,
      attempt,
    });
  } else if (result.status === 'bounced') {
    const kind: IntelKind = isBlocking(d.policy, result) ? 'block' : 'ok';
    run('breaker', () => d.breaker.record(job.organizationId, 'b', probe));
    run('intel', () => d.intel.record(job.domain, kind));
    run('backoff', () => d.backoff.recordSuccess(job.domain));
    if (result.hard) {
      run('suppression', async () => {
        await d.suppression.add([job.recipient], 'hard_bounce', `bounce:${job.messageId}`);
        d.metrics?.suppressionsAdded.inc({ reason: 'hard_bounce' });
      });
    }
    run('log', () =>
      d.logs.append({ ...base, status: 'bounced', hard: result.hard, code: result.code, enhancedCode: result.enhancedCode, reason: result.reason, response: result.response, mxHost: result.mxHost }),
    );
    emit(d, 'bounced', bouncedEvent(ctx, { ...result, type: result.hard ? 'hard' : 'soft' }, attempt));
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

export function emit(d: Pick<EffectDeps, 'events' | 'log'>, event: Parameters<MtaEvents['emit']>[0], data: Record<string, unknown>): void {
  d.events.emit(event, data).catch((err) => d.log.error({ err, event }, 'event emission failed'));
}

export function bouncedEvent(
  ctx: PipelineContext,
  r: { type: 'hard' | 'soft'; reason: string; code?: number; enhancedCode?: string; response?: string; mxHost?: string },
  attempt: number,
): Record<string, unknown> {
  const job = ctx.job;
  return {
    messageId: job.messageId,
    jobId: ctx.jobId,
    organizationId: job.organizationId,
    campaignId: job.campaignId ?? null,
    to: job.recipient,
    domain: job.domain,
    type: r.type,
    hard: r.type === 'hard',
    reason: r.reason,
    smtpCode: r.code ?? null,
    enhancedCode: r.enhancedCode ?? null,
    smtpResponse: r.response ?? null,
    mxHost: r.mxHost ?? null,
    pool: ctx.pool ?? null,
    ip: ctx.ip?.address ?? null,
    attempt,
  };
}
