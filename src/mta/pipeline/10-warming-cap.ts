import { CONTINUE, defer, type Phase } from './types.js';

/**
 * Phase 10: the per-IP daily warming cap at the IP's adaptive schedule day, the (IP, provider)
 * multiplier and the bulk pacing curve (mta.md → Warming cap behaviour). Reached → defer to the
 * next UTC day (pacing: until the curve releases the send), at most one hour.
 */
export const warmingCap: Phase = {
  name: 'warming_cap',
  needs: ['ip', 'pool'],
  async run(ctx) {
    const w = ctx.deps.warming;
    ctx.provider = await w.providerOf(ctx.job.domain);
    const r = await w.reserve(ctx.ip!.address, { provider: ctx.provider, pool: ctx.pool, jobId: ctx.jobId });
    if (!r.ok) return defer(r.delayMs, r.reason);
    if (r.release) ctx.reservations.push({ release: r.release, untilDelivered: false });
    return CONTINUE;
  },
};
