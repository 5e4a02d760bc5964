import { CONTINUE, drop, type Phase } from './types.js';

/** Phase 2: a suppressed recipient (any reason) is dropped silently, no retry. Answered from memory. */
export const suppression: Phase = {
  name: 'suppression',
  run(ctx) {
    return ctx.deps.suppression.has(ctx.job.recipient) ? drop('suppressed', 'suppressed') : CONTINUE;
  },
};
