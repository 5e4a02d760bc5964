import { CONTINUE, defer, type Phase } from './types.js';

/** Phase 10: the per-IP daily warming cap; reached → defer to the next UTC day, at most one hour. */
export const warmingCap: Phase = {
  name: 'warming_cap',
  needs: ['ip'],
  async run(ctx) {
    const r = await ctx.deps.warming.reserve(ctx.ip!.address);
    if (!r.ok) return defer(r.delayMs, 'warming_cap');
    if (r.release) ctx.reservations.push({ release: r.release, untilDelivered: false });
    return CONTINUE;
  },
};
