import type { IntelVerdict } from '../state/smtp-intel.js';
import { CONTINUE, defer, type Phase } from './types.js';

/**
 * Phase 5: defer while recent SMTP replies show the recipient domain degraded or blocking us.
 * The verdict is per recipient domain, which every job of the queue group shares: the whole
 * group waits (scope `group`). The verdict is read when the attempt starts (prefetch); whether
 * it is still in force is decided now.
 */
export const smtpIntel: Phase = {
  name: 'smtp_intel',
  prefetch: (ctx) => ctx.deps.intel.verdict(ctx.job.domain),
  async run(ctx, early) {
    const v = await ((early as Promise<IntelVerdict | null> | undefined) ?? ctx.deps.intel.verdict(ctx.job.domain));
    const now = ctx.deps.clock.now();
    return v && v.until > now ? defer(v.until - now, `smtp_intel_${v.state}`, { scope: 'group' }) : CONTINUE;
  },
};
