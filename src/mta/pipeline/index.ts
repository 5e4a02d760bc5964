import { contentScreening } from './01-content-screening.js';
import { suppression } from './02-suppression.js';
import { circuitBreaker } from './03-circuit-breaker.js';
import { orgLimit } from './04-org-limit.js';
import { smtpIntel } from './05-smtp-intel.js';
import { domainBackoff } from './06-domain-backoff.js';
import { resolvePool } from './07-resolve-pool.js';
import { selectIp } from './08-select-ip.js';
import { acquireSlot } from './09-acquire-slot.js';
import { warmingCap } from './10-warming-cap.js';
import type { Phase, PhaseResult, PipelineContext } from './types.js';

export * from './types.js';

/** The ten pre-send phases in the spec's fixed order. The order is this array and nothing else. */
export const PHASES: readonly Phase[] = [
  contentScreening,
  suppression,
  circuitBreaker,
  orgLimit,
  smtpIntel,
  domainBackoff,
  resolvePool,
  selectIp,
  acquireSlot,
  warmingCap,
];

/** Throws when a phase needs a context value (pool, ip) that no earlier phase produces. */
export function validateOrder(phases: readonly Phase[]): void {
  const available = new Set<string>();
  const names = new Set<string>();
  for (const p of phases) {
    if (names.has(p.name)) throw new Error(`pipeline: phase ${p.name} appears twice`);
    names.add(p.name);
    for (const need of p.needs ?? []) {
      if (!available.has(need)) throw new Error(`pipeline: phase ${p.name} needs "${need}" but no earlier phase produces it`);
    }
    for (const prod of p.produces ?? []) available.add(prod);
  }
}

validateOrder(PHASES);

export type PipelineOutcome =
  | { type: 'continue' }
  /**
   * `delayMs` has the jitter applied; `baseDelayMs` is the phase's own figure. `scope: 'group'`:
   * the reason holds for the job's whole queue group (see PhaseResult).
   */
  | { type: 'defer'; phase: string; delayMs: number; baseDelayMs: number; reason: string; scope?: 'group' }
  | { type: 'drop'; phase: string; status: 'screened' | 'suppressed'; reason: string };

/** `delayMs` ± fraction, uniformly (random in [0, 1)); never negative. */
export function jitter(delayMs: number, fraction: number, random: () => number): number {
  return Math.max(0, Math.round(delayMs * (1 + fraction * (2 * random() - 1))));
}

/** Called once per phase that ran, with its result (metrics). */
export type PhaseObserver = (phase: Phase, result: PhaseResult) => void;

/**
 * Runs the phases in order until one does not continue. When the attempt stops short of
 * delivery (defer, drop, or a phase throwing) every hold taken by earlier phases is released.
 */
export async function runPipeline(
  ctx: PipelineContext,
  phases: readonly Phase[] = PHASES,
  observe?: PhaseObserver,
): Promise<PipelineOutcome> {
  // Reads that depend on the job alone start together (Phase.prefetch); a phase that does not
  // run leaves its read unused, so a failed one must not count as an unhandled rejection.
  let early: (Promise<unknown> | undefined)[] | undefined;
  for (let i = 0; i < phases.length; i++) {
    const p = phases[i]!.prefetch;
    if (!p) continue;
    const read = p(ctx);
    read.catch(() => {});
    (early ??= new Array<Promise<unknown> | undefined>(phases.length))[i] = read;
  }
  for (let i = 0; i < phases.length; i++) {
    const phase = phases[i]!;
    let result: PhaseResult;
    try {
      const r = phase.run(ctx, early?.[i]);
      // Most phases answer synchronously or from memory: skip the await when there is no promise.
      result = r instanceof Promise ? await r : r;
    } catch (err) {
      await releaseAll(ctx, false);
      throw err;
    }
    observe?.(phase, result);
    if (result.type === 'continue') continue;
    await releaseAll(ctx, false);
    if (result.type === 'drop') return { type: 'drop', phase: phase.name, status: result.status, reason: result.reason };
    const { policy, random } = ctx.deps;
    return {
      type: 'defer',
      phase: phase.name,
      baseDelayMs: result.delayMs,
      delayMs: jitter(result.delayMs, policy.deferJitter, random),
      reason: result.reason,
      ...(result.scope === 'group' ? { scope: 'group' as const } : {}),
    };
  }
  return { type: 'continue' };
}

/** Releases holds: all of them, or (`deliveredOnly`) those kept only until a hand-over. */
export async function releaseAll(ctx: PipelineContext, untilDeliveredOnly: boolean): Promise<void> {
  const keep: typeof ctx.reservations = [];
  for (const r of ctx.reservations.splice(0).reverse()) {
    if (untilDeliveredOnly && !r.untilDelivered) keep.push(r);
    else await r.release().catch(() => {});
  }
  ctx.reservations.push(...keep.reverse());
}
