import { CONTINUE, type Phase, type PipelineContext, type PipelineDeps } from './types.js';

/** The pool of a job requesting `ipPool` when no organization rule applies. */
export function poolWithoutRule(deps: Pick<PipelineDeps, 'pools' | 'policy'>, ipPool: string): string {
  const { pools, policy } = deps;
  if (pools.has(ipPool)) return ipPool;
  if (pools.has(policy.defaultPool)) return policy.defaultPool;
  return pools.pools.keys().next().value!;
}

/**
 * Phase 7: the organization's pool rule, then the job's ipPool, then the default pool (the
 * policy's, else the first configured). A rule's dedicated IP bypasses round-robin in select_ip.
 */
export const resolvePool: Phase = {
  name: 'resolve_pool',
  produces: ['pool'],
  run(ctx) {
    const { pools, poolRules } = ctx.deps;
    const rule = poolRules.ruleFor(ctx.job.organizationId);
    if (rule && pools.has(rule.pool)) {
      ctx.pool = rule.pool;
      if (rule.dedicatedIp) ctx.dedicatedIp = rule.dedicatedIp;
    } else ctx.pool = poolWithoutRule(ctx.deps, ctx.job.ipPool);
    return CONTINUE;
  },
};

/**
 * True when every job of this job's queue group (`<ipPool>:<domain>`, any organization) is
 * routed like this one: the pool the group's ipPool resolves to, no dedicated IP, and no
 * organization rule (of any organization: we cannot tell whose jobs the group holds) that
 * routes elsewhere. Only then does a pool-level reason (no eligible address, no throttle slot
 * on any address) hold for the whole group.
 */
export function routeIsGroupWide(ctx: PipelineContext): boolean {
  if (ctx.pool === undefined || ctx.dedicatedIp) return false;
  const { pools, poolRules } = ctx.deps;
  if (ctx.pool !== poolWithoutRule(ctx.deps, ctx.job.ipPool)) return false;
  for (const r of poolRules.rules()) {
    if (pools.has(r.pool) && (r.pool !== ctx.pool || r.dedicatedIp)) return false;
  }
  return true;
}
