import type { Clock } from '../../shared/clock.js';
import type { Coordination } from '../../shared/coord/types.js';
import { DEFAULT_PROFILE, type MtaPolicy } from '../policy.js';
import type { IspProfile } from '../stores/isp-profiles.js';

/** Adaptive rate of one (sending IP, destination) pair. */
export interface ThrottleState {
  /** Current sends per minute. */
  rate: number;
  /** Consecutive successes since the last step / 4xx. */
  ok: number;
  /** Consecutive 4xx replies. */
  fail: number;
  blockedUntil: number;
}

/** As stored: with the time it was written, so an unchanged state is rewritten only to keep it alive. */
type StoredThrottle = ThrottleState & { savedAt?: number };

export type SlotResult =
  /** `quiet`: the state read, when a success would change nothing stored (onResult then reads nothing). */
  | { ok: true; quiet: ThrottleState | null }
  | { ok: false; delayMs: number; reason: 'throttle' | 'throttle_blocked' };

const clamp = (v: number, lo: number, hi: number) => Math.min(hi, Math.max(lo, v));

/**
 * Sliding-window throttle per (IP, destination) at the ISP profile's current rate (phase 9),
 * adapted by delivery results: × backoffFactor on a 4xx, × recoveryFactor after
 * `recoverAfterSuccesses` successes in a row, always within [floor, ceiling]; blocked for
 * blockMs after `blockAfterFailures` 4xx in a row. The destination is the provider for a named
 * profile (its alias domains share one window) and the recipient domain otherwise.
 */
export class Throttle {
  constructor(
    private readonly coord: Coordination,
    private readonly clock: Clock,
    private readonly policy: MtaPolicy,
  ) {}

  static destination(profile: IspProfile, domain: string): string {
    return profile.domain === DEFAULT_PROFILE ? domain : profile.domain;
  }

  private stateKey = (ip: string, dest: string) => `mta:thr:s:${ip}:${dest}`;

  async state(ip: string, profile: IspProfile, domain: string): Promise<ThrottleState> {
    return this.fromStored(await this.stored(ip, profile, domain), profile);
  }

  private stored(ip: string, profile: IspProfile, domain: string): Promise<StoredThrottle | null> {
    return this.coord.getJson<StoredThrottle>(this.stateKey(ip, Throttle.destination(profile, domain)));
  }

  private fromStored(s: StoredThrottle | null, profile: IspProfile): ThrottleState {
    if (!s) return { rate: profile.defaultRate, ok: 0, fail: 0, blockedUntil: 0 };
    // A profile tuned since the state was written still bounds it.
    return { rate: clamp(s.rate, profile.floor, profile.ceiling), ok: s.ok, fail: s.fail, blockedUntil: s.blockedUntil };
  }

  /**
   * At the ceiling with no 4xx streak, a success changes nothing the throttle acts on (no
   * recovery step can raise the rate): the stored state stays as it is, rewritten once per
   * window only to keep it from expiring. A busy destination's every send wrote it (one
   * coordination write per message, the largest part of Redis's cost per message).
   */
  private quiet(stored: StoredThrottle | null, s: ThrottleState, profile: IspProfile, now: number): boolean {
    const t = this.policy.throttle;
    return !!stored && s.fail === 0 && s.rate >= profile.ceiling && stored.rate === s.rate && now - (stored.savedAt ?? -Infinity) < Math.min(t.windowMs, t.stateTtlMs / 2);
  }

  async acquire(ip: string, profile: IspProfile, domain: string): Promise<SlotResult> {
    const dest = Throttle.destination(profile, domain);
    const stored = await this.stored(ip, profile, domain);
    const s = this.fromStored(stored, profile);
    const now = this.clock.now();
    if (s.blockedUntil > now) return { ok: false, delayMs: s.blockedUntil - now, reason: 'throttle_blocked' };
    const t = this.policy.throttle;
    // The window is one minute and the rate per minute; a fractional rate rounds down, never below one send.
    const limit = Math.max(1, Math.floor(s.rate * (t.windowMs / 60_000)));
    const r = await this.coord.slidingWindow(`mta:thr:w:${ip}:${dest}`, limit, t.windowMs);
    if (!r.allowed) return { ok: false, delayMs: t.noSlotDeferMs, reason: 'throttle' };
    return { ok: true, quiet: this.quiet(stored, s, profile, now) ? s : null };
  }

  /**
   * Applies a delivery result: `temp` is an SMTP 4xx, `ok` a 2xx. Returns the new state. `quiet`
   * is what acquire found for this send: a success after it reads nothing more (a 4xx from
   * another instance meanwhile only misses this one success, as any two results racing would).
   */
  async onResult(ip: string, profile: IspProfile, domain: string, result: 'ok' | 'temp', quiet?: ThrottleState | null): Promise<ThrottleState> {
    if (result === 'ok' && quiet) return { ...quiet };
    const t = this.policy.throttle;
    const stored = await this.stored(ip, profile, domain);
    const s = this.fromStored(stored, profile);
    const now = this.clock.now();
    if (result === 'ok' && this.quiet(stored, s, profile, now)) return s;
    if (result === 'temp') {
      s.rate = clamp(s.rate * profile.backoffFactor, profile.floor, profile.ceiling);
      s.ok = 0;
      s.fail++;
      if (s.fail >= t.blockAfterFailures) {
        s.blockedUntil = now + t.blockMs;
        s.fail = 0;
      }
    } else {
      s.fail = 0;
      s.ok++;
      if (s.ok >= t.recoverAfterSuccesses) {
        s.rate = clamp(s.rate * profile.recoveryFactor, profile.floor, profile.ceiling);
        s.ok = 0;
      }
    }
    await this.coord.setJson(this.stateKey(ip, Throttle.destination(profile, domain)), { ...s, savedAt: now } satisfies StoredThrottle, t.stateTtlMs);
    return s;
  }
}
