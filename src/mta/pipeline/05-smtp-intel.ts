import { CONTINUE, defer, type Phase } from './types.js';

/**
 * Phase 5: defer while recent SMTP replies show the recipient domain degraded or blocking us.
 * The verdict is per recipient domain, which every job of the queue group shares: the whole
 * group waits (scope `group`).
 */
export const smtpIntel: Phase = {
  name: 'smtp_intel',
  async run(ctx) {
    const v = await ctx.deps.intel.verdict(ctx.job.domain);
    return v ? defer(v.until - ctx.deps.clock.now(), `smtp_intel_${v.state}`, { scope: 'group' }) : CONTINUE;
  },
};
