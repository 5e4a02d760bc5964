import type { Clock } from '../../shared/clock.js';
import type { Coordination } from '../../shared/coord/types.js';
import type { MtaPolicy } from '../policy.js';

/** Send outcome markers in the ring buffer: delivered, bounced, complained. */
export type BreakerMarker = 'd' | 'b' | 'c';
export type BreakerStateName = 'closed' | 'open' | 'half_open';

export interface BreakerState {
  state: BreakerStateName;
  /** Increments on every transition; probe counters and transition guards are per epoch. */
  epoch: number;
  since: number;
  /** Open: how long until half-open. */
  cooldownMs: number;
  trip?: TripInfo;
  /**
   * Closed by clean test sends: until `until`, a bounce or complaint that arrives later for
   * one of them (tested `epoch`) still reopens, with the trip that opened it.
   */
  probation?: { epoch: number; until: number; trip?: TripInfo };
}

export interface TripInfo {
  window: 'fast' | 'slow';
  signal: 'bounce' | 'complaint';
  rate: number;
  threshold: number;
  sample: number;
}

export type AdmitResult =
  | { ok: true; probe: null }
  | { ok: true; probe: { epoch: number; release(): Promise<unknown> } }
  | { ok: false; delayMs: number; reason: string };

const CLOSED: BreakerState = { state: 'closed', epoch: 0, since: 0, cooldownMs: 0 };
const GUARD_TTL_MS = 24 * 3_600_000;
const COUNTER_TTL_MS = 24 * 3_600_000;

/**
 * Per-organization circuit breaker (mta.md → Circuit breaker). Shared state in the
 * coordination store: the marker ring (`mta:breaker:ring:<org>`), the state (`persist:`, so
 * it survives a restart) and per-epoch probe counters. Every transition is taken by exactly
 * one instance of a fleet: it must win a lease named after the epoch it leaves.
 */
export class OrgBreaker {
  private seq = 0;

  constructor(
    private readonly coord: Coordination,
    private readonly clock: Clock,
    private readonly policy: MtaPolicy,
    private readonly instanceId: string,
    private readonly hooks: {
      /** Closed → Open (emit `org.circuit_breaker`). */
      onTrip(orgId: string, state: BreakerState): void;
      onTransition?(orgId: string, state: BreakerState): void;
    },
  ) {}

  private stateKey = (org: string) => `persist:mta:breaker:${org}`;
  private ringKey = (org: string) => `mta:breaker:ring:${org}`;

  async state(orgId: string): Promise<BreakerState> {
    return (await this.coord.getJson<BreakerState>(this.stateKey(orgId))) ?? CLOSED;
  }

  /** Phase 3: may this organization send now? */
  async admit(orgId: string): Promise<AdmitResult> {
    let s = await this.state(orgId);
    if (s.state === 'closed') return { ok: true, probe: null };
    const now = this.clock.now();
    if (s.state === 'open') {
      const end = s.since + s.cooldownMs;
      if (now < end) return { ok: false, delayMs: end - now, reason: 'circuit_open' };
      // Cooldown over: the first send to look moves the breaker to half-open.
      s = await this.transition(orgId, s, { state: 'half_open', epoch: s.epoch + 1, since: now, cooldownMs: s.cooldownMs, trip: s.trip });
      // Another instance is mid-transition: look again shortly.
      if (s.state !== 'half_open') return { ok: false, delayMs: 1_000, reason: 'circuit_open' };
    }
    const b = this.policy.breaker;
    const probesKey = `mta:breaker:probes:${orgId}:${s.epoch}`;
    const taken = await this.coord.incr(probesKey, 1, COUNTER_TTL_MS);
    if (taken > b.halfOpenProbes) {
      await this.coord.incr(probesKey, -1, COUNTER_TTL_MS);
      return { ok: false, delayMs: b.halfOpenDeferMs, reason: 'circuit_half_open' };
    }
    return { ok: true, probe: { epoch: s.epoch, release: () => this.coord.incr(probesKey, -1, COUNTER_TTL_MS) } };
  }

