import type { Backoff } from '../state/domain-backoff.js';
import { CONTINUE, defer, type Phase } from './types.js';

/**
 * Phase 6: defer jobs for a domain whose servers recently could not be reached. Per recipient
 * domain, so it holds for the whole queue group (scope `group`). The backoff is read when the
 * attempt starts (prefetch); whether it is still in force is decided now.
 */
export const domainBackoff: Phase = {
  name: 'domain_backoff',
  prefetch: (ctx) => ctx.deps.backoff.current(ctx.job.domain),
  async run(ctx, early) {
    const b = await ((early as Promise<Backoff | null> | undefined) ?? ctx.deps.backoff.current(ctx.job.domain));
    const now = ctx.deps.clock.now();
    return b && b.until > now ? defer(b.until - now, 'domain_backoff', { scope: 'group' }) : CONTINUE;
  },
};
