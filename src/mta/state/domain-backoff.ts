import type { Clock } from '../../shared/clock.js';
import type { Coordination } from '../../shared/coord/types.js';
import type { MtaPolicy } from '../policy.js';

export interface Backoff {
  until: number;
  failures: number;
}

/**
 * Per-domain backoff after connection failures (phase 6): `threshold` failures in a row (no
 * MX reachable) start a backoff of baseMs, doubling per further failure up to maxMs. Any
 * answer from the domain's servers ends the streak.
 */
export class DomainBackoff {
  constructor(
    private readonly coord: Coordination,
    private readonly clock: Clock,
    private readonly policy: MtaPolicy,
  ) {}

  private streakKey = (d: string) => `mta:backoff:n:${d}`;
  private stateKey = (d: string) => `mta:backoff:${d}`;

  async current(domain: string): Promise<Backoff | null> {
    const b = await this.coord.getJson<Backoff>(this.stateKey(domain));
    return b && b.until > this.clock.now() ? b : null;
  }

  async recordFailure(domain: string): Promise<Backoff | null> {
    const p = this.policy.domainBackoff;
    const n = await this.coord.incr(this.streakKey(domain), 1, p.streakTtlMs);
    if (n < p.threshold) return null;
    const delay = Math.min(p.maxMs, p.baseMs * 2 ** (n - p.threshold));
    const b = { until: this.clock.now() + delay, failures: n };
    await this.coord.setJson(this.stateKey(domain), b, delay);
    return b;
  }

  async recordSuccess(domain: string): Promise<void> {
    if ((await this.coord.getCounter(this.streakKey(domain))) === 0) return;
    await this.coord.setCounter(this.streakKey(domain), 0, 1);
    await this.coord.setJson(this.stateKey(domain), null, 1);
  }
}
