import { CONTINUE, defer, type Phase } from './types.js';

/** Phase 4: daily and hourly send limits per organization; defer to midnight UTC or the next hour. */
export const orgLimit: Phase = {
  name: 'org_limit',
  async run(ctx) {
    const { deps, job } = ctx;
    const r = await deps.orgUsage.reserve(job.organizationId, deps.orgLimits.limitsFor(job.organizationId));
    if (!r.ok) return defer(r.delayMs, `org_limit_${r.limit}`);
    ctx.reservations.push({ release: r.release, untilDelivered: true });
    return CONTINUE;
  },
};
