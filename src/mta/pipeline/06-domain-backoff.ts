import { CONTINUE, defer, type Phase } from './types.js';

/** Phase 6: defer jobs for a domain whose servers recently could not be reached. */
export const domainBackoff: Phase = {
  name: 'domain_backoff',
  async run(ctx) {
    const b = await ctx.deps.backoff.current(ctx.job.domain);
    return b ? defer(b.until - ctx.deps.clock.now(), 'domain_backoff') : CONTINUE;
  },
};