  /**
   * Records a send outcome. `probeEpoch` is set for a half-open test send (at SMTP time, and
   * from its provenance for a DSN or complaint arriving later): a bounce or complaint reopens
   * (longer cooldown), also during the probation after the clean probes closed it; the last
   * of the clean probes closes.
   */
  async record(orgId: string, marker: BreakerMarker, probeEpoch?: number): Promise<void> {
    const b = this.policy.breaker;
    // Called together: one round trip, and the store still pushes before it reads the state.
    const [ring, s] = await Promise.all([this.coord.ringPush(this.ringKey(orgId), marker, b.ringSize), this.state(orgId)]);
    const now = this.clock.now();
    if (probeEpoch !== undefined && marker !== 'd' && s.state === 'closed' && s.probation?.epoch === probeEpoch && now < s.probation.until) {
      await this.transition(orgId, s, { state: 'open', epoch: s.epoch + 1, since: now, cooldownMs: b.reopenCooldownMs, trip: s.probation.trip });
      return;
    }
    if (s.state === 'half_open' && probeEpoch === s.epoch) {
      if (marker !== 'd') {
        await this.transition(orgId, s, { state: 'open', epoch: s.epoch + 1, since: now, cooldownMs: b.reopenCooldownMs, trip: s.trip });
        return;
      }
      const clean = await this.coord.incr(`mta:breaker:clean:${orgId}:${s.epoch}`, 1, COUNTER_TTL_MS);
      if (clean >= b.halfOpenProbes) {
        const probation = { epoch: s.epoch, until: now + b.probationMs, ...(s.trip ? { trip: s.trip } : {}) };
        const next = await this.transition(orgId, s, { state: 'closed', epoch: s.epoch + 1, since: now, cooldownMs: 0, probation });
        // Old markers would trip the fresh breaker again at once.
        if (next.state === 'closed' && next.epoch === s.epoch + 1) await this.coord.ringClear(this.ringKey(orgId));
      }
      return;
    }
    if (s.state !== 'closed') return;
    const trip = evaluate(this.policy, ring);
    if (!trip) return;
    const next: BreakerState = { state: 'open', epoch: s.epoch + 1, since: now, cooldownMs: b.cooldownMs, trip };
    const after = await this.transition(orgId, s, next);
    if (after === next) this.hooks.onTrip(orgId, next);
  }

  /** Resets an organization's breaker to closed (operator action, tests). */
  async reset(orgId: string): Promise<void> {
    await this.coord.ringClear(this.ringKey(orgId));
    const s = await this.state(orgId);
    await this.transition(orgId, s, { state: 'closed', epoch: s.epoch + 1, since: this.clock.now(), cooldownMs: 0 });
  }

  /** Moves from `from` to `to` if this instance wins the guard for `from.epoch`; returns the state now in force. */
  private async transition(orgId: string, from: BreakerState, to: BreakerState): Promise<BreakerState> {
    // A unique owner per call: two concurrent calls of one instance must not both win.
    const owner = `${this.instanceId}:${++this.seq}`;
    const won = await this.coord.acquireLease(`mta:breaker:guard:${orgId}:${from.epoch}`, owner, GUARD_TTL_MS);
    if (!won) return this.state(orgId);
    await this.coord.setJson(this.stateKey(orgId), to);
    this.hooks.onTransition?.(orgId, to);
    return to;
  }
}

/** The first window whose rate is strictly above its threshold, if the window has its minimum sample. */
export function evaluate(policy: MtaPolicy, ring: readonly string[]): TripInfo | null {
  for (const w of policy.breaker.windows) {
    const n = Math.min(w.size, ring.length);
    if (n < w.minSample || n === 0) continue;
    let bounces = 0;
    let complaints = 0;
    for (let i = ring.length - n; i < ring.length; i++) {
      if (ring[i] === 'b') bounces++;
      else if (ring[i] === 'c') complaints++;
    }
    if (bounces / n > w.maxBounceRate) return { window: w.name, signal: 'bounce', rate: bounces / n, threshold: w.maxBounceRate, sample: n };
    if (complaints / n > w.maxComplaintRate) {
      return { window: w.name, signal: 'complaint', rate: complaints / n, threshold: w.maxComplaintRate, sample: n };
    }
  }
  return null;
}
