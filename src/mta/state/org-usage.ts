import type { Clock } from '../../shared/clock.js';
import type { Coordination } from '../../shared/coord/types.js';
import type { MtaPolicy } from '../policy.js';
import type { OrgLimits } from '../stores/org-limits.js';
import { DAY_MS, HOUR_MS, dayStamp, hourStamp, utcDayStart, utcHourStart } from './keys.js';

export type ReserveResult =
  | { ok: true; release(): Promise<unknown> }
  | { ok: false; limit: 'daily' | 'hourly'; delayMs: number };

/**
 * Daily and hourly send counters per organization (phase 4). `persist:` keys: with memory
 * coordination they survive a restart through CoordPersistence. A send takes a slot up front
 * (so concurrent workers cannot overshoot the limit) and gives it back if it is not handed over.
 */
export class OrgUsage {
  constructor(
    private readonly coord: Coordination,
    private readonly clock: Clock,
    private readonly policy: MtaPolicy,
  ) {}

  private keys(orgId: string, now: number): [string, string] {
    return [`persist:mta:org:${orgId}:d:${dayStamp(now)}`, `persist:mta:org:${orgId}:h:${hourStamp(now)}`];
  }

  async reserve(orgId: string, limits: OrgLimits): Promise<ReserveResult> {
    const now = this.clock.now();
    const [dKey, hKey] = this.keys(orgId, now);
    const { dailyTtlMs, hourlyTtlMs } = this.policy.orgLimits;
    const [d, h] = await Promise.all([this.coord.incr(dKey, 1, dailyTtlMs), this.coord.incr(hKey, 1, hourlyTtlMs)]);
    if (d > limits.daily || h > limits.hourly) {
      await Promise.all([this.coord.incr(dKey, -1, dailyTtlMs), this.coord.incr(hKey, -1, hourlyTtlMs)]);
      if (d > limits.daily) return { ok: false, limit: 'daily', delayMs: utcDayStart(now) + DAY_MS - now };
      return { ok: false, limit: 'hourly', delayMs: utcHourStart(now) + HOUR_MS - now };
    }
    return {
      ok: true,
      release: () => Promise.all([this.coord.incr(dKey, -1, dailyTtlMs), this.coord.incr(hKey, -1, hourlyTtlMs)]),
    };
  }

  async usage(orgId: string): Promise<{ daily: number; hourly: number; dailyResetsAt: number; hourlyResetsAt: number }> {
    const now = this.clock.now();
    const [daily, hourly] = await this.coord.getCounters(this.keys(orgId, now));
    return { daily, hourly, dailyResetsAt: utcDayStart(now) + DAY_MS, hourlyResetsAt: utcHourStart(now) + HOUR_MS };
  }
}
