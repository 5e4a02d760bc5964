import { CONTINUE, defer, type Phase } from './types.js';

/**
 * Phase 6: defer jobs for a domain whose servers recently could not be reached. Per recipient
 * domain, so it holds for the whole queue group (scope `group`).
 */
export const domainBackoff: Phase = {
  name: 'domain_backoff',
  async run(ctx) {
    const b = await ctx.deps.backoff.current(ctx.job.domain);
    return b ? defer(b.until - ctx.deps.clock.now(), 'domain_backoff', { scope: 'group' }) : CONTINUE;
  },
};
