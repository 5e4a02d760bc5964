import { CONTINUE, type Phase } from './types.js';

/**
 * Phase 7: the organization's pool rule, then the job's ipPool, then the default pool (the
 * policy's, else the first configured). A rule's dedicated IP bypasses round-robin in select_ip.
 */
export const resolvePool: Phase = {
  name: 'resolve_pool',
  produces: ['pool'],
  run(ctx) {
    const { pools, poolRules, policy } = ctx.deps;
    const rule = poolRules.ruleFor(ctx.job.organizationId);
    if (rule && pools.has(rule.pool)) {
      ctx.pool = rule.pool;
      if (rule.dedicatedIp) ctx.dedicatedIp = rule.dedicatedIp;
    } else if (pools.has(ctx.job.ipPool)) ctx.pool = ctx.job.ipPool;
    else if (pools.has(policy.defaultPool)) ctx.pool = policy.defaultPool;
    else ctx.pool = pools.pools.keys().next().value!;
    return CONTINUE;
  },
};
