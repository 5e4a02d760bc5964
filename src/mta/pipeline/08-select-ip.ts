import { MTA_EVENT } from '../../shared/contracts/mta.js';
import { randomUUID } from 'node:crypto';
import type { SendingIp } from '../pools.js';
import { routeIsGroupWide } from './07-resolve-pool.js';
import { CONTINUE, defer, type Phase, type PipelineContext } from './types.js';

const DAY_MS = 86_400_000;
/** The monitor's mark for a critical-zone listing (src/mta/reputation/monitor.ts BLOCK_REASON). */
const LISTED = 'dnsbl_listed';
// Lease owners must differ between calls and instances, or a second caller would renew, not lose.
const OWNER = randomUUID();
let seq = 0;

/**
 * Phase 8: round-robin over the pool's eligible addresses (configured, not marked blocked and
 * not failing the identity check, see IpStatus; the cursor is shared by the fleet). A dedicated IP is the only candidate and must pass the
 * same check. Never falls back to a blocked address: with none eligible the job defers and
 * `all_ips_blocked` is emitted (at most once per pool per policy.eventRepeatMs); the whole
 * queue group waits when every job of it is routed through this pool (routeIsGroupWide).
 * When every address is listed on the critical zone and MTA_FAILOVER_RELAY_URL is set, the job
 * goes through the relay instead (`viaRelay`).
 * Leaves the eligible addresses in round-robin order from the chosen one for acquire_slot.
 */
export const selectIp: Phase = {
  name: 'select_ip',
  needs: ['pool'],
  produces: ['ip'],
  async run(ctx) {
    const { pools, ipStatus, coord } = ctx.deps;
    const pool = ctx.pool!;
    const blocked = await ipStatus.blocked();
    let candidates: readonly SendingIp[];
    if (ctx.dedicatedIp) {
      const d = pools.find(ctx.dedicatedIp, pool) ?? pools.find(ctx.dedicatedIp);
      candidates = d ? [d] : [];
    } else candidates = pools.pools.get(pool) ?? [];
    const eligible = candidates.filter((c) => blocked[c.address] === undefined);
    // dnsbl_listed with a failover relay: the relay takes the traffic instead of halting.
    if (eligible.length === 0 && ctx.deps.failoverRelay && candidates.length > 0 && candidates.every((c) => blocked[c.address]?.reason === LISTED)) {
      ctx.ip = candidates[0];
      ctx.candidates = [candidates[0]];
      ctx.viaRelay = true;
      await announce(ctx, pool, candidates, blocked, true);
      return CONTINUE;
    }
    if (eligible.length === 0) {
      await announce(ctx, pool, candidates, blocked);
      return defer(ctx.deps.policy.noEligibleIpDeferMs, ctx.dedicatedIp ? 'dedicated_ip_blocked' : 'no_eligible_ip', {
        scope: routeIsGroupWide(ctx) ? 'group' : 'job',
      });
    }
    const start = eligible.length === 1 ? 0 : (await coord.incr(`mta:rr:${pool}`, 1, DAY_MS)) % eligible.length;
    ctx.ip = eligible[start];
    ctx.candidates = start === 0 ? eligible : [...eligible.slice(start), ...eligible.slice(0, start)];
    return CONTINUE;
  },
};

async function announce(
  ctx: PipelineContext,
  pool: string,
  candidates: readonly SendingIp[],
  blocked: Record<string, { reason: string; zone?: string; since: number }>,
  viaRelay = false,
): Promise<void> {
  const { coord, events, policy } = ctx.deps;
  const won = await coord.acquireLease(`mta:evt:all_ips_blocked:${pool}`, `${OWNER}:${++seq}`, policy.eventRepeatMs.all_ips_blocked);
  if (!won) return;
  await events.emit(MTA_EVENT.allIpsBlocked, {
    pool,
    dedicatedIp: ctx.dedicatedIp ?? null,
    viaRelay,
    // Every reason is an observation (a listing, a PTR, an operator's mark): no address is out
    // for want of an answer since the gating ruling, so the status is always measured.
    measured: true,
    addresses: candidates.map((c) => ({
      ip: c.address,
      reason: blocked[c.address]?.reason ?? 'not_configured',
      zone: blocked[c.address]?.zone ?? null,
      since: blocked[c.address] ? new Date(blocked[c.address]!.since).toISOString() : null,
    })),
  });
}
