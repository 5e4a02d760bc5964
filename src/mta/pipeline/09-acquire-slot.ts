import type { SlotResult } from '../state/throttle.js';
import { routeIsGroupWide } from './07-resolve-pool.js';
import { CONTINUE, defer, type Phase } from './types.js';

/**
 * Phase 9: a slot in the (IP, destination) sliding window at the ISP profile's current rate.
 * The address select_ip chose is tried first; without a slot there, the pool's other eligible
 * addresses in round-robin order (the first with a slot sends). None has one → defer until
 * the earliest of them may (5 s when a window is full, the rest of a throttle block). Every
 * address of the pool refusing is a reason for the whole queue group when the group's jobs
 * all route through this pool (routeIsGroupWide).
 */
export const acquireSlot: Phase = {
  name: 'acquire_slot',
  needs: ['ip'],
  async run(ctx) {
    const { throttle, profiles } = ctx.deps;
    const profile = profiles.resolve(ctx.job.domain);
    let refused: Extract<SlotResult, { ok: false }> | null = null;
    for (const ip of ctx.candidates?.length ? ctx.candidates : [ctx.ip!]) {
      const r = await throttle.acquire(ip.address, profile, ctx.job.domain);
      if (r.ok) {
        ctx.ip = ip;
        ctx.throttleQuiet = r.quiet;
        return CONTINUE;
      }
      if (!refused || r.delayMs < refused.delayMs) refused = r;
    }
    // Only when every address was asked (candidates known) can the refusal speak for the group.
    const groupWide = !!ctx.candidates?.length && routeIsGroupWide(ctx);
    return defer(refused!.delayMs, refused!.reason, { scope: groupWide ? 'group' : 'job' });
  },
};
