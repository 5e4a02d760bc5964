import type { Clock } from '../../shared/clock.js';
import type { Coordination } from '../../shared/coord/types.js';
import type { MtaPolicy } from '../policy.js';

/** How a delivery result reads for the destination's health. */
export type IntelKind = 'ok' | 'temp' | 'block';
const KINDS: IntelKind[] = ['ok', 'temp', 'block'];

export interface IntelVerdict {
  state: 'degraded' | 'blocking';
  until: number;
  rate: number;
  sample: number;
}

/**
 * SMTP response intelligence per recipient domain (phase 5). Results are counted in
 * one-minute buckets over a sliding window; after each bad result the window is evaluated and
 * a verdict with an expiry is stored, which the phase reads with a single lookup.
 * Recipient-specific 5xx (unknown user, full mailbox) do not count against the domain.
 */
export class SmtpIntel {
  constructor(
    private readonly coord: Coordination,
    private readonly clock: Clock,
    private readonly policy: MtaPolicy,
  ) {}

  private verdictKey = (domain: string) => `mta:intel:v:${domain}`;

  async verdict(domain: string): Promise<IntelVerdict | null> {
    const v = await this.coord.getJson<IntelVerdict>(this.verdictKey(domain));
    return v && v.until > this.clock.now() ? v : null;
  }

  async record(domain: string, kind: IntelKind): Promise<IntelVerdict | null> {
    const p = this.policy.smtpIntel;
    const now = this.clock.now();
    const bucket = Math.floor(now / p.bucketMs);
    const key = `mta:intel:${domain}:${bucket}:${kind}`;
    // A success is only ever a denominator, and a busy domain has one per message: it may reach
    // the fleet up to a second late (the window is minutes long), summed with the others.
    if (kind === 'ok') {
      this.coord.addLater(key, 1, p.windowMs + p.bucketMs);
      return null;
    }
    await this.coord.incr(key, 1, p.windowMs + p.bucketMs);
    const buckets = Math.ceil(p.windowMs / p.bucketMs);
    const keys: string[] = [];
    for (let b = bucket - buckets + 1; b <= bucket; b++) for (const k of KINDS) keys.push(`mta:intel:${domain}:${b}:${k}`);
    const values = await this.coord.getCounters(keys);
    const sum = { ok: 0, temp: 0, block: 0 };
    values.forEach((v, i) => (sum[KINDS[i % KINDS.length]!] += v));
    const total = sum.ok + sum.temp + sum.block;
    if (total < p.minSample) return null;
    let verdict: IntelVerdict | null = null;
    if (sum.block / total >= p.blockingRate) verdict = { state: 'blocking', until: now + p.blockingDeferMs, rate: sum.block / total, sample: total };
    else if (sum.temp / total >= p.degradedRate) verdict = { state: 'degraded', until: now + p.degradedDeferMs, rate: sum.temp / total, sample: total };
    if (verdict) await this.coord.setJson(this.verdictKey(domain), verdict, verdict.until - now);
    return verdict;
  }
}
