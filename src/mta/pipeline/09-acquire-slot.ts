import { CONTINUE, defer, type Phase } from './types.js';

/** Phase 9: a slot in the (IP, destination) sliding window at the ISP profile's current rate; none → defer 5 s. */
export const acquireSlot: Phase = {
  name: 'acquire_slot',
  needs: ['ip'],
  async run(ctx) {
    const { throttle, profiles } = ctx.deps;
    const r = await throttle.acquire(ctx.ip!.address, profiles.resolve(ctx.job.domain), ctx.job.domain);
    return r.ok ? CONTINUE : defer(r.delayMs, r.reason);
  },
};
