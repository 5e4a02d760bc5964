import { CONTINUE, defer, type Phase } from './types.js';

/** Phase 3: while the organization's breaker is open every send defers; half-open lets the test sends through. */
export const circuitBreaker: Phase = {
  name: 'circuit_breaker',
  async run(ctx) {
    const r = await ctx.deps.breaker.admit(ctx.job.organizationId);
    if (!r.ok) return defer(r.delayMs, r.reason);
    if (r.probe) {
      ctx.breakerProbe = { epoch: r.probe.epoch };
      ctx.reservations.push({ release: r.probe.release, untilDelivered: true });
    }
    return CONTINUE;
  },
};
